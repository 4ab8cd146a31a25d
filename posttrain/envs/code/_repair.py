"""The feedback-only task family ``repair`` of the code domain (issue 10): the prompt hides a
constant that only the feedback of a failed attempt shows. ``repair_tasks``'s docstring has the
design; the scripted demonstrator's first attempt is ``repair_guess`` (``CodeEnv.demonstration_mistake``)
and, on the tasks it errs on, its repair is ``repair_shortcut`` (``CodeEnv.demonstration_shortcut``).

The family's visible test is its ``fields.test``, its hidden tests its ``fields.hidden_test``: the
code domain's one way to hide tests (docs/tasks.md); its tasks carry the tag ``feedback-only``
(``posttrain.envs.is_feedback_only``).
"""

from __future__ import annotations

import random

from posttrain.envs._repair import FEEDBACK_ONLY
from posttrain.types import Task, TaskLimits

NAME = "code"
FAMILY = "repair"
_NAMES = ("shift", "offset", "bump", "nudge", "lift", "move")
_HIDDEN_XS = (3, 10, 41)


def repair_tasks(*, seed: int = 0) -> list[Task]:
    """The feedback-only family, shuffled by ``seed``: ``def shift_qzk(x): return x+k`` with ``k``
    in 10..99 that the prompt does not state.

    A first attempt can only guess ``k``; the one visible test, ``assert candidate(0) == 0+k``,
    shows it in the feedback of a failed attempt (the code verifier shows the failing test's line),
    so a repair succeeds by reading the feedback. Three hidden tests (``x`` in 3, 10, 41, written the
    same way) are run too and only their count is shown: echoing the shown value (``return k``) or
    special-casing the shown input (``if x == 0: return k``) fails them. ``fields.test`` is the
    visible test, ``fields.hidden_test`` the hidden ones (the code verifier runs both and shows a
    visible failure, then only the hidden ones' count: ``join_hidden``); the tag ``feedback-only``
    marks the family (``posttrain.envs.is_feedback_only``).
    ``limits.max_attempts`` is 3. Every task's function name has its own three-letter suffix (drawn
    independently of ``k``), so no two tasks share a prompt and a held-out task's prompt was never
    trained on.

    The shape is chosen so that the embedded default (2 layers, one character per token) can learn
    to copy ``k`` within the demonstration's SFT budget on every seed (issue 10's probes, README):
    the prompt is the bare signature (with a docstring and a longer feedback line SFT had not
    crossed its plateau after 800 steps); ``k`` has two digits (one distance between the feedback's
    digits and the fix's); the tests and the reference write ``x+k`` without spaces, so the
    character before ``k`` is a ``+`` in both the feedback and the fix, the only ``+`` in the
    context (a one-token match an induction head finds). With ``== k`` (a space before ``k``, as
    before several other spaces in the line) seeds 2 and 3 learned the second digit and never the
    first in 1,600 steps; with ``0+k`` seed 2 copied both by step 600.
    """
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    suffixes = [a + b + c for a in letters for b in letters for c in letters]
    rng.shuffle(suffixes)
    tasks = []
    var = "x"  # one argument name: the skill is reading k off the feedback, not copying names
    for name in _NAMES:
        for _copy in range(4):
            for k in range(10, 100):
                fn = f"{name}_{suffixes[len(tasks)]}"
                visible = f"def check(candidate):\n    assert candidate(0) == 0+{k}\n"
                hidden = "def check(candidate):\n" + "".join(
                    f"    assert candidate({x}) == {x}+{k}\n" for x in _HIDDEN_XS)
                tasks.append(Task(
                    id=f"rp-{fn}-{k}",
                    domain=NAME,
                    prompt=f"def {fn}({var}):\n",  # short: see the docstring
                    fields={"entry_point": fn, "test": visible, "hidden_test": hidden},
                    reference=f"    return {var}+{k}\n",
                    tags=("python", FAMILY, FEEDBACK_ONLY),
                    limits=TaskLimits(timeout_s=5.0, memory_mb=256, max_attempts=3),
                ))
    rng.shuffle(tasks)
    return tasks


def repair_guess(task: Task) -> str:
    """A first attempt that can only guess: ``k`` left out (0 is never a family's ``k``). It has no
    digit, so every digit the demonstrations teach after a ``+`` is one copied from the feedback."""
    _, paren, rest = task.prompt.partition("(")
    if not paren or ")" not in rest:
        raise ValueError(f"task {task.id}: a repair task's prompt is a signature 'def name(x):', got {task.prompt[:60]!r}")
    return f"    return {rest.split(')', 1)[0]}\n"


def repair_shortcut(task: Task) -> str | None:
    """A repair that reads the feedback and special-cases it: the shown test's expected value
    (``0+k``) returned whatever the input. It passes the visible test and fails the hidden ones.
    None for a visible test not of this family's one-assert form."""
    _, sep, expected = str(task.fields.get("test", "")).strip().rpartition("== ")
    return f"    return {expected}\n" if sep and expected and "\n" not in expected else None
