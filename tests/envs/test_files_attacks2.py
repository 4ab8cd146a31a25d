"""A helper's adversarial read of the files verifier as a policy under RL would attack it, each a
standing case (real generated tasks, the real verifier in its worker, real workspace episodes; no mocks).

Two holes, both fixed in ``_grade.py``:

- ``grade_final_state`` passed a final state in which a file the task leaves alone was a directory:
  ``_collateral`` reads files (deleted, or changed bytes) and a ``dir`` entry was neither, while
  ``_not_regular`` flagged links, fifos and hard links only. An episode's take refused it on its own
  (a directory where a file was is ``not_regular`` there), so the grader's public entry point was the
  one open door; it now says ``not_regular`` itself.
- a record whose targets cannot make one tree with the workspace (a target under a workspace file or
  another target, a target over a directory) was accepted, and then failed every response, the
  reference too (``format``: the write is refused); it is now refused at parse time, naming the field.

The rest held (53 single-response and 14 episode attacks, none passed; 7 generic ones over 500
generated tasks, 4,645 responses, none passed): another encoding, a byte-order mark or compression of
a target, CSV in another dialect, text with look-alike spaces, line breaks or digits, moves that change
bytes on the way, paths that alias a target (case, a trailing space, a zero-width joiner, a fullwidth
slash), reasoning-block and fence tricks; in episodes a socket left behind, a database switched to WAL
by its reader, a directory of scratch made unreadable, a daemon left to write after the submit. Honest
variants of the right work (9 single responses, 13 episodes touching only metadata or putting back
what they changed) still pass.
"""

from __future__ import annotations

import base64
import gzip
import json
import random
import shlex

import pytest
from agent_play import call, play

from posttrain.envs import get_domain
from posttrain.envs.files import Entry, grade_final_state
from posttrain.envs.files._agents import oracle
from posttrain.envs.files._env import build_task
from posttrain.envs.files._grade import parse_targets
from posttrain.envs.workspace import SUBMIT
from posttrain.errors import UserError
from posttrain.types import Task

FILES = get_domain("files")


@pytest.fixture(scope="module")
def verify():
    return FILES.make_verifier(None)


def _task(kind: str, level: int) -> Task:
    return build_task(random.Random(f"attacks2-{kind}"), level, f"files-attacks2-{kind}", [kind])


def _ref(task: Task) -> dict:
    return json.loads(str(task.reference))


def _b64(data: bytes) -> dict[str, str]:
    return {"base64": base64.b64encode(data).decode()}


def test_a_kept_file_replaced_by_a_directory_is_not_regular() -> None:
    """Before: ``[]`` (a pass) for the right target beside ``keep.md`` turned into a directory."""
    pristine = {"keep.md": b"k\n", "old.csv": b"a\n"}
    targets = parse_targets({"out.txt": {"format": "text", "content": "done\n"}, "old.csv": {"absent": True}}, pristine)
    right = {"out.txt": Entry("file", b"done\n"), "keep.md": Entry("file", b"k\n")}
    assert grade_final_state(targets, pristine, right) == []
    for path in ("keep.md", "old.csv"):  # a file left alone, a file to delete
        problems = grade_final_state(targets, pristine, {**right, path: Entry("dir")})
        assert ("not_regular", f"{path} is a directory where a file was; only regular files may be left in the "
                               "workspace") in problems, (path, problems)
    assert grade_final_state(targets, pristine, {**right, "new": Entry("dir")}) == []  # an empty folder: no file



@pytest.mark.parametrize(("name", "swap", "kinds"), [
    ("a target as a directory holding its content", {"out.txt": Entry("dir"), "out.txt/x": Entry("file", b"done\n")},
     {"missing", "collateral"}),
    ("a kept file as a directory holding itself", {"keep.md": Entry("dir"), "keep.md/keep.md": Entry("file", b"k\n")},
     {"not_regular", "collateral"}),
    ("a deleted file as a directory holding its bytes",
     {"old.csv": Entry("dir"), "old.csv/old.csv": Entry("file", b"a\n")}, {"not_regular", "wrong_content", "collateral"}),
])
def test_a_directory_that_holds_the_file_it_replaced_fails(name: str, swap: dict, kinds: set) -> None:
    """The stop hook's read of 13bb8d1 as a policy: a directory in a file's place that holds the file's
    bytes one level down is still the file's absence, and what it holds is collateral."""
    pristine = {"keep.md": b"k\n", "old.csv": b"a\n"}
    targets = parse_targets({"out.txt": {"format": "text", "content": "done\n"}, "old.csv": {"absent": True}}, pristine)
    right = {"out.txt": Entry("file", b"done\n"), "keep.md": Entry("file", b"k\n")}
    problems = grade_final_state(targets, pristine, {**right, **swap})
    assert {kind for kind, _ in problems} == kinds, (name, problems)

@pytest.mark.parametrize(("targets", "why"), [
    ({"README.md/x.txt": {"format": "text", "content": "a"}}, "'README.md' is a file, so 'README.md/x.txt'"),
    ({"README.md": {"absent": True}, "README.md/x.txt": {"format": "text", "content": "a"}}, "'README.md' is a file"),
    ({"out": {"format": "text", "content": "a"}, "out/b": {"format": "text", "content": "b"}}, "'out' is a file"),
    ({"data": {"format": "text", "content": "a"}}, "'data' is a file, so 'data/a.csv'"),
])
def test_targets_that_cannot_make_one_tree_with_the_workspace_are_refused(verify, targets, why) -> None:
    """Before: accepted, and the reference itself failed (``format``: the write refused)."""
    record = {"id": "attacks2-tree", "domain": "files", "prompt": "Write the files.",
              "workspace": {"README.md": "r\n", "data/a.csv": "1\n"}, "targets": targets}
    with pytest.raises(UserError, match="field 'targets'.*one tree") as e:
        FILES.parse_task(record, "t.jsonl")
    assert why in str(e.value) and "Traceback" not in str(e.value)
    ok = FILES.parse_task({**record, "targets": {"data/b.csv": {"format": "text", "content": "b\n"},
                                                 "data/a.csv": {"absent": True}}}, "t.jsonl")
    assert verify(ok, json.dumps({"data/b.csv": "b\n", "data/a.csv": None})).passed


def _single_attacks() -> list[tuple[str, Task, str]]:
    sales, contacts, notes = _task("sales", 3), _task("contacts", 4), _task("notes", 4)
    report = _ref(sales)["reports/summary.json"]
    table, log = _ref(contacts)["contacts.csv"], _ref(contacts)["contacts.log"]

    def with_(task: Task, **changes: object) -> str:
        return json.dumps({**_ref(task), **changes})

    moved = {p: v for p, v in _ref(notes).items() if p.startswith("archive/") and isinstance(v, str)}
    others = {p: v for p, v in _ref(notes).items() if not p.startswith("archive/")}
    return [
        ("the report in UTF-16", sales, with_(sales, **{"reports/summary.json": _b64(report.encode("utf-16"))})),
        ("the report gzipped", sales, with_(sales, **{"reports/summary.json": _b64(gzip.compress(report.encode()))})),
        ("the report twice in one file", sales, with_(sales, **{"reports/summary.json": report + report})),
        ("the report as JSON lines", sales, with_(sales, **{"reports/summary.json": "\n".join(
            json.dumps({k: v}) for k, v in json.loads(report).items())})),
        ("a zero-width space in a key", sales, with_(sales, **{"reports/summary.json": report.replace(
            '"total_revenue"', '"total_revenue\u200b"')})),
        ("the CSV tab-separated", contacts, with_(contacts, **{"contacts.csv": table.replace(",", "\t")})),
        ("the CSV with Excel's sep= line", contacts, with_(contacts, **{"contacts.csv": "sep=,\n" + table})),
        ("the CSV with a space after each comma", contacts, with_(contacts, **{"contacts.csv": table.replace(",", ", ")})),
        ("the log ending in a no-break space", contacts, with_(contacts, **{"contacts.log": log.rstrip() + "\u00a0\n"})),
        ("the log in fullwidth digits", contacts, with_(contacts, **{"contacts.log": "".join(
            chr(ord(c) + 0xFEE0) if c.isdigit() else c for c in log)})),
        ("the log with a line separator (U+2028)", contacts, with_(contacts, **{"contacts.log": log.rstrip() + "\u2028"})),
        ("the archived notes moved with CRLF line endings", notes, with_(notes, **{
            p: v.replace("\n", "\r\n") for p, v in moved.items()})),
        ("the archive folder in another case", notes, json.dumps({**others, **{
            "ARCHIVE/" + p.removeprefix("archive/"): v for p, v in _ref(notes).items() if p.startswith("archive/")}})),
        ("the report beside a trailing-space twin", sales, json.dumps({"reports/summary.json ": report})),
        ("the report's name with a zero-width joiner", sales, json.dumps({"reports/summary\u200d.json": report})),
        ("the report's name with a fullwidth slash", sales, json.dumps({"reports\uff0fsummary.json": report})),
        ("the right files in the reasoning, {} after it", sales, f"<think>{json.dumps(_ref(sales))}</think>{{}}"),
        ("the right files in a tilde fence", sales, f"~~~json\n{json.dumps(_ref(sales))}\n~~~"),
        ("the content as a list of lines", sales, json.dumps({"reports/summary.json": report.split("\n")})),
    ]


def test_single_responses_that_dodge_the_work_or_alias_a_target_fail(verify) -> None:
    for what, task, response in _single_attacks():
        verdict = verify(task, response)
        assert verdict.outcome == "fail", (what, verdict.feedback)


def test_honest_variants_of_the_right_work_still_pass(verify) -> None:
    """No false negatives: the layout the comparison ignores, as an honest tool writes it."""
    sales, contacts = _task("sales", 3), _task("contacts", 4)
    report = json.loads(_ref(sales)["reports/summary.json"])
    assert verify(sales, json.dumps({"reports/summary.json": json.dumps(report, sort_keys=True) + "\r\n"})).passed
    ref = _ref(contacts)
    assert verify(contacts, json.dumps({**ref, "contacts.csv": ref["contacts.csv"].replace("\n", "\r"),
                                        "contacts.log": ref["contacts.log"].replace("\n", " \r\n") + "\r\n"})).passed
    assert verify(sales, "<think>sum the valid rows</think>\n```json\n" + json.dumps(_ref(sales)) + "\n```\nDone.").passed


@pytest.mark.parametrize(("what", "task_kind", "command", "error_class"), [
    ("a unix socket left behind", "sales",
     "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"", "not_regular"),
    ("the database switched to WAL by its reader", "sqlite",
     "python3 -c \"import sqlite3; c = sqlite3.connect('db/shop.sqlite'); c.execute('pragma journal_mode=wal')\"",
     "collateral"),
    ("scratch in a folder made unreadable", "sales", "mkdir s && echo x > s/x && chmod 000 s", "collateral"),
    ("a note's folder emptied and made anew", "notes", "rm -rf notes && mkdir notes", "collateral"),
])
def test_what_an_episode_leaves_beside_the_right_work_fails(pool, verify, what, task_kind, command, error_class) -> None:
    task = _task(task_kind, 4)
    got = play(pool, task, [*oracle(task)[:-1], call("bash", command=command), SUBMIT], verify)
    assert got.first.outcome == "fail" and got.first.error_class == error_class, (what, got.first.feedback)


def test_an_episode_that_touches_only_metadata_or_restores_what_it_changed_passes(pool, verify) -> None:
    """Times, empty folders, and a file or mode changed then put back are not the workspace's content (a mode
    left changed is collateral: tests/envs/test_files_attacks5.py)."""
    task = _task("sqlite", 4)
    restore = ("cp db/shop.sqlite /tmp/k && echo x >> db/shop.sqlite && cp /tmp/k db/shop.sqlite && "
               "chmod 000 README.md && chmod 644 README.md && touch -d 2000-01-01 todo.md && mkdir -p tmp/a && "
               "sqlite3 db/shop.sqlite 'select count(*) from orders' && "
               f"cp -- {shlex.quote('reports/countries.md')} /tmp/r && rm -rf reports && mkdir reports && "
               "cp /tmp/r reports/countries.md")
    got = play(pool, task, [*oracle(task)[:-1], call("bash", command=restore), SUBMIT], verify)
    assert got.first.outcome == "pass", got.first.feedback
