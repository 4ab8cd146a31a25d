"""The repo grader against its eighth adversarial read: the ``add_unit_tests`` constraint, met by a test of the
diff rather than of the issue.

The check asked that a new test fail on the unchanged repository and pass with the change. A test that
asserts something only the diff makes true does that without testing the bug: a name the diff adds
(``assert getattr(module, "_fixed", False)``), or a changed file's bytes (``sha256(file) != <the unchanged
file's hash>``). With the reference's fix and either test, every pack task given the constraint passed: the
marker 12 of 12, the hash 4 of 4 (an honest test 5 of 5). Now a new test catches the bug only if it also
passes with the reference's source fix in place of the diff's (the marker does not), and fails on the
unchanged repository with a comment line added to each file the diff changes (the hash passes there): 0 of
12 each; the honest test 5 of 5 and the example task's gold still pass.

- the kernel resolved a relative path from ``posix.getcwd()``, which raises once the working directory is
  removed; the code under test that made a directory its working directory, removed it and opened a
  relative path made the kernel report its own error: an infra error (excluded from the update, better than
  the 0 of an honest wrong answer), 20 of 20 pack tasks with the prelude at the top of the bug file. Now a
  ``cut_short`` fail, as an honest failure (no path is known: ``..`` from a removed directory still reaches
  its old parents, so the kernel cannot let the open through unchecked).

- the kernel checks a path when its ``open`` event fires, before the system call resolves it: a thread of
  the code under test changed where the path led in between. ``os.chdir("/work")`` from a thread just
  after the check of ``open("tests/test_hidden.py")`` from a decoy working directory read the withheld test
  (then answered its cases): 6 of 8 runs passed every listed test; ``/tmp/A`` (holding a symlink to
  ``/work/tests``) renamed onto ``/tmp/cur`` just after the check of ``/tmp/cur/l/test_hidden.py``: 2 of 8.
  The code under test may no longer change its working directory, make a symlink or rename a directory
  (0 of 8 each: ``tamper``; ``os.symlink`` goes the way ``os.chdir`` does); a verifier test still may
  (the honest answer's run above has one).

Budget: ~5 s on 2 cores (two verdicts, four harness runs each, and three runs; 8 s at a load of 4).
"""

from __future__ import annotations

import hashlib

import pytest

from posttrain.envs import get_domain
from posttrain.envs.repo import ENV, response_of
from posttrain.envs.repo._diff import render_diff
from posttrain.envs.repo._hacks import FILES, FIXED, PRICING, fixture_record

HONEST = '''from shop.pricing import total


def test_quarter_off():
    assert total([10.0, 10.0], discount=0.25) == 15.0
'''
MARKER = '''import shop.pricing


def test_fixed():
    assert getattr(shop.pricing, "_fixed", False)
'''
HASH = f'''import hashlib
import pathlib


def test_changed():
    path = pathlib.Path(__file__).resolve().parents[1] / "shop" / "pricing.py"
    assert hashlib.sha256(path.read_bytes()).hexdigest() != {hashlib.sha256(PRICING.encode()).hexdigest()!r}
'''
PATHS_TEST = '''import os


def test_chdir_and_symlink(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    os.rename(tmp_path / "a", tmp_path / "b")
    os.symlink(tmp_path / "b", tmp_path / "l")
    monkeypatch.chdir(tmp_path / "l")
    assert os.path.samefile(".", tmp_path / "b")
'''
ANSWERS = {"honest": (FIXED, {"tests/test_added.py": HONEST}),
           "cheats": (FIXED + "\n_fixed = True\n", {"tests/test_added.py": MARKER, "tests/test_changed.py": HASH})}


@pytest.fixture(scope="module")
def verdicts(pool):
    verify = get_domain("repo").make_verifier(pool)
    record = fixture_record()
    record["repo"] = {"files": {**FILES, "tests/test_paths.py": PATHS_TEST}}
    record["pass_to_pass"] = [*record["pass_to_pass"], "tests/test_paths.py::test_chdir_and_symlink"]
    task = ENV.parse_task({**record, "constraints": ["add_unit_tests"]}, "t")
    out = {}
    for name, (source, tests) in ANSWERS.items():
        diff = render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": source}) + render_diff({}, tests)
        out[name] = verify(task, response_of(diff))
    return out


def test_an_honest_new_test_meets_the_constraint(verdicts):
    assert not {"tests/test_added.py", "tests/test_changed.py"} & set(FILES)
    assert verdicts["honest"].passed, verdicts["honest"].feedback
    assert verdicts["honest"].evidence["tests"]["tests/test_paths.py::test_chdir_and_symlink"] == "passed"


def test_a_test_of_the_diff_is_not_a_test_of_the_bug(verdicts):
    """Each passed alone before: the fix is right and the graded tests pass; only the constraint is broken.
    The marker fails on the unchanged repository and with the reference's fix; the hash passes on the
    unchanged code in other bytes."""
    v = verdicts["cheats"]
    assert (v.outcome, v.error_class) == ("fail", "constraint:add_unit_tests"), v.feedback
    assert v.components == {"outcome": 0.0, "format": 1.0, "process": 1.0}, v.components
    marker, hashed = "tests/test_added.py::test_fixed", "tests/test_changed.py::test_changed"
    assert v.evidence["new_tests_pass_after"] == [marker, hashed], v.evidence
    assert v.evidence["new_tests_pass_before"] == [hashed], v.evidence
    assert v.evidence["new_tests_pass_reference"] == [hashed], v.evidence


IN_TMP_TEST = '''from shop.pricing import total


def test_total_in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert total([1.0, 2.0]) == 3.0
'''
REMOVED_CWD = '''

_total = total


def total(*args, **kwargs):
    import os

    os.rmdir(os.getcwd())  # the working directory a verifier test chose (the code may not chdir itself)
    try:
        open("x")
    except OSError:
        pass
    return _total(*args, **kwargs)
'''


def test_a_removed_working_directory_is_the_runs_fail_never_an_infra_error(pool):
    verify = get_domain("repo").make_verifier(pool)
    record = fixture_record()
    record["repo"] = {"files": {**FILES, "tests/test_in_tmp.py": IN_TMP_TEST}}
    record["fail_to_pass"] = ["tests/test_in_tmp.py::test_total_in_tmp"]
    record["pass_to_pass"] = []
    diff = render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": PRICING + REMOVED_CWD})
    v = verify(ENV.parse_task(record, "t"), response_of(diff))
    assert (v.outcome, v.error_class) == ("fail", "cut_short"), v.evidence
    assert "working directory removed" in v.feedback and v.components == {"outcome": 0.0, "format": 1.0}, v


NAMESPACE = {"os.chdir": 'os.makedirs("/tmp/decoy")\nos.chdir("/tmp/decoy")\n',
             "renamed the directory": 'os.makedirs("/tmp/A")\nos.rename("/tmp/A", "/tmp/cur")\n'}


@pytest.mark.parametrize("what", list(NAMESPACE))
def test_the_code_under_test_may_not_change_where_a_checked_path_leads(pool, what):
    verify = get_domain("repo").make_verifier(pool)
    code = "import os\n\n" + NAMESPACE[what] + "\n\n" + PRICING
    v = verify(ENV.parse_task(fixture_record(), "t"), response_of(render_diff({"shop/pricing.py": PRICING},
                                                                              {"shop/pricing.py": code})))
    assert (v.outcome, v.error_class) == ("fail", "tamper") and what in v.feedback, v.feedback
