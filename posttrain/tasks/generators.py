"""The scripted demonstrator, the train/eval split, and the repair family (moving to the code domain).

The quickstart's task families live in their domains (``posttrain.envs.math`` /
``posttrain.envs.code``: ``Env.task_families``, looked up by name through the registry).

The demonstrator is wrong on a known fraction of tasks, in a plausible way its domain defines
(``Env.demonstration_mistake``: a sign error in math, the wrong operator in code). SFT on its
demonstrations learns its mistakes too, so imitation alone has a ceiling near the demonstrator's
accuracy; RL against the verifier can go past it.

Not here: the domains' task schemas and verifiers (``posttrain.envs``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from posttrain.types import Task, TaskLimits


@dataclass(frozen=True)
class Demonstrator:
    """A scripted demonstrator that is wrong on a fixed fraction of tasks.

    Whether it errs on a task is a deterministic function of the task id and ``seed``, so the
    same task always gets the same demonstration and its accuracy on any split is measurable.
    """

    error_rate: float = 0.4
    seed: int = 0

    def knows(self, task: Task) -> bool:
        """Whether it can demonstrate ``task``: one with a reference whose domain has a mistake for it."""
        return task.reference is not None and _mistake(task) is not None

    def errs_on(self, task: Task) -> bool:
        return random.Random(f"{self.seed}:{task.id}").random() < self.error_rate

    def respond(self, task: Task) -> str:
        if task.reference is None:
            raise ValueError(f"task {task.id} has no reference response")
        if not self.errs_on(task):
            return task.reference
        mistake = _mistake(task)
        if mistake is None:
            raise ValueError(f"the scripted demonstrator has no mistake for task {task.id} ({task.domain})")
        return mistake


def _mistake(task: Task) -> str | None:
    from posttrain.envs import HasDemonstrationMistakes, get_env, is_registered

    env = get_env(task.domain) if is_registered(task.domain) else None
    return env.demonstration_mistake(task) if isinstance(env, HasDemonstrationMistakes) else None


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

    The prompt is the bare signature (no docstring): the embedded default copies ``k`` out of the
    feedback only once SFT crosses a plateau, and with a 64-character prompt and a 95-character
    feedback line it had not crossed after 800 steps; at about 110 tokens per episode it crosses
    near step 500 (issue 10's repair demonstration).
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
                    prompt=f"def {fn}({var}):\n",  # short: see the docstring
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


def repair_attempts(task: Task, demo: Demonstrator) -> list[str]:
    """The scripted demonstrator's attempts in a repair episode: a guess (``repair_guess``), then
    the fix read off the feedback (the reference). On the tasks it errs on (``demo.errs_on``) it
    ignores the feedback and resubmits its guess until attempts run out, so SFT on its episodes
    reads feedback on about ``1 - error_rate`` of tasks and repeats an ignored one: imitation's
    ceiling, which RL over repair episodes can pass and single-turn RL cannot (issue 10).
    """
    guess = repair_guess(task)
    if demo.errs_on(task):
        return [guess] * task.limits.max_attempts
    return [guess, str(task.reference)]
