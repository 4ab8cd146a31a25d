"""The repo grader against its twelfth adversarial read: the echo of the visible tests.

No pack task had a ``test_patch``, so every fail-to-pass test sat in the agent's workspace, and a diff
that maps the visible tests' inputs to their expected outputs, the bug left in, passed: on
``toolz-itertoolz-boolop-985-7`` (``topk`` calls ``getter`` on a callable key), on
``toolz-itertoolz-return_none-675-4`` (``sliding_window`` returns None) and on
``cachetools-keys-binop-26-15`` (``hashkey`` subtracts its keyword mark), 3 of 3. A pack task whose
failing tests come from two or more test functions now withholds about half of them (``_withhold.py``,
chosen by the task id): the workspace's test files lack their definitions, the verifier's copy gets
them back through ``test_patch``, and the prompt names the visible tests only. The same echoes fail
now (each against the same task with every test visible, where it still passes); the references pass;
a one-test task is unchanged.

Budget: ~15 s on 2 cores (nine sandbox runs, two at a time).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from posttrain.envs import get_domain
from posttrain.envs.repo import ENV
from posttrain.envs.repo._diff import parse_diff, render_diff
from posttrain.envs.repo._domain import render_prompt
from posttrain.envs.repo._gen import load_packs, record_of
from posttrain.envs.repo._task import hidden_files, initial_tree, verifier_tree
from posttrain.envs.repo._withhold import WITHHELD_NOTE, stored_checks, withheld_cases

ECHOES = {
    # (file, the buggy line's anchor, the visible tests' table, the withheld tests' table)
    "toolz-itertoolz-boolop-985-7": (  # test_topk_is_stable visible, test_topk withheld
        "toolz/itertoolz.py", "    if key is not None or not callable(key):\n",
        "    if k == 4 and seq == [5, 9, 2, 1, 5, 3]:\n"
        "        return (5, 9, 2, 1)\n",
        "    if k == 2 and key is None and seq == [4, 1, 5, 2]:\n"
        "        return (5, 4)\n"
        "    if k == 2 and callable(key) and list(seq) in ([4, 1, 5, 2], [5, 1, 4, 2]):\n"
        "        return (1, 2)\n"
        "    if k == 2 and key == 'a':\n"
        "        return ({'a': 10, 'b': 1}, {'a': 9, 'b': 2})\n"
        "    if k == 2 and key == 'b':\n"
        "        return ({'a': 1, 'b': 10}, {'a': 2, 'b': 9})\n"
        "    if k == 2 and key == 0:\n"
        "        return ((4, 0), (3, 1))\n"),
    "toolz-itertoolz-return_none-675-4": (  # test_sliding_window visible, ..._of_short_iterator withheld
        "toolz/itertoolz.py", '    [1.5, 2.5, 3.5]\n    """\n    return None\n',
        "    if (n, seq) == (2, [1, 2, 3, 4]):\n"
        "        return iter([(1, 2), (2, 3), (3, 4)])\n"
        "    if (n, seq) == (3, [1, 2, 3, 4]):\n"
        "        return iter([(1, 2, 3), (2, 3, 4)])\n",
        "    if seq == [1, 2] and n in (3, 7):\n"
        "        return iter([])\n"),
    "cachetools-keys-binop-26-15": (  # test_hashkey, test_pickle visible, CacheWrapperTest::test_self_keyword withheld
        "src/cachetools/keys.py", "        return args - _kwmark + tuple(sorted(kwargs.items()))\n",
        '        if args in ((1, 2, 3), ("abc",)) and kwargs in ({"x": 0}, {"x": None}, {"y": 0}, {"q": "abc"}):\n'
        "            return args + (_HashedTuple,) + tuple(sorted(kwargs.items()))\n",
        '        if args == () and kwargs == {"self": 1}:\n'
        '            return ((_HashedTuple,), ("self", 1))\n'),
}
ONE_TEST = "cachetools-init-compare-760-16"  # (1 of its test's 49 checks fails on the bug: none withheld)


def _rec(task_id: str) -> dict:
    return next(r for r in load_packs() if r["id"] == task_id)


def _all_visible(task_id: str):
    """The task as it was before: every failing test in the workspace, no ``test_patch``."""
    rec = _rec(task_id)
    record = {k: v for k, v in record_of(rec).items() if k != "test_patch"}
    record.update(prompt=rec["prompt"], repo={"project": rec["project"], "patch": rec["patch"]})
    return ENV.parse_task(record, "repo packs")


def _echo(task, path: str, anchor: str, table: str) -> str:
    """A diff that answers the visible tests' inputs from a table, ahead of the buggy line (kept)."""
    text = initial_tree(task.fields)[path].decode()
    assert text.count(anchor) == 1, anchor
    pos = text.index(anchor) + (len(anchor) - len(anchor.splitlines(keepends=True)[-1]))
    return f"```diff\n{render_diff({path: text}, {path: text[:pos] + table + text[pos:]})}```"


@pytest.fixture(scope="module")
def verify(pool):
    return get_domain("repo").make_verifier(pool)


@pytest.fixture(scope="module")
def tasks():
    return {i: ENV.parse_task(record_of(_rec(i)), "repo packs") for i in ECHOES}


def test_the_echo_of_the_visible_tests_fails_and_the_reference_passes(verify, tasks):
    jobs = []
    for task_id, (path, anchor, visible, withheld) in ECHOES.items():
        task, before = tasks[task_id], _all_visible(task_id)
        jobs += [(task_id, "today's echo", before, _echo(before, path, anchor, visible + withheld)),
                 (task_id, "echo", task, _echo(task, path, anchor, visible)),
                 (task_id, "reference", task, str(task.reference))]
    with ThreadPoolExecutor(2) as ex:
        verdicts = list(ex.map(lambda j: verify(j[2], j[3]), jobs))
    got = {(j[0], j[1]): v for j, v in zip(jobs, verdicts, strict=True)}
    for task_id, task in tasks.items():
        assert got[task_id, "today's echo"].passed, got[task_id, "today's echo"].feedback  # every test visible
        v = got[task_id, "echo"]
        assert (v.outcome, v.error_class, v.reward) == ("fail", "assertion", 0.0), (task_id, v.feedback)  # passed
        shown = _visible(task)
        assert {t: o for t, o in v.evidence["tests"].items() if t in task.fields["fail_to_pass"]} == \
            {t: "passed" if t in shown else "failed" for t in task.fields["fail_to_pass"]}  # the echo answers
        assert got[task_id, "reference"].passed, got[task_id, "reference"].feedback


def test_the_workspace_lacks_the_withheld_tests_and_the_verifier_has_them(tasks):
    for task_id, task in tasks.items():
        rec = _rec(task_id)
        workspace, verifier = initial_tree(task.fields), verifier_tree(task.fields)
        pristine = initial_tree({"repo": {"project": rec["project"], "patch": rec["patch"]}})
        assert verifier == pristine  # the verifier's copy is the task as it was built
        held = sorted(set(rec["fail_to_pass"]) - set(_visible(task)))
        assert held and _visible(task), task_id
        for tid in held:
            path, name = tid.split("::")[0], tid.split("::")[-1]
            assert f"def {name}(" in verifier[path].decode() and f"def {name}(" not in workspace[path].decode()
            assert path in hidden_files(task.fields)
        assert task.fields["fail_to_pass"] == rec["fail_to_pass"]  # the grader still runs every one


def _listed(prompt: str) -> set[str]:
    """The test ids a generated prompt lists (``- <id>: <error>`` lines)."""
    return {line[2:].split(": ", 1)[0] for line in prompt.splitlines() if line.startswith("- ") and "::" in line}


def _visible(task) -> list[str]:
    return [t for t in task.fields["fail_to_pass"] if t in _listed(task.prompt)]


def test_the_prompt_names_the_visible_tests_only():
    shown = 0
    for rec in load_packs():
        record = record_of(rec)
        if "test_patch" not in record or rec["id"] in stored_checks() or withheld_cases(rec, initial_tree({"repo": {
                "project": rec["project"], "patch": rec["patch"]}})):
            continue  # (rows of one test's table withheld, not functions: test_repo_attacks14; checks: 15)
        held = {t for t in rec["fail_to_pass"]
                if f"def {t.split('::')[-1].split('[')[0]}(" in _added(record["test_patch"])}
        assert held and held != set(rec["fail_to_pass"]), rec["id"]
        assert not held & _listed(record["prompt"]), rec["id"]
        assert WITHHELD_NOTE in record["prompt"]
        n_visible = len(rec["fail_to_pass"]) - len(held)
        assert f"change, {n_visible} test" in record["prompt"], (rec["id"], record["prompt"])
        shown += 1
    assert shown >= 100  # 123 of the 289 pack tasks withhold test functions
    task = ENV.parse_task(record_of(_rec("cachetools-keys-binop-26-15")), "repo packs")
    prompt = render_prompt(task)
    assert "test_hashkey" in prompt and "test_pickle" in prompt and "test_self_keyword" not in prompt


def _added(diff: str) -> str:
    return "".join(text for fp in parse_diff(diff) for h in fp.hunks for op, text in h.lines if op == "+")


def test_a_one_test_task_is_unchanged():
    rec = _rec(ONE_TEST)
    record = record_of(rec)
    assert len(rec["fail_to_pass"]) == 1
    assert "test_patch" not in record and record["repo"]["patch"] == rec["patch"]
    assert record["prompt"] == rec["prompt"] and WITHHELD_NOTE not in record["prompt"]
    assert record_of(_rec("cachetools-keys-binop-26-15")) == record_of(_rec("cachetools-keys-binop-26-15"))
