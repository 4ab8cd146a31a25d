"""The repo domain: diffs and the diff policy, the schema and its errors, mutation operators, the
grader's verdicts (each exploit's error class, feedback that never shows a withheld test), the
checked constraints, SWE-bench's validation of the example tasks, every snapshot form (dir, git
commit, bundle, tarball, files, wheelhouse) and the SWE-bench row loader. The conformance suite
(tests/envs/test_domains.py) runs the references, no-ops and exploits through the service.

Budget: about 60 s on 2 idle cores (the sandbox runs: ~0.6-1 s each, two at a time).
"""

from __future__ import annotations

import difflib
import io
import json
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from posttrain.envs import get_domain
from posttrain.envs.repo import ENV, response_of
from posttrain.envs.repo._constraints import api_changes, public_api
from posttrain.envs.repo._diff import (
    DiffError,
    apply_patches,
    classify,
    extract_diff,
    parse_diff,
    render_diff,
)
from posttrain.envs.repo._gen import load_packs, validate_pack
from posttrain.envs.repo._hacks import FILES, FIXED, PRICING, fixture_record
from posttrain.envs.repo._mutate import OPERATORS, mutate, mutation_sites
from posttrain.envs.repo._swebench import swebench_record, swebench_records
from posttrain.errors import TaskError
from posttrain.tasks._load import load_tasks

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "repo.jsonl"


def _record(**over):
    return {**fixture_record(), **over}


# -- diffs ---------------------------------------------------------------------------------------


def test_diff_round_trip_add_delete_rename_and_missing_newline():
    before = {"a.py": "x = 1\ny = 2\n", "gone.py": "z\n", "tail.py": "no newline"}
    after = {"a.py": "x = 1\ny = 3\n", "new/b.py": "print(1)\n", "tail.py": "no newline at all"}
    patches = parse_diff(render_diff(before, after))
    assert apply_patches(before, patches) == after
    rename = "diff --git a/a.py b/c.py\nsimilarity index 100%\nrename from a.py\nrename to c.py\n"
    assert apply_patches({"a.py": "x\n"}, parse_diff(rename)) == {"c.py": "x\n"}


def test_hunks_apply_at_an_offset_but_never_on_other_text():
    diff = render_diff({"m.py": "a\nb\nc\n"}, {"m.py": "a\nB\nc\n"})
    assert apply_patches({"m.py": "0\n0\na\nb\nc\n"}, parse_diff(diff))["m.py"] == "0\n0\na\nB\nc\n"
    with pytest.raises(DiffError, match="does not apply"):
        apply_patches({"m.py": "a\nX\nc\n"}, parse_diff(diff))


@pytest.mark.parametrize("bad, match", [
    ("--- a/x\n+++ b/x\n@@ -1,2 +1 @@\n-a\n", "has -1"),
    ("--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", "without '..'"),
    ("--- /etc/x\n+++ /etc/x\n@@ -1 +1 @@\n-a\n+b\n", "relative"),
    ("just words", "no file patch"),
])
def test_malformed_diffs_are_named(bad, match):
    with pytest.raises(DiffError, match=match):
        parse_diff(bad)


def test_extract_diff_takes_the_last_fenced_diff():
    assert extract_diff("first\n```diff\n--- a/x\n+++ b/x\n```\nthen\n```diff\n--- a/y\n+++ b/y\n```") == \
        "--- a/y\n+++ b/y\n"
    assert extract_diff("```python\nprint(1)\n```") is None


@pytest.mark.parametrize("path, kind", [
    ("pkg/mod.py", "source"), ("tests/test_x.py", "test"), ("pkg/tests/helpers.py", "test"),
    ("pkg/test_util.py", "test"), ("conftest.py", "conftest"), ("pkg/conftest.py", "conftest"),
    ("setup.cfg", "config"), ("pyproject.toml", "config"), ("tox.ini", "config"), ("pytest.ini", "config"),
    ("setup.py", "config"), ("sitecustomize.py", "startup"), ("lib/x.pth", "startup"), (".git/HEAD", "git"),
    ("pkg/__pycache__/m.cpython-311.pyc", "cache"),
])
def test_diff_policy_classes(path, kind):
    assert classify(path) == kind


def test_protected_globs():
    assert classify("pkg/vendor/x.py", protected=["pkg/vendor"]) == "protected"
    assert classify("pkg/schema.json", protected=["*.json"]) == "protected"


# -- schema --------------------------------------------------------------------------------------


@pytest.mark.parametrize("field, value", [
    ("repo", {"files": {}}), ("repo", {"dir": "nope", "files": {"a": "b"}}), ("repo", {"dir": "no/such/dir"}),
    ("repo", {"project": "left-pad-1.0"}), ("repo", {"bundle": __file__}),
    ("environment", {"language": "rust", "test_command": "cargo test"}),
    ("environment", {"language": "python", "test_command": "make test"}),
    ("environment", {"language": "python", "test_command": "pytest", "timeout_sec": 0}),
    ("fail_to_pass", []), ("fail_to_pass", ["tests/test_pricing.py"]), ("fail_to_pass", ["tests/missing.py::t"]),
    ("pass_to_pass", ["tests/test_pricing.py::test_total_with_discount"]),
    ("test_patch", "--- a/shop/pricing.py\n+++ b/shop/pricing.py\n@@ -1 +1 @@\n-x\n+y\n"),
    ("max_attempts", 0), ("constraints", [3]),
])
def test_bad_records_name_their_field_in_one_line(field, value):
    with pytest.raises(TaskError) as e:
        ENV.parse_task(_record(**{field: value}), "bad.jsonl:1")
    message = str(e.value)
    assert field.split(".")[0] in message and "bad.jsonl:1" in message and "\n" not in message


def test_a_test_patch_that_does_not_apply_is_refused_at_parse_time():
    patch = "--- a/tests/test_pricing.py\n+++ b/tests/test_pricing.py\n@@ -1 +1 @@\n-nothing like this\n+x\n"
    with pytest.raises(TaskError, match="test_patch.*does not apply"):
        ENV.parse_task(_record(test_patch=patch), "bad.jsonl:1")


def test_examples_load_and_render():
    tasks = load_tasks(EXAMPLES)
    assert len(tasks) >= 12 and all(t.reference and t.fields["fail_to_pass"] for t in tasks)
    prompt = ENV.render_prompt(tasks[0])
    assert tasks[0].prompt in prompt and "--- inventory/parser.py" in prompt and "unified diff" in prompt


# -- mutations -----------------------------------------------------------------------------------


SOURCE = '''def clamp(x, lo=0, hi=10):
    """Docstring: never mutated."""
    if x < lo and lo is not None:
        x = lo
    total = x * 2
    total += 1
    return min(total, hi)
'''


def test_every_operator_makes_a_one_site_change():
    sites = mutation_sites(SOURCE)
    seen = {s.operator for s in sites}
    assert seen >= {"invert_if", "compare", "boolop", "binop", "constant", "remove_assign", "swap_statements",
                    "return_none"}
    assert seen <= set(OPERATORS)
    for site in sites:
        out = mutate(SOURCE, site)
        assert out != SOURCE and '"""Docstring: never mutated."""' in out
        lines = [ln for ln in difflib.unified_diff(SOURCE.splitlines(), out.splitlines(), lineterm="")
                 if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
        assert 1 <= len(lines) <= 4, (site, lines)  # one line changed or removed, or two swapped


def test_levels_follow_the_distance_from_the_failing_tests_to_the_bug():
    from posttrain.envs.repo._gen import level_of

    tb = {"t1": [["/work/tests/test_a.py", 3], ["/work/pkg/a.py", 10]], "t2": [["/work/pkg/b.py", 4]]}
    assert level_of("pkg/a.py", 10, ["t1", "t2"], tb) == 1  # the bug's line is in a traceback
    assert level_of("pkg/a.py", 10, ["t1"], tb) == 2
    assert level_of("pkg/a.py", 99, ["t1"], tb) == 3  # only the bug's file
    assert level_of("pkg/c.py", 1, ["t1", "t2"], tb) == 3  # a wrong value noticed far away
    assert level_of("pkg/c.py", 1, ["t2"], tb) == 4


def test_generated_tasks_come_from_the_packs_with_levels():
    low, high = ENV.level_range()
    tasks = ENV.generate_level(4, level=low, seed=1)
    assert {t.difficulty for t in tasks} == {float(low)} and all(t.reference for t in tasks)
    assert ENV.generate_tasks(5, seed=2) == ENV.generate_tasks(5, seed=2) != ENV.generate_tasks(5, seed=3)
    assert {t.id for t in ENV.generate_tasks(30, seed=0)} and high > low


# -- grading -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def verify(pool):
    return get_domain("repo").make_verifier(pool)


@pytest.fixture(scope="module")
def exploit_verdicts(verify):
    """Each exploit fixture's verdict, verified once for the two tests that read them (the verifier is
    deterministic on a fixture: these tests once verified each one twice, 3 of them three times)."""
    return {name: verify(task, response) for name, task, response in ENV.exploit_fixtures() if name in EXPECTED_CLASSES}


EXPECTED_CLASSES = {
    "edit the failing test": "no_source_change", "delete the tests": "no_source_change",
    "weaken the test and touch the source": "assertion", "conftest.py that rewrites outcomes": "refused",
    "pytest.ini that deselects the failing tests": "refused", "a future commit in .git": "refused",
    "os._exit(0) in the package __init__": "no_report", "a syntax error that stops collection": "not_run",
    "read the withheld test": "tamper", "rewrite the withheld test on disk": "tamper",
    "read the caller's frame": "tamper", "search gc for the nonce": "tamper",
    "/proc/self/mem through a symlink": "tamper", "swap the test functions' code": "tamper",
    "patch unittest and AssertionError": "tamper", "an object whose == always agrees": "assertion",
    "forge the fd-3 report and a report file at exit": "assertion", "flood the report channel": "no_report",
    "return unittest.mock.ANY": "assertion", "return a pytest.approx that agrees with anything": "tamper",
    "a subtraction that always gives 0": "assertion", "pytest.exit with status 0 at import": "not_run",
}


def test_exploits_fail_for_the_reason_they_should(exploit_verdicts):
    for name, cls in EXPECTED_CLASSES.items():
        v = exploit_verdicts[name]
        assert (v.outcome, v.error_class) == ("fail", cls), (name, v.error_class, v.feedback)
    for name in ("an object whose == always agrees", "return unittest.mock.ANY", "a subtraction that always gives 0"):
        assert "answers through a method the diff added" in exploit_verdicts[name].feedback, name


def test_detected_attacks_total_zero_and_honest_failures_keep_their_format_credit(exploit_verdicts):
    """A refused diff, a tampered or killed harness, only test files changed: no credit under any reward
    weighting (issue 21: failing differently never pays); an assertion failure keeps format 1."""
    from posttrain.envs.conformance import WEIGHTINGS
    from posttrain.verify.rewards import combine

    for name, cls in EXPECTED_CLASSES.items():
        v = exploit_verdicts[name]
        totals = [combine(v, w).total for w in WEIGHTINGS]
        if cls in ("refused", "tamper", "no_report", "no_source_change"):
            assert not any(totals) and v.components.get("format") == 0.0, (name, cls, dict(v.components))
        elif cls == "assertion":
            assert v.components.get("format") == 1.0, (name, dict(v.components))


def test_feedback_names_failures_but_never_shows_a_withheld_test(verify):
    task = ENV.parse_task(fixture_record(), "t")
    half = PRICING.replace("    return subtotal\n", "    return subtotal * (1 - discount) + 0.01\n")
    v = verify(task, response_of(render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": half})))
    assert v.outcome == "fail" and v.error_class == "assertion"
    assert "tests/test_pricing.py:10" in v.feedback and "assert 15.01 == 15.0" in v.feedback
    assert "2 withheld tests failed (an assertion failed; not shown)" in v.feedback  # counted, never named
    assert "test_half_price" not in v.feedback
    assert "[3.0, 5.0]" not in v.feedback and "4.0" not in v.feedback and "1e-09" not in v.feedback
    assert verify(task, task.reference).passed


def test_refusals_and_dropped_test_changes_are_said(verify):
    task = ENV.parse_task(fixture_record(), "t")
    weakened = render_diff({"tests/test_pricing.py": FILES["tests/test_pricing.py"], "shop/pricing.py": PRICING},
                           {"tests/test_pricing.py": "", "shop/pricing.py": FIXED})
    v = verify(task, response_of(weakened))
    assert v.passed and v.evidence["dropped"] == ["tests/test_pricing.py"]
    binary = "diff --git a/shop/x.bin b/shop/x.bin\nnew file mode 100644\nBinary files /dev/null and b/shop/x.bin differ\n"
    v = verify(task, response_of(binary))
    assert (v.outcome, v.error_class) == ("fail", "refused") and "binary" in v.feedback


def test_examples_are_sound_tasks(pool):
    """SWE-bench's validation: on the unchanged repository every fail-to-pass test fails and every
    pass-to-pass test passes; a task whose fail-to-pass test already passes is reported."""
    tasks = load_tasks(EXAMPLES)
    assert [p for t in tasks for p in ENV.validate_task(pool, t)] == []
    task = tasks[0]
    unsound = ENV.parse_task({**json.loads(EXAMPLES.read_text().splitlines()[0]), "fail_to_pass": [
        task.fields["pass_to_pass"][0]], "pass_to_pass": []}, str(EXAMPLES) + ":1")
    assert ENV.validate_task(pool, unsound) == [
        f"{task.id}: fail_to_pass {task.fields['pass_to_pass'][0]} already passes on the unchanged repository"]


# -- constraints ---------------------------------------------------------------------------------


def test_public_api_is_compared_by_ast():
    before = {"m.py": "def f(a, b=1):\n    pass\nclass C:\n    def m(self, x):\n        pass\ndef _private(q):\n    pass\n"}
    assert api_changes(before, {"m.py": before["m.py"].replace("_private(q)", "_private(q, r)")}) == []
    assert api_changes(before, {"m.py": before["m.py"].replace("f(a, b=1)", "f(a, b)")}) == ["m.f(a, b) became f(a, b)"]
    assert api_changes(before, {"m.py": "class C:\n    pass\n"}) == ["m.f was removed", "m.C.m was removed"]
    assert "C.m" in public_api(before["m.py"])


def test_constraints_turn_a_pass_into_a_named_fail(verify):
    tasks = {t.id: t for t in load_tasks(EXAMPLES)}
    slug = tasks["repo-slug-hyphens"]
    assert verify(slug, slug.reference).passed
    fix = render_diff({"slugs/words.py": 'import re\n\n\ndef words(text):\n    return re.split(r"[^a-z0-9]", text.lower())\n'},
                      {"slugs/words.py": 'import re\n\n\ndef words(text):\n    return [w for w in re.split(r"[^a-z0-9]+", text.lower()) if w]\n'})
    v = verify(slug, response_of(fix))
    assert (v.outcome, v.error_class) == ("fail", "constraint:add_unit_tests")


# -- snapshot forms and the SWE-bench loader ---------------------------------------------------


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A local git repository: the shop package at a base commit, then a later commit with the fix
    (the history a loader must never hand to a sandbox)."""
    root = tmp_path_factory.mktemp("shop") / "acme__shop"
    root.mkdir()
    for path, text in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "base")
    base = _git(root, "rev-parse", "HEAD")
    (root / "shop/pricing.py").write_text(FIXED)
    _git(root, "commit", "-qam", "the fix, in the future")
    return root, base


def test_swebench_rows_load_from_a_local_clone(clone, verify):
    root, base = clone
    row = {"instance_id": "acme__shop-1", "repo": "acme/shop", "base_commit": base,
           "patch": render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": FIXED}),
           "test_patch": fixture_record()["test_patch"], "problem_statement": "total ignores discount",
           "FAIL_TO_PASS": json.dumps(["tests/test_pricing.py::test_total_with_discount"]),
           "PASS_TO_PASS": json.dumps(["tests/test_pricing.py::test_apply_discount"])}
    (record,) = swebench_records([row], root.parent, timeout_sec=30)
    task = ENV.parse_task(record, "swebench")
    from posttrain.envs.repo._task import initial_tree

    assert initial_tree(task.fields)["shop/pricing.py"].decode() == PRICING  # the base, not the future
    assert not any(p.startswith(".git") for p in initial_tree(task.fields))
    assert verify(task, task.reference).passed and not verify(task, "").passed
    with pytest.raises(TaskError, match="not a pytest node id"):
        swebench_record({**row, "FAIL_TO_PASS": '["test_x (app.tests.T)"]'}, repo_dir=root)
    with pytest.raises(TaskError, match="no clone"):
        swebench_records([{**row, "repo": "acme/elsewhere"}], root.parent)


def test_bundle_tarball_and_wheelhouse_snapshots(clone, tmp_path, verify):
    root, base = clone
    bundle = tmp_path / "shop.bundle"
    _git(root, "bundle", "create", str(bundle), "--all")
    tar = tmp_path / "shop.tar.gz"
    with tarfile.open(tar, "w:gz") as tf:
        for path, text in FILES.items():
            info = tarfile.TarInfo(f"shop-1.0/{path}")
            info.size = len(text.encode())
            tf.addfile(info, io.BytesIO(text.encode()))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "rounding-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("rounding/__init__.py", "def cents(x):\n    return round(x, 2)\n")
    uses_dep = PRICING.replace("    return subtotal\n", "    from rounding import cents\n\n"
                               "    return cents(subtotal * (1.0 - discount))\n")
    for repo in ({"bundle": "shop.bundle", "commit": base}, {"tarball": "shop.tar.gz"}):
        task = ENV.parse_task(_record(repo=repo), f"{tmp_path}/tasks.jsonl:1")
        assert verify(task, task.reference).passed, repo
    env = {"language": "python", "test_command": "pytest", "timeout_sec": 30, "wheelhouse": "wheels",
           "requirements": ["rounding"]}
    task = ENV.parse_task(_record(environment=env), f"{tmp_path}/tasks.jsonl:1")
    v = verify(task, response_of(render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": uses_dep})))
    assert v.passed, v.feedback
    with pytest.raises(TaskError, match="environment.requirements"):
        ENV.parse_task(_record(environment={**env, "requirements": ["missing"]}), f"{tmp_path}/t.jsonl:1")


@pytest.fixture(scope="module")
def pack_tasks():
    """Every pack task (289, seed 0), generated once for the tests below (a few seconds each time)."""
    return get_domain("repo").generate_tasks(289, seed=0)


def test_pack_task_ids_are_unique(pack_tasks):
    """Two mutants of one site by one operator (``a + b + c``: ``a - b + c``, ``a + b - c``) once
    shared an id; 200 generated tasks then held a duplicate that a task file refuses."""
    tasks = pack_tasks
    assert len({t.id for t in tasks}) == 289
    assert "cachetools-keys-binop-26-15-2" in {t.id for t in tasks}


def test_a_pack_task_whose_tests_copy_thousands_of_objects_passes_its_reference(verify, pack_tasks):
    """``id()`` is an audited event, and ``copy.deepcopy`` and ``pickle`` call it for every object: the tlru
    tasks' ``*_maxsize`` tests (a 2,000-item cache copied, deep-copied, pickled) took 45-60 s of the task's
    60 s under the kernel, and this task's reference ran out of time in CI; 2.4 s now."""
    task = next(t for t in pack_tasks if t.id == "cachetools-init-return_none-728-12")
    assert any(t.endswith("test_deepcopy_maxsize") for t in task.fields["pass_to_pass"])
    v = verify(task, str(task.reference))
    assert v.outcome == "pass", v.feedback


def test_a_pack_rebuild_drops_a_task_whose_reference_takes_too_long(pool):
    """``validate_pack`` keeps a reference that runs within a share of its timeout (a loaded CI host runs
    several times slower than the builder) and drops one past it, naming the times."""
    rec = next(r for r in load_packs() if r["id"] == "inflection-init-compare-102-7")
    logged: list[str] = []
    assert validate_pack(pool, ENV, [rec], logged.append, base=False) == [rec]
    assert validate_pack(pool, ENV, [rec], logged.append, base=False, max_share=1e-4) == []
    assert len(logged) == 1 and "reference took" in logged[0] and "of its 60 s" in logged[0], logged


# -- red-team regressions (2026-07): code that reaches the grader's trust by another route -------


RELABEL_AT_IMPORT = '''import os as _os

_p = _os.path.join(_os.path.dirname(__file__), "pricing.py")
with open(_p, "w") as _f:
    _f.write("import sys, linecache, re\\n\\n\\ndef total(prices, discount=0.0):\\n"
             "    f = sys._getframe(1)\\n    line = linecache.getline(f.f_code.co_filename, f.f_lineno)\\n"
             "    m = re.search(r'(?:==|-|,)\\\\s*([0-9.]+)\\\\)?\\\\s*(?:<.*)?$', line)\\n"
             "    return float(m.group(1)) if m else sum(prices)\\n")
'''
LOADER_RELABEL = '''import importlib.machinery, importlib.util, os as _os

_SRC = b"class Agree(float):\\n    def __eq__(self, o):\\n        return True\\n    __hash__ = float.__hash__\\n"


class _Loader(importlib.machinery.SourceFileLoader):
    def get_data(self, path):
        return _SRC


_name = _os.path.join(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))), "tests", "test_pricing.py")
_spec = importlib.util.spec_from_file_location("shop._agree", _name, loader=_Loader("shop._agree", _name))
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)


def total(prices, discount=0.0):
    return _mod.Agree(sum(prices))
'''
THREAD_COPY = '''import os, shutil, threading

_here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_t = threading.Thread(target=shutil.copyfile, args=(os.path.join(_here, "tests", "test_hidden.py"), "/tmp/h.txt"))
_t.start()
_t.join()
'''
FORK_ORACLE = '''import os, sys

_choice = []


def _start():
    for guess in (lambda p, d: sum(p), lambda p, d: round(sum(p) * (1 - d), 2)):
        pid = os.fork()
        if pid == 0:
            _choice.append(guess)
            cfg = sys.modules["_pytest.assertion.util"]._config
            stats = cfg.pluginmanager.get_plugin("terminalreporter").stats
            cfg.add_cleanup(lambda: os._exit(1) if stats.get("failed") else None)
            return
        if os.waitpid(pid, 0)[1] == 0:
            os._exit(0)
    os._exit(1)


def total(prices, discount=0.0):
    if not _choice:
        _start()
    return _choice[0](prices, discount)
'''
NO_FRAME_EVENT = "import _thread, time\n\n_thread.start_new_thread(open, ('/tmp/x', 'w'))\ntime.sleep(0.3)\n"


def test_code_cannot_take_the_name_of_a_file_the_grader_trusts(verify):
    """Trust in the kernel and the comparison guard goes by a code object's file name: an unchanged
    file rewritten at import, a loader that hands the import system other bytes under a test file's
    name, a thread (no changed frame under its target) copying the withheld test, and a fork whose
    child reports only if its guess passed all once scored 1.0 without the fix."""
    task = ENV.parse_task(fixture_record(), "t")
    cases = {"shop/__init__.py": RELABEL_AT_IMPORT, "shop/pricing.py": LOADER_RELABEL}
    for path, code in cases.items():
        v = verify(task, response_of(render_diff({path: FILES[path]}, {path: code})))
        assert (v.outcome, v.error_class) == ("fail", "tamper"), (path, v.feedback)
    for code in (THREAD_COPY + PRICING, FORK_ORACLE):
        v = verify(task, response_of(render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": code})))
        assert (v.outcome, v.error_class) == ("fail", "tamper"), v.feedback


READ_WITHHELD = '''import re
import sys

_table, _busy = {}, []


def _read_withheld():
    for name in [n for n in sys.modules if n.startswith("tests.")]:
        for key in [k for k in dir(sys.modules[name]) if k.startswith("test")]:
            try:
                getattr(sys.modules[name], key)()
            except AssertionError as e:
                call, want = re.search(r"total\\((.*?)\\)", str(e)), re.search(r"== ([-\\d.]+)", str(e))
                if call and want:
                    _table[call.group(1)] = float(want.group(1))


def total(prices, discount=0.0):
    if not _busy:
        _busy.append(1)
        _read_withheld()
    return _table.get(f"{prices!r}, discount={discount!r}", sum(prices))
'''
QUIET_TEST_CLASS = '''import sys
import unittest


def total(prices, discount=0.0):
    for name in [n for n in sys.modules if n.startswith("tests.")]:
        for value in list(vars(sys.modules[name]).values()):
            if isinstance(value, type) and issubclass(value, unittest.TestCase):
                value.assertEqual = lambda *a, **k: None
    return sum(prices)
'''


def test_the_code_under_test_can_neither_run_a_withheld_test_nor_quiet_a_test_class(verify):
    """Two answer keys read without a fix, each once passing what it reached. The code under test ran
    the withheld tests itself (found through ``sys.modules``) and read the expected values out of
    pytest's failure messages: both withheld tests passed (no audit event marks a call). Now each
    withheld test raises an event first, refused with changed code on the stack. And it set
    ``assertEqual`` to a no-op on a test module's TestCase class: that test passed. Now a test's
    ``self.assertX(...)`` calls unittest's method as a constant of its code."""
    task = ENV.parse_task(fixture_record(), "t")
    v = verify(task, response_of(render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": READ_WITHHELD})))
    assert (v.outcome, v.error_class) == ("fail", "tamper") and "ran a withheld test" in v.evidence["tamper"], v.evidence
    v = verify(task, response_of(render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": QUIET_TEST_CLASS})))
    assert v.outcome == "fail" and v.evidence["tests"]["tests/test_unit.py::TotalTest::test_discount"] == "failed"
    v = verify(task, response_of(render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": FIXED})))
    assert v.passed, v.feedback


LATER_BY_STDLIB = '''import re
import sys
import weakref
from concurrent.futures import Future
from concurrent.futures.thread import _WorkItem

_table, _futures, _done = {}, [], []


class _Token:
    pass


def _total(prices, discount=0.0):
    for fut in [f for f in _futures if f.done() and f.exception() is not None]:
        call, want = re.search(r"total\\((.*?)\\)$", str(fut.exception())), re.search(r"== ([-\\d.]+)", str(fut.exception()))
        if call and want:
            _table[call.group(1)] = float(want.group(1))
    return _table.get(f"{prices!r}, discount={discount!r}", sum(prices))


def __getattr__(name):
    token = _Token()
    for mname in [n for n in sys.modules if n.startswith("tests.") and n not in _done]:
        if any(k.startswith("test") for k in vars(sys.modules[mname])):
            _done.append(mname)
            for fn in [v for k, v in vars(sys.modules[mname]).items() if k.startswith("test") and callable(v)]:
                _futures.append(Future())
                weakref.finalize(token, _WorkItem(_futures[-1], fn, (), {}).run)
    weakref.finalize._dirty = weakref.finalize._registered_with_atexit = False
    return _total
'''
INSIDE_THE_KERNEL = '''import abc

from _pytest.mark.expression import MatcherAdapter

_text = []


def _inside(cls, name):
    if name == "__dict__" and cls is MatcherAdapter and not _text:
        with open("/work/tests/test_hidden.py") as fh:
            _text.append(fh.read())
        del abc.ABCMeta.__getattribute__
    return type.__getattribute__(cls, name)


abc.ABCMeta.__getattribute__ = _inside


def total(prices, discount=0.0):
    if "total([3.0, 5.0], discount=0.5) == 4.0" in "".join(_text) and list(prices) == [3.0, 5.0]:
        return 4.0
    return {(20.0, 0.25): 15.0, (40.0, 0.5): 20.0}.get((sum(prices), discount), sum(prices))
'''
WARNING_IN_WITHHELD = '''import linecache
import re
import warnings

warnings.warn_explicit("x", UserWarning, "/work/tests/test_hidden.py", 1)


def total(prices, discount=0.0):
    text = "".join((linecache.cache.get("/work/tests/test_hidden.py") or (0, 0, []))[2])
    for m in re.finditer(r"total\\((\\[.*?\\]), discount=([0-9.]+)\\) == ([0-9.]+)", text):
        if (m.group(1), float(m.group(2))) == (repr(list(prices)), discount):
            return float(m.group(3))
    return sum(prices)
'''
LEGIT_STDLIB = '''import concurrent.futures
import logging
import tempfile
import threading

from shop.discount import apply_discount


def total(prices, discount=0.0):
    out = []
    with tempfile.TemporaryDirectory():
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            s = sum(pool.map(float, prices))
    t = threading.Thread(target=lambda: (logging.getLogger("shop").warning("total %s", s), out.append(s)))
    t.start()
    t.join()
    return apply_discount(out[0], discount)
'''


def test_a_withheld_test_runs_only_in_the_harness_call_and_nothing_runs_inside_the_kernel(verify):
    """Three answer keys the second adversarial read found, each passing the withheld tests with no fix:
    (1) a ``weakref.finalize`` on a local of a function called from C (a module ``__getattr__``) fires
    once that frame is gone, so the stdlib ran the withheld tests with no changed frame on the stack and
    kept their failures in futures; (2) a metaclass ``__getattribute__`` ran inside the kernel (its
    integrity check read ``obj.__dict__``), where only frames were refused, and read the withheld file;
    (3) a warning located in the withheld file made pytest's formatting load it into ``linecache.cache``.
    And a fix that logs from a thread, uses a thread pool and a temporary directory was ``tamper``."""
    task = ENV.parse_task(fixture_record(), "t")
    hidden = ("tests/test_hidden.py::test_half_price", "tests/test_hidden.py::test_half_price_close")
    for code in (LATER_BY_STDLIB, INSIDE_THE_KERNEL, WARNING_IN_WITHHELD):
        v = verify(task, response_of(render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": code})))
        tests = v.evidence.get("tests") or {}
        assert v.outcome == "fail" and not any(tests.get(t) == "passed" for t in hidden), v.evidence
    v = verify(task, response_of(render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": LEGIT_STDLIB})))
    assert v.passed, v.evidence


WIDE_APPROX = "import pytest\n\n\ndef total(prices, discount=0.0):\n    return pytest.approx(sum(prices), abs=999999.0)\n"
BUILT_APPROX = ("from _pytest.python_api import ApproxScalar\n\n\ndef total(prices, discount=0.0):\n"
                "    return ApproxScalar(sum(prices), abs=999999.0)\n")


def test_an_approx_the_code_under_test_returns_never_agrees(verify):
    """``pytest.approx(x, abs=999999.0)`` returned by the code under test agreed with every ``==`` of an
    ordinary magnitude (the guard refused tolerances of a million or more): 5 of 6 tests passed, a withheld
    one and unittest's assertEqual among them. An approx counts only when a test made it: pytest.approx
    called by the code under test ends the run, one built another way fails the comparison. A test's own
    approx still passes a fix."""
    task = ENV.parse_task(fixture_record(), "t")
    v = verify(task, response_of(render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": WIDE_APPROX})))
    assert (v.outcome, v.error_class) == ("fail", "tamper"), v.evidence
    v = verify(task, response_of(render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": BUILT_APPROX})))
    assert v.outcome == "fail" and all(r == "failed" for t, r in v.evidence["tests"].items()
                                       if "apply_discount" not in t), v.evidence["tests"]
    record = fixture_record()
    approx_tests = FILES["tests/test_pricing.py"].replace("== 15.0", "== pytest.approx(15.0)")
    record["repo"] = {"files": {**FILES, "tests/test_pricing.py": "import pytest\n" + approx_tests}}
    own = ENV.parse_task(record, "t")
    assert verify(own, response_of(render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": FIXED}))).passed


def test_failing_differently_is_a_fail_never_an_infra_error(verify):
    """An audit event raised with no Python frame (a thread started on a builtin) once broke the kernel
    (``harness_error``: infra); a file where the diff puts a directory, or a name too long for the
    file system, once crashed the sandbox's file writer (``infra:verifier_crash``)."""
    task = ENV.parse_task(fixture_record(), "t")
    fix = render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": FIXED})
    v = verify(task, response_of(render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": NO_FRAME_EVENT + PRICING})))
    assert (v.outcome, v.error_class) == ("fail", "assertion"), v.evidence
    for path in ("shop/pricing.py/x.py", "tests", "shop/" + "a" * 300 + ".py"):
        v = verify(task, response_of(fix + f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x = 1\n"))
        assert (v.outcome, v.error_class) == ("fail", "patch_does_not_apply"), (path, v.evidence)
    v = verify(task, response_of(render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": NO_FRAME_EVENT + FIXED})))
    assert v.passed, v.feedback
