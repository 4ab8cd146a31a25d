"""The quickstart's math family (``quickstart-math``) and the scripted demonstrator's mistake on it.

Why these tasks: the embedded default is a tiny character-level model trained from scratch in a
few minutes on 2 CPU cores, so the skill must be learnable that fast *and* generalize to held-out
tasks: solve ``x-b=0`` for x by reading ``b`` out of the prompt (an attention-friendly skill),
checked by the real math verifier (one ``\\boxed{}`` answer, compared exactly).

The demonstrator's mistake is plausible: it moves ``b`` across the equals sign without flipping
its sign and answers ``-b`` (``metadata.distractor``). SFT on its demonstrations learns the
mistake too; RL against the verifier can go past it.
"""

from __future__ import annotations

import random

from posttrain.types import Task

NAME = "math"
FAMILY = "quickstart-math"

_TEMPLATES = (
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


def quickstart_tasks(*, seed: int = 0) -> list[Task]:
    """All math tasks of the quickstart family (8 templates x 10..99), shuffled by ``seed``."""
    rng = random.Random(seed)
    tasks = []
    for t_idx, template in enumerate(_TEMPLATES):
        for b in range(10, 100):
            tasks.append(
                Task(
                    id=f"qs-math-{t_idx}-{b}",
                    domain=NAME,
                    prompt=template.format(b=b),
                    fields={"answer": str(b)},
                    reference=f"\\boxed{{{b}}}",
                    tags=("algebra", f"template{t_idx}"),
                    metadata={"distractor": str(-b)},
                )
            )
    rng.shuffle(tasks)
    return tasks


def demonstration_mistake(task: Task) -> str | None:
    """The demonstrator's wrong answer to a quickstart-family task (the sign error), else None."""
    distractor = task.metadata.get("distractor")
    return None if distractor is None else f"\\boxed{{{distractor}}}"
