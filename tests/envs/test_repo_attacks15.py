"""The repo tasks' echo where the one failing test is a function of several checks (fifteenth read).

Since bb820f38, 129 of 289 pack tasks withhold failing test functions or parametrized cases. 88 of the
others fail one test, a single function of two or more top-level checks, and withheld nothing: a diff that
answers the inputs that test gives the mutated function from the reference, every other input from the bug
(the echo of the visible test), passed them. Now ``_checks.py`` ran each check alone on the bug and on the
reference, withheld about half of the checks that fail on the bug (the first kept, its error in the
prompt), validated each split by running it, and stored it (``data/withheld_checks.json``);
``_withhold.withhold`` applies it: the workspace's copy of the test lacks those checks, ``test_patch``
gives them back. Here: the echo of the workspace's copy fails (the echo of the full test passes the task
as it was), the references pass, a failure at a withheld check is only counted in the feedback (no frame,
no value) while one at a visible check keeps its traceback, and every other task record is byte-identical.

Measured on all 53 tasks that withhold checks (of the 88: 78 define the test in its file, not a mixin; 23
of them have fewer than two checks that fail on the bug alone with one left to withhold, 2 failed
validation): the references pass 53/53 under the real grader; this echo is buildable and passes the task
as it was on 26 (the others' changed function is decorated, or its inputs' reprs are not stable), and
fails 21 of those 26 now; on the 5 others the withheld checks give the function no input the visible
ones do not (or none that the bug answers differently): no split of checks can stop an input echo there.

Budget: ~30 s on 2 cores (twelve sandbox runs, two at a time).
"""

from __future__ import annotations

import ast
import difflib
import json
import re
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import pytest

from posttrain.envs import get_domain
from posttrain.envs.repo import ENV, _withhold
from posttrain.envs.repo._checks import _trees, candidates
from posttrain.envs.repo._diff import render_diff
from posttrain.envs.repo._domain import response_of
from posttrain.envs.repo._gen import PROJECTS, PYTEST_PRELUDE, load_packs, record_of
from posttrain.envs.repo._grade import lacks_checks, seen_by_agent
from posttrain.envs.repo._task import initial_tree, verifier_tree
from posttrain.envs.repo._task import test_file_of as file_of
from posttrain.envs.repo._withhold import checks_of, stored_checks, strip_checks
from posttrain.pyast import parse as parse_python  # (records are built in threads here: gh-106905)

ECHOED = ("cachetools-keys-swap_statements-45-8", "toolz-itertoolz-swap_statements-136-4")
COLLECT = PYTEST_PRELUDE + r'''
open("/tmp/ini", "w").write("[pytest]\n")
rc = pytest.main(["-q", "-p", "no:cacheprovider", "-c", "/tmp/ini", "--rootdir=/work", "-W", "ignore", cfg["test"]])
keys = open("/tmp/echo_keys").read() if os.path.exists("/tmp/echo_keys") else ""
os.write(3, json.dumps({"rc": int(rc), "keys": keys}).encode())
sys.stdout.flush()
os._exit(0)
'''
"""Our own pytest run of one test file (as the pack builder's): the keys the echo's recorder wrote."""
RECORDER = "type('R', (), {'__contains__': lambda s, k: (open('/tmp/echo_keys', 'a').write(repr(k) + '\\n'), True)[1]})()"


def _rec(task_id: str) -> dict:
    return next(r for r in load_packs() if r["id"] == task_id)


def _site(rec: dict) -> tuple[str, str | None, str]:
    """(path, class or None, name) of the undecorated function (or method) the reference changes."""
    _, bug, fixed = _trees(rec)
    path = next(p for p in sorted(bug) if fixed.get(p) != bug[p])
    a, b = bug[path].decode().splitlines(), fixed[path].decode().splitlines()
    line = next(o for o in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if o[0] != "equal")[1] + 1
    for node in parse_python(bug[path].decode()).body:
        owned = [(None, node)] if isinstance(node, ast.FunctionDef) else \
            [(node.name, n) for n in node.body if isinstance(n, ast.FunctionDef)] if isinstance(node, ast.ClassDef) else []
        for cls, fn in owned:
            if fn.lineno <= line <= (fn.end_lineno or 0) and not fn.decorator_list:
                return path, cls, fn.name
    raise AssertionError(rec["id"])


def _def(text: str, cls: str | None, name: str) -> ast.FunctionDef:
    mod = parse_python(text)
    body = mod.body if cls is None else next(n for n in mod.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    return next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)


def _echo_text(rec: dict, keys: str) -> tuple[str, str, str]:
    """The bug's file with the changed function split: the reference's body answers the inputs in ``keys``
    (an expression), the bug's every other one."""
    _, bug, fixed = _trees(rec)
    path, cls, name = _site(rec)
    text, good = bug[path].decode(), fixed[path].decode()
    fb, ff = _def(text, cls, name), _def(good, cls, name)
    lines, glines, ind = text.splitlines(keepends=True), good.splitlines(keepends=True), " " * fb.col_offset
    bug_src = "".join(lines[fb.lineno - 1:fb.end_lineno]).replace(f"def {name}(", f"def _bug_{name}(", 1)
    fix_src = "".join(glines[ff.lineno - 1:ff.end_lineno]).replace(f"def {name}(", f"def _fix_{name}(", 1)
    me, sig = ("", "") if cls is None else ("self.", "self, ")
    disp = (f"{ind}def {name}({sig}*args, **kwargs):\n{ind}    return ({me}_fix_{name} if _echo_key(args, kwargs) "
            f"in _ECHO_KEYS else {me}_bug_{name})(*args, **kwargs)\n")
    out = "".join(lines[:fb.lineno - 1]) + bug_src + "\n" + fix_src + "\n" + disp + "".join(lines[fb.end_lineno:])
    out += ("\n\ndef _echo_key(args, kwargs):\n    return repr((args, sorted(kwargs.items())))\n\n\n"
            f"_ECHO_KEYS = {keys}\n")
    return path, text, out


def _keys(pool, rec: dict, test_text: bytes) -> list[str]:
    """The inputs the test (its file as ``test_text``) gives the changed function, each answered by the fix."""
    _, bug, _ = _trees(rec)
    path, _, out = _echo_text(rec, RECORDER)
    tree = {**bug, path: out.encode(), file_of(rec["fail_to_pass"][0]): test_text}
    ex = pool.exec(["/usr/bin/python3", "-I", "-B", "-c", COLLECT], files=tree, timeout=60,
                   stdin=json.dumps({"python_path": PROJECTS[rec["project"]]["python_path"],
                                     "test": rec["fail_to_pass"][0]}))
    got = json.loads(ex.report)
    assert got["rc"] == 0, got  # (the fix answers every input: the test passes)
    return sorted({ast.literal_eval(ln) for ln in got["keys"].splitlines() if ln})


def _echo(rec: dict, keys: list[str]) -> str:
    path, text, out = _echo_text(rec, repr(frozenset(keys)))
    return response_of(render_diff({path: text}, {path: out}))


def _all_visible(rec: dict):
    record = {k: v for k, v in record_of(rec).items() if k != "test_patch"}
    record.update(prompt=rec["prompt"], repo={"project": rec["project"], "patch": rec["patch"]})
    return ENV.parse_task(record, "repo packs")


@pytest.fixture(scope="module")
def verdicts(pool):
    verify = get_domain("repo").make_verifier(pool)

    def one(task_id: str):
        rec = _rec(task_id)
        task = ENV.parse_task(record_of(rec), "repo packs")
        path = file_of(rec["fail_to_pass"][0])
        full, seen = _keys(pool, rec, verifier_tree(task.fields)[path]), _keys(pool, rec, initial_tree(task.fields)[path])
        src = _site(rec)[0]
        text = initial_tree(task.fields)[src].decode()
        return {"task": task, "keys": (full, seen), "today's echo": verify(_all_visible(rec), _echo(rec, full)),
                "echo": verify(task, _echo(rec, seen)), "reference": verify(task, str(task.reference)),
                "bug": verify(task, response_of(render_diff({src: text}, {src: text + "\n# looked here\n"})))}

    with ThreadPoolExecutor(2) as ex:
        return dict(zip(ECHOED, ex.map(one, ECHOED), strict=True))


def test_the_echo_of_the_visible_checks_fails_and_the_reference_passes(verdicts):
    for task_id, got in verdicts.items():
        full, seen = got["keys"]
        assert set(seen) < set(full), task_id  # (the withheld checks gave the function inputs of their own)
        assert got["today's echo"].passed, (task_id, got["today's echo"].feedback)  # every check visible: it passed
        v = got["echo"]
        assert (v.outcome, v.error_class, v.reward) == ("fail", "assertion", 0.0), (task_id, v.feedback)
        assert got["reference"].passed, (task_id, got["reference"].feedback)


def test_a_failure_at_a_withheld_check_is_counted_never_shown(verdicts):
    for got in verdicts.values():
        task, v = got["task"], got["echo"]
        test = task.fields["fail_to_pass"][0]
        assert f"{test} failed at a withheld check (" in v.feedback, v.feedback
        full = verifier_tree(task.fields)[file_of(test)].decode()
        shown = initial_tree(task.fields)[file_of(test)].decode()
        gone = [ln.strip() for ln in full.splitlines() if ln not in shown.splitlines() and ln.strip()]
        assert gone and not [ln for ln in gone if ln in v.feedback], v.feedback  # no line of a withheld check
        assert not re.search(r"\.py:\d+:", v.feedback) and "\nE " not in v.feedback, v.feedback  # no frame
        bug = got["bug"].feedback  # (the bug fails at its first failing check, a visible one: its traceback)
        at = re.search(rf"^{re.escape(file_of(test))}:(\d+): in \w+\n    (.+)$", bug, re.M)
        assert f"{test} failed:\n" in bug and at is not None, bug
        assert shown.splitlines()[int(at[1]) - 1].strip() == at[2].strip() and "\nE " in bug, bug


def test_the_workspace_lacks_the_withheld_checks_and_other_records_are_unchanged():
    splits = stored_checks()
    for rec in load_packs():
        record = record_of(rec)
        with mock.patch.object(_withhold, "stored_checks", dict):
            before = record_of(rec)
        if rec["id"] not in splits:
            assert json.dumps(record, sort_keys=True) == json.dumps(before, sort_keys=True), rec["id"]
            continue
        split, test = splits[rec["id"]], rec["fail_to_pass"][0]
        assert "test_patch" not in before and record["fail_to_pass"] == [test] == [split["test"]]
        task = ENV.parse_task(record, "repo packs")
        path = file_of(test)
        full, shown = verifier_tree(task.fields)[path], initial_tree(task.fields)[path]
        assert full == _all_visible_tree(rec)[path] and full != shown
        assert checks_of(shown.decode(), test) is not None
        assert strip_checks(full.decode(), test, split["checks"]) == shown.decode()
        assert seen_by_agent(test, initial_tree(task.fields), verifier_tree(task.fields))  # the test id stays visible
        assert f"- {test}" in record["prompt"] and _withhold.WITHHELD_NOTE in record["prompt"]
        assert 2 * len(split["checks"]) <= split["failing"] and split["checks"]


def _all_visible_tree(rec: dict) -> dict[str, bytes]:
    return initial_tree({"repo": {"project": rec["project"], "patch": rec["patch"]}})


def test_which_pack_tasks_withhold_checks():
    splits, records = stored_checks(), load_packs()
    assert len(candidates(records)) == 78 and set(splits) <= {r["id"] for r in candidates(records)}
    held = [r["id"] for r in records if "test_patch" in record_of(r)]
    assert len(splits) == 53 and len(held) == 182  # 182 of 289 tasks withhold (129 before)
    assert set(splits) <= set(held)


TEXT = ("class T:\n    def test_t(self):\n        x = f(1)\n        assert x == 2\n        self.assertEqual(f(2), 3)\n"
        "        with pytest.raises(ValueError):\n            f(-1)\n        y = 4; assert y\n")


def test_only_whole_checks_leave_and_the_grader_tells_them_from_edits():
    assert checks_of(TEXT, "t.py::T::test_t") == [1, 2, 3]  # (the assert sharing its line with ``y = 4`` stays)
    stripped = strip_checks(TEXT, "t.py::T::test_t", [2])
    assert stripped is not None and "f(2)" not in stripped and "f(-1)" in stripped
    assert strip_checks(TEXT, "t.py::T::test_t", [0]) is None  # (not a check)
    ours = TEXT.split("\n", 1)[1]
    assert lacks_checks(ours, stripped.split("\n", 1)[1])
    assert not lacks_checks(ours, ours.replace("f(1)", "f(0)"))  # an edit, not a withheld check
    assert not lacks_checks(ours, ours.replace("        x = f(1)\n", ""))  # a statement that is no check
