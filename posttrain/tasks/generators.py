"""Procedural task pools for the quickstart: small algebra (math domain) and small Python
functions (code domain), each task with a reference response, plus an imperfect demonstrator.

Why these tasks: the embedded default is a tiny character-level model trained from scratch in a
few minutes on 2 CPU cores, so the skills must be learnable that fast *and* generalize to held-out
tasks. Both domains are solved by reading the right number or operator out of the prompt — an
attention-friendly skill — while still being checked by the real verifiers (math-verify
equivalence of a ``\\boxed{}`` answer; HumanEval-style ``check(candidate)`` tests in the sandbox).

The demonstrator is wrong on a known fraction of tasks, in a plausible way (a sign error when
it moves a term across the equals sign; the wrong operator in code). SFT on its demonstrations learns its mistakes
too, so imitation alone has a ceiling near the demonstrator's accuracy; RL against the verifier
can go past it.

Not here: the domains' task schemas and verifiers (``posttrain.envs``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from posttrain.types import Task, TaskLimits

_MATH_TEMPLATES = (
    # Solve a linear equation for x; the answer is b. A careless solver moves b across the "="
    # without flipping its sign and answers -b.
    "x-{b}=0. x=",
    "0=x-{b}. x=",
    "{b}-x=0. x=",
    "-x=-{b}. x=",
    "0={b}-x. x=",
    "-{b}+x=0. x=",
    "Solve x-{b}=0. x=",
    "Solve {b}-x=0. x=",
)

_CODE_OPS = {
    # name: (docstring verb, python operator, the operator a confused demonstrator writes)
    "add": ("plus", "+", "-"),
    "sub": ("minus", "-", "+"),
    "mul": ("times", "*", "+"),
}
_CODE_VARS = ("x", "n", "v", "a")


def math_tasks(*, seed: int = 0) -> list[Task]:
    """All math tasks of the quickstart family (8 templates x 10..99), shuffled by ``seed``."""
    rng = random.Random(seed)
    tasks = []
    for t_idx, template in enumerate(_MATH_TEMPLATES):
        for b in range(10, 100):
            tasks.append(
                Task(
                    id=f"qs-math-{t_idx}-{b}",
                    domain="math",
                    prompt=template.format(b=b),
                    fields={"answer": str(b)},
                    reference=f"\\boxed{{{b}}}",
                    tags=("algebra", f"template{t_idx}"),
                    metadata={"distractor": str(-b)},
                )
            )
    rng.shuffle(tasks)
    return tasks


def code_tasks(*, seed: int = 0) -> list[Task]:
    """All code tasks of the quickstart family (3 ops x 4 argument names x 98 constants), shuffled."""
    rng = random.Random(seed)
    tasks = []
    for op, (verb, sym, _) in _CODE_OPS.items():
        for var in _CODE_VARS:
            for k in range(2, 100):
                name = f"{op}_{k}"
                prompt = f'def {name}({var}):\n    """Return {var} {verb} {k}."""\n'
                xs = (3, 10, 41)
                asserts = "\n".join(f"    assert candidate({x}) == {eval_op(x, sym, k)}" for x in xs)
                tasks.append(
                    Task(
                        id=f"qs-code-{name}-{var}",
                        domain="code",
                        prompt=prompt,
                        fields={"entry_point": name, "test": f"def check(candidate):\n{asserts}\n"},
                        reference=f"    return {var} {sym} {k}\n",
                        tags=("python", op),
                        limits=TaskLimits(timeout_s=5.0, memory_mb=256),
                    )
                )
    rng.shuffle(tasks)
    return tasks


def eval_op(x: int, sym: str, k: int) -> int:
    """The ground truth of a code task, computed without eval."""
    return {"+": x + k, "-": x - k, "*": x * k}[sym]


@dataclass(frozen=True)
class Demonstrator:
    """A scripted demonstrator that is wrong on a fixed fraction of tasks.

    Whether it errs on a task is a deterministic function of the task id and ``seed``, so the
    same task always gets the same demonstration and its accuracy on any split is measurable.
    """

    error_rate: float = 0.4
    seed: int = 0

    def knows(self, task: Task) -> bool:
        """Whether it can demonstrate ``task``: a quickstart-family task (it knows their mistakes)."""
        if task.reference is None:
            return False
        if task.domain == "math":
            return "distractor" in task.metadata
        if task.domain == "code":
            return str(task.fields.get("entry_point", "")).split("_")[0] in _CODE_OPS
        return False

    def errs_on(self, task: Task) -> bool:
        return random.Random(f"{self.seed}:{task.id}").random() < self.error_rate

    def respond(self, task: Task) -> str:
        if task.reference is None:
            raise ValueError(f"task {task.id} has no reference response")
        if not self.errs_on(task):
            return task.reference
        if task.domain == "math":
            return f"\\boxed{{{task.metadata['distractor']}}}"
        if task.domain == "code":
            op = task.fields["entry_point"].split("_")[0]
            _, sym, wrong = _CODE_OPS[op]
            return task.reference.replace(f" {sym} ", f" {wrong} ", 1)
        raise ValueError(f"the quickstart demonstrator has no mistakes for domain {task.domain!r}")


def split_tasks(tasks: list[Task], *, n_eval: int) -> tuple[list[Task], list[Task]]:
    """First ``n_eval`` tasks are held out; the rest train. Ids are unique, so the splits share no task."""
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError("task ids must be unique before splitting")
    return tasks[n_eval:], tasks[:n_eval]


# --- The feedback-only family (issue 10): the prompt hides a constant that only feedback shows.

_REPAIR_NAMES = ("shift", "offset", "bump", "nudge", "lift", "move")
_REPAIR_HIDDEN_XS = (3, 10, 41)


def repair_tasks(*, seed: int = 0) -> list[Task]:
    """The feedback-only family (code domain), shuffled by ``seed``: ``def shift_qzk(x): return x + k``
    with ``k`` in 2..99 that the prompt does not state.

    A first attempt can only guess ``k``; the one visible test, ``assert candidate(0) == k``, shows
    it in the feedback of a failed attempt (the code verifier shows the failing test's line), so a
    repair succeeds by reading the feedback. Three hidden tests (``x`` in 3, 10, 41) are run too and
    only their count is shown: echoing the shown value (``return k``) or special-casing the shown
    input (``if x == 0: return k``) fails them. ``fields.test`` holds all four tests (a single-turn
    verifier checks everything); ``metadata.visible_tests`` / ``metadata.hidden_tests`` split them
    for ``posttrain.rollout.RepairEnv``. ``limits.max_attempts`` is 3. Every task's function name
    has its own three-letter suffix (drawn independently of ``k``), so no two tasks share a prompt
    and a held-out task's prompt was never trained on.
    """
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    suffixes = [a + b + c for a in letters for b in letters for c in letters]
    rng.shuffle(suffixes)
    tasks = []
    var = "x"  # one argument name: the skill is reading k off the feedback, not copying names
    for name in _REPAIR_NAMES:
        for _copy in range(4):
            for k in range(2, 100):
                fn = f"{name}_{suffixes[len(tasks)]}"
                visible = f"def check(candidate):\n    assert candidate(0) == {k}\n"
                hidden = "def check(candidate):\n" + "".join(
                    f"    assert candidate({x}) == {x + k}\n" for x in _REPAIR_HIDDEN_XS)
                tasks.append(Task(
                    id=f"rp-{fn}-{k}",
                    domain="code",
                    prompt=f'def {fn}({var}):\n    """Return {var} plus the secret constant."""\n',
                    fields={"entry_point": fn, "test": visible + hidden.split("\n", 1)[1]},
                    reference=f"    return {var} + {k}\n",
                    tags=("python", "repair"),
                    limits=TaskLimits(timeout_s=5.0, memory_mb=256, max_attempts=3),
                    metadata={"visible_tests": visible, "hidden_tests": hidden,
                              "n_hidden": len(_REPAIR_HIDDEN_XS)},
                ))
    rng.shuffle(tasks)
    return tasks


def repair_guess(task: Task) -> str:
    """A first attempt that can only guess: a fixed wrong constant (1 is never a family's ``k``)."""
    var = task.prompt.split("(", 1)[1].split(")", 1)[0]
    return f"    return {var} + 1\n"
