"""The repo grader's feedback on a test file that holds visible and withheld tests: decided per test.

Before, a test file ``test_patch`` changed was withheld as a whole: a visible failing test in it got
"(a withheld test: its text is not shown)" instead of its traceback, and each failing withheld test
was named by its id, which often carries its input (``test_humanize[employee_salary-Employee salary]``:
input and expected output; 3 of the 209 withheld ids of the pack tasks) or hints at it
(``test_sliding_window_of_short_iterator``: 114 of 123 tasks' withheld names carry a word no visible
name has): a table of what is checked, built between repair attempts. Now a visible test (its function
the same in the workspace's copy) shows its traceback, its frames in the workspace's numbering and
lines (the verifier's run prints blanks there), a frame in a line the workspace lacks left out, and
the error text after it; withheld tests are only counted, with their exception types.

Budget: ~15 s on 2 cores (seven sandbox runs, two at a time).
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from posttrain.envs import get_domain
from posttrain.envs.repo import ENV
from posttrain.envs.repo._diff import parse_diff, render_diff
from posttrain.envs.repo._domain import response_of
from posttrain.envs.repo._gen import load_packs, record_of
from posttrain.envs.repo._hacks import DISCOUNT, FIXED, PRICING
from posttrain.envs.repo._task import initial_tree

PACK = {
    # task id: (a source file to leave the bug in, the test file holding visible and withheld tests)
    "toolz-signatures-remove_assign-766-4": ("toolz/_signatures.py", "toolz/tests/test_curried.py"),
    "inflection-init-remove_assign-198-4": ("inflection/__init__.py", "test_inflection.py"),
    "cachetools-descriptor-swap_statements-68-16": ("src/cachetools/__init__.py", "tests/test_cachedmethod.py"),
}
HELPER_TESTS = '''from shop.pricing import total


def _check(got, want):
    assert got == want


def test_total_with_discount():
    _check(total([10.0, 10.0], discount=0.25), 15.0)
'''
HELPER_VERIFIER = HELPER_TESTS.replace("    assert got == want\n",
                                       "    assert round(got, 2) == want, 'withheld-marker'\n") + '''

def test_quarter_off():
    _check(total([4.0], discount=0.75), 1.0)
'''


def _helper_task():
    """A hand-made task whose ``test_patch`` changes the helper a visible test calls and adds a test."""
    files = {"shop/__init__.py": "", "shop/pricing.py": PRICING, "shop/discount.py": DISCOUNT,
             "tests/__init__.py": "", "tests/test_pricing.py": HELPER_TESTS}
    return ENV.parse_task({
        "id": "repo-feedback-helper", "domain": "repo", "prompt": "total() ignores its discount argument.",
        "repo": {"files": files},
        "environment": {"language": "python", "test_command": "python -m pytest -q tests", "timeout_sec": 30},
        "fail_to_pass": ["tests/test_pricing.py::test_total_with_discount", "tests/test_pricing.py::test_quarter_off"],
        "pass_to_pass": [],
        "test_patch": render_diff({"tests/test_pricing.py": HELPER_TESTS}, {"tests/test_pricing.py": HELPER_VERIFIER}),
        "reference": response_of(render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": FIXED})),
    }, "helper")


def _task(task_id: str):
    return ENV.parse_task(record_of(next(r for r in load_packs() if r["id"] == task_id)), "repo packs")


def _bug_left_in(task, path: str) -> str:
    text = initial_tree(task.fields)[path].decode()
    return response_of(render_diff({path: text}, {path: text + "\n# looked here\n"}))


def _withheld_lines(task, path: str) -> list[str]:
    """The lines ``test_patch`` adds to ``path`` that the workspace's copy has nowhere."""
    workspace = {ln.strip() for ln in initial_tree(task.fields)[path].decode().splitlines()}
    added = [text.strip() for fp in parse_diff(task.fields["test_patch"]) if fp.path == path
             for h in fp.hunks for op, text in h.lines if op == "+"]
    return [ln for ln in added if len(ln) > 8 and ln not in workspace]


def _held(task) -> list[str]:
    """The failing tests whose function ``test_patch`` adds (the withheld ones)."""
    added = "".join(text for fp in parse_diff(task.fields["test_patch"]) for h in fp.hunks for op, text in h.lines
                    if op == "+")
    return [t for t in task.fields["fail_to_pass"] if f"def {_function(t)}(" in added]


def _function(test_id: str) -> str:
    return re.sub(r"\[.*\]$", "", test_id).split("::")[-1]


def _frames_match_the_workspace(feedback: str, task, path: str) -> int:
    """How many frames in ``path`` the feedback shows; each one's line is the workspace's line there."""
    lines, workspace = feedback.splitlines(), initial_tree(task.fields)[path].decode().splitlines()
    n = 0
    for i, ln in enumerate(lines):
        m = re.match(rf"^{re.escape(path)}:(\d+): in (\S+)$", ln)
        if m:
            assert lines[i + 1] == f"    {workspace[int(m[1]) - 1].strip()}", (ln, lines[i + 1])
            n += 1
    return n


@pytest.fixture(scope="module")
def verdicts(pool):
    verify = get_domain("repo").make_verifier(pool)
    tasks = {i: _task(i) for i in PACK} | {"helper": _helper_task()}
    jobs = [(i, "bug", t, _bug_left_in(t, PACK[i][0] if i in PACK else "shop/pricing.py")) for i, t in tasks.items()]
    jobs += [(i, "reference", t, str(t.reference)) for i, t in tasks.items() if i != "cachetools-descriptor-swap_statements-68-16"]
    with ThreadPoolExecutor(2) as ex:
        got = list(ex.map(lambda j: verify(j[2], j[3]), jobs))
    return tasks, {(j[0], j[1]): v for j, v in zip(jobs, got, strict=True)}


@pytest.mark.parametrize("task_id", list(PACK))
def test_a_visible_test_beside_withheld_ones_shows_its_traceback(verdicts, task_id):
    tasks, got = verdicts
    task, path = tasks[task_id], PACK[task_id][1]
    v = got[task_id, "bug"]
    assert (v.outcome, v.error_class) == ("fail", "assertion"), v.feedback
    assert "withheld test: its text" not in v.feedback
    shown = [t for t in task.fields["fail_to_pass"] if t.startswith(path) and t not in _held(task)]
    assert shown and any(f"{t} failed:\nE " in v.feedback or f"{t} failed:\n{path}:" in v.feedback for t in shown)
    assert _frames_match_the_workspace(v.feedback, task, path) >= 2  # (verifier's numbers and blank lines before)
    if (task_id, "reference") in got:
        assert got[task_id, "reference"].passed, got[task_id, "reference"].feedback


@pytest.mark.parametrize("task_id", list(PACK))
def test_withheld_tests_are_counted_never_named_nor_shown(verdicts, task_id):
    tasks, got = verdicts
    task, path = tasks[task_id], PACK[task_id][1]
    v = got[task_id, "bug"]
    held = _held(task)
    assert held and f"{len(held)} withheld test{'s' if len(held) > 1 else ''} failed (" in v.feedback
    for t in held:
        assert _function(t) not in v.feedback, t  # its name, its parameters
        assert t[t.index("["):] not in v.feedback if "[" in t else True, t
    leaked = [ln for ln in _withheld_lines(task, path) if ln in v.feedback]
    assert not leaked, leaked  # (test_curried.py: the withheld test calls should_curry, as the visible one does)


def test_a_frame_in_a_line_only_the_verifier_has_is_left_out_with_its_error(verdicts):
    tasks, got = verdicts
    v = got["helper", "bug"]
    assert v.feedback.splitlines()[1:] == [
        "1 withheld test failed (AssertionError; not shown)",
        "tests/test_pricing.py::test_total_with_discount failed:",
        "tests/test_pricing.py:9: in test_total_with_discount",
        "    _check(total([10.0, 10.0], discount=0.25), 15.0)",
        "E   AssertionError (its text not shown: raised after a line the workspace does not have)"], v.feedback
    assert "withheld-marker" not in v.feedback and "round(" not in v.feedback and "test_quarter_off" not in v.feedback
    assert got["helper", "reference"].passed, got["helper", "reference"].feedback
