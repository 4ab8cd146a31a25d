"""A sixth read of the code domain as a reward-hacking policy: the docstring's examples answered from
a table, and a constant (or the argument itself) for every other call.

The generated tasks' hidden tests were four random cases: on about 1 task in 100 all four expected
a default (``sum_multiples`` of lists with no multiple: 0; ``count_above`` of small numbers: 0) or
the first example's output, and on about 1 in 200 each was its own argument (``rotate_left`` of a
list whose length divides the shift), so the table passed the visible test and the hidden one.
Measured through the real verifier over 2,000 generated tasks (seed 0) with the defaults 0, '', [],
None, False and the first example's output: 63 of 12,000 cheats passed, on 26 tasks (every one the
host-side screen below predicted); over 1,000 tasks with the argument as a seventh, 37 of 7,000 on 18.
The hidden cases are now decisive (``_gen._hidden_cases``): new inputs, not all one expected value,
one of them no default, no shown output and not its argument: 0 of 7,000 pass (1,000 tasks, seed 0).
The tasks below are ones the cheats passed before (seeds 0 and 1: 19 of their 77 cheats passed); each
cheat now fails them as ``hidden_tests``, and their references pass.
"""

from __future__ import annotations

import ast
import functools
import random

import pytest

from posttrain.envs.code import ENV, _gen
from posttrain.envs.code._env import verify_code_batch
from posttrain.types import Task

DEFAULTS = {"0": "0", "empty str": "''", "empty list": "[]", "None": "None", "False": "False",
            "first output": None, "the argument": "a[0]"}
"""What the cheat returns for a call not in its table (None: the first example's output)."""

_WEAK_BEFORE = {0: (88, 353, 496, 777, 1389, 1654, 1827, 74, 1551), 1: (549, 458)}
"""Generated tasks (seed: indices) that a cheat passed before the fix: sum_multiples (0, False, the
first output), count_above (0; the first output), digit_sum_mod (0), rotate_left ([]; the argument),
running_max_plus (the argument)."""


@functools.cache
def _generated(seed: int, n: int) -> tuple[Task, ...]:
    return tuple(ENV.generate_tasks(n, seed=seed))


def _weak_before() -> list[Task]:
    tasks = [_generated(seed, 2000)[i] for seed, indices in _WEAK_BEFORE.items() for i in indices]
    assert {t.tags[1] for t in tasks} == {"sum_multiples", "count_above", "digit_sum_mod", "rotate_left",
                                          "running_max_plus"}
    return tasks


def _examples(task: Task) -> dict[str, str]:
    """``{arguments as written: expected as written}`` of the prompt's ``>>>`` examples."""
    head = f">>> {task.fields['entry_point']}("
    lines = task.prompt.splitlines()
    return {line.strip()[len(head):-1]: lines[i + 1].strip()
            for i, line in enumerate(lines) if line.strip().startswith(head)}


def _cheat(task: Task, default: str | None) -> str:
    """The prompt's examples from a table; ``default`` for any other call."""
    table = _examples(task)
    fallback = next(iter(table.values())) if default is None else default
    entries = ", ".join(f"{args!r}: {out}" for args, out in table.items())
    return (f"```python\n_T = {{{entries}}}\ndef {task.fields['entry_point']}(*a):\n"
            f"    key = ', '.join(map(repr, a))\n    if key in _T:\n        return _T[key]\n    return {fallback}\n```\n")


def _hidden(task: Task) -> list[tuple[str, object]]:
    """``(arguments as written, expected value)`` of each hidden assert."""
    check = ast.parse(task.fields["hidden_test"]).body[0]
    return [(", ".join(ast.unparse(a) for a in st.test.left.args), ast.literal_eval(st.test.comparators[0]))
            for st in check.body]


_MISSING = object()


def _cheat_passes_on_host(task: Task, default: str | None) -> bool:
    """What the verifier says of ``_cheat`` (the test's ``==`` on each hidden case), without a sandbox."""
    return default in _passing_cheats(task)


def _passing_cheats(task: Task) -> set[str | None]:
    """The ``DEFAULTS`` values whose ``_cheat`` answers every hidden case of ``task`` right."""
    table = {args: ast.literal_eval(out) for args, out in _examples(task).items()}
    hidden = [(args, table.get(args, _MISSING), expected) for args, expected in _hidden(task)]

    def answers(default: str | None) -> bool:
        for args, known, expected in hidden:
            if known is _MISSING:
                known = (next(iter(table.values())) if default is None  # every template takes one argument
                         else ast.literal_eval(args if default == "a[0]" else default))
            if known != expected:
                return False
        return True

    return {d for d in DEFAULTS.values() if answers(d)}


@pytest.mark.parametrize("seed", [0, 1])
def test_no_generated_task_is_passed_by_a_table_of_its_examples(seed: int) -> None:
    """Over 2,000 tasks a seed, no table of the examples with a default or the argument would pass
    the hidden tests; every hidden input is new and their expected values are not all equal."""
    for task in _generated(seed, 2000):
        shown = _examples(task)
        hidden = _hidden(task)
        assert not _passing_cheats(task), task.id
        assert len({args for args, _ in hidden}) == len(hidden) and not {args for args, _ in hidden} & set(shown)
        assert any(out != hidden[0][1] for _, out in hidden), task.id


def test_where_no_output_can_tell_the_hidden_cases_still_differ() -> None:
    """``digit_sum_mod`` modulo 3 with examples answering 1 and 2 leaves only the default 0 untold:
    the hidden cases then hold a non-default value and a second value, so no constant passes."""
    fn = _gen._reference_fn(next(t for t in _gen._TEMPLATES if t.name == "digit_sum_mod"), 3, "f")
    examples = [(1,), (2,)]
    hidden = _gen._hidden_cases(next(t for t in _gen._TEMPLATES if t.name == "digit_sum_mod"), fn, examples,
                                [(3,), (30,), (300,), (1,)], random.Random(0))
    outs = [fn(*a) for a in hidden]
    assert len(hidden) == 4 and not {a for a in hidden} & set(examples) and len(set(outs)) >= 2 and set(outs) - {0}


def test_decisive_hidden_cases_are_kept_as_drawn() -> None:
    """A task whose drawn hidden cases already tell keeps them (the generator's stream is unchanged)."""
    template = next(t for t in _gen._TEMPLATES if t.name == "shift_all")
    fn = _gen._reference_fn(template, 3, "f")
    drawn = [([1],), ([2, 5],), ([],), ([7, 7],)]
    assert _gen._hidden_cases(template, fn, [([0],), ([4],)], drawn, random.Random(0)) == drawn


@pytest.mark.parametrize("default", list(DEFAULTS))
def test_the_examples_table_fails_the_tasks_it_passed(pool, default: str) -> None:
    tasks = _weak_before()
    verdicts = [v for i in range(0, len(tasks), 8) for v in verify_code_batch(
        pool, [(t, _cheat(t, DEFAULTS[default])) for t in tasks[i:i + 8]])]
    assert [v.error_class for v in verdicts] == ["hidden_tests"] * len(tasks), [
        (t.id, v.outcome, v.error_class) for t, v in zip(tasks, verdicts, strict=True)]
    assert not any(_cheat_passes_on_host(t, DEFAULTS[default]) for t in tasks)


def test_the_references_of_those_tasks_pass(pool) -> None:
    tasks = _weak_before()
    verdicts = [v for i in range(0, len(tasks), 8) for v in verify_code_batch(
        pool, [(t, t.reference) for t in tasks[i:i + 8]])]
    assert all(v.passed for v in verdicts), [
        (t.id, v.error_class, v.reason) for t, v in zip(tasks, verdicts, strict=True)]
