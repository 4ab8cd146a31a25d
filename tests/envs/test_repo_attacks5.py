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

Budget: ~5 s on 2 cores (two verdicts, four harness runs each, and one run).
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
ANSWERS = {"honest": (FIXED, {"tests/test_added.py": HONEST}),
           "cheats": (FIXED + "\n_fixed = True\n", {"tests/test_added.py": MARKER, "tests/test_changed.py": HASH})}


@pytest.fixture(scope="module")
def verdicts(pool):
    verify = get_domain("repo").make_verifier(pool)
    task = ENV.parse_task({**fixture_record(), "constraints": ["add_unit_tests"]}, "t")
    out = {}
    for name, (source, tests) in ANSWERS.items():
        diff = render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": source}) + render_diff({}, tests)
        out[name] = verify(task, response_of(diff))
    return out


def test_an_honest_new_test_meets_the_constraint(verdicts):
    assert not {"tests/test_added.py", "tests/test_changed.py"} & set(FILES)
    assert verdicts["honest"].passed, verdicts["honest"].feedback


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


REMOVED_CWD = '''import os

os.makedirs("/tmp/gone")
os.chdir("/tmp/gone")
os.rmdir("/tmp/gone")
try:
    open("x")
except OSError:
    pass
'''


def test_a_removed_working_directory_is_the_runs_fail_never_an_infra_error(pool):
    verify = get_domain("repo").make_verifier(pool)
    diff = render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": REMOVED_CWD + "\n\n" + PRICING})
    v = verify(ENV.parse_task(fixture_record(), "t"), response_of(diff))
    assert (v.outcome, v.error_class) == ("fail", "cut_short"), v.evidence
    assert "working directory removed" in v.feedback and v.components == {"outcome": 0.0, "format": 1.0}, v
