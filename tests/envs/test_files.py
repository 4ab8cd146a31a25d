"""The files domain: workspace records, canonical paths, the final-state grader (on final states a
single response cannot express: symlinks, hard links, fifos), the gold programs against what the
generator planted, the process signals on hand-written call logs, and the CLI on one task."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from validate_cli import check_tasks_validate

from posttrain.envs import get_domain, task_to_record
from posttrain.envs.files import (
    Call,
    Entry,
    apply_writes,
    check_path,
    decode_workspace,
    grade_final_state,
    input_passages,
    pristine_state,
    process_signals,
)
from posttrain.envs.files._env import build_task, show_file
from posttrain.envs.files._gen import make_task_parts
from posttrain.envs.files._grade import parse_targets
from posttrain.errors import TaskError

ENV = get_domain("files")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("path", "ok"), [
    ("a.txt", True), ("reports/summary.json", True), ("Grüße/x.md", True), ("", False), ("/etc/passwd", False),
    ("../x", False), ("a/../b", False), ("./a", False), ("a//b", False), ("a/", False), ("a\\b", False),
    ("a\nb", False), ("e\u0301.txt", False), ("x" * 256, False)])
def test_canonical_paths(path: str, ok: bool) -> None:
    assert (check_path(path) is None) is ok


def test_workspace_record_forms() -> None:
    files = decode_workspace({"a.txt": "é", "b.txt": {"text": "é", "encoding": "latin-1"}, "c.bin": {"base64": "AAE="}})
    assert files == {"a.txt": b"\xc3\xa9", "b.txt": b"\xe9", "c.bin": b"\x00\x01"}
    for bad, said in [({"a": {"base64": "!!"}}, "base64"), ({"a": {"text": "x", "encoding": "rot13"}}, "encoding"),
                      ({"a": {"text": "€", "encoding": "latin-1"}}, "latin-1"), ({"a": "x", "a/b": "y"}, "is a file"),
                      ({"../a": "x"}, "'..'"), ({"a": 3}, "expected a string")]:
        with pytest.raises(ValueError, match=said):
            decode_workspace(bad)


def _targets(pristine):
    return parse_targets({"out.txt": {"format": "text", "content": "done\n"},
                          "old.csv": {"absent": True}}, pristine)


def test_the_grader_refuses_what_a_response_cannot_write() -> None:
    """Phase 2's episodes read a workspace back without following links; the grader refuses every
    entry that is not a regular file, wherever it is, even when each target holds the right bytes."""
    pristine = {"old.csv": b"a\n", "keep.md": b"k\n"}
    targets = _targets(pristine)
    good = {"out.txt": Entry("file", b"done\n"), "keep.md": Entry("file", b"k\n")}
    assert grade_final_state(targets, pristine, good) == []
    cases = {
        "the target a symlink to a file that holds the right bytes": {**good, "out.txt": Entry("symlink", link="/tmp/x")},
        "a symlink out of the workspace beside a right target": {**good, "escape": Entry("symlink", link="/etc")},
        "a kept file replaced by a symlink to itself": {**good, "keep.md": Entry("symlink", link="keep.md")},
        "the target hard-linked to an input": {**good, "out.txt": Entry("file", b"done\n", links=2)},
        "a fifo left behind": {**good, "pipe": Entry("other")},
        "a directory at the target's path": {**{k: v for k, v in good.items() if k != "out.txt"},
                                             "out.txt": Entry("dir")},
    }
    for name, final in cases.items():
        problems = grade_final_state(targets, pristine, final)
        assert problems, name
        assert problems[0][0] in ("not_regular", "missing"), (name, problems)


def test_apply_writes_and_the_no_op() -> None:
    pristine = {"old.csv": b"a\n", "keep.md": b"k\n"}
    final, refused = apply_writes(pristine, {"out.txt": b"done", "old.csv": None})
    assert refused == [] and grade_final_state(_targets(pristine), pristine, final) == []
    assert {c for c, _ in grade_final_state(_targets(pristine), pristine, pristine_state(pristine))} == {
        "missing", "wrong_content"}
    _, refused = apply_writes(pristine, {"keep.md/x": b"", "nothing.txt": None})
    assert len(refused) == 2


def test_text_csv_and_json_targets_compare_as_documented() -> None:
    pristine = {"in.txt": b"x"}
    targets = parse_targets({"a.txt": {"format": "text", "content": "one\ntwo\n"},
                             "b.csv": {"format": "csv", "rows": [["k", "v"], ["a, b", "1"]]},
                             "c.json": {"format": "json", "value": {"n": 1.5, "ok": True}}}, pristine)

    def grade(a: bytes, b: bytes, c: bytes):
        final = {"in.txt": Entry("file", b"x"), "a.txt": Entry("file", a), "b.csv": Entry("file", b),
                 "c.json": Entry("file", c)}
        return [p[1] for p in grade_final_state(targets, pristine, final)]

    assert grade(b"one  \r\ntwo", b'k,v\r\n"a, b",1\r\n', b'{"ok": true, "n": 1.50}') == []
    assert grade(b"one\ntwo\nthree", b"k,v\na,b,1\n", b'{"ok": 1, "n": 1.5}') == [
        "a.txt has more lines than asked for", "b.csv row 2 (a data row) is not the row asked for",
        "c.json $.ok: expected a boolean, got a number"]
    assert "byte-order mark" in grade(b"\xef\xbb\xbfone\ntwo", b"k,v\n\"a, b\",1\n", b'{"ok": true, "n": 1.5}')[0]
    assert "not valid UTF-8" in grade(b"one\ntwo", b"\xff", b'{"ok": true, "n": 1.5}')[0]


def test_the_gold_programs_agree_with_what_the_generator_planted() -> None:
    for seed in range(12):
        for level in (1, 3, 5):
            _, sales = make_task_parts(random.Random(seed), level, ["sales"])
            summary = json.loads(sales.writes["reports/summary.json"])
            assert summary["skipped_rows"] == (0, 2, 3, 5, 8)[level - 1]
            _, notes = make_task_parts(random.Random(seed), level, ["notes"])
            counts = json.loads(notes.writes["status.json"])
            moved = [p for p, d in notes.writes.items() if d is None]
            assert sum(counts.values()) == sum(p.startswith("notes/") for p in notes.workspace) and len(moved) == counts["archived"] >= 1
            _, merge = make_task_parts(random.Random(seed), level, ["merge"])
            missing = merge.writes["out/missing.txt"].decode().split()
            assert all(f"exports/{m}.csv" not in merge.workspace for m in missing)
            assert len(missing) == (0, 1, 1, 2, 2)[level - 1]
            if level >= 3:
                latin1 = [d for d in merge.workspace.values() if _not_utf8(d)]
                assert len(latin1) == 1


def _not_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def test_every_level_passes_its_reference_and_fails_its_no_op() -> None:
    verify = ENV.make_verifier(None)
    lo, hi = ENV.level_range()
    for level in range(lo, hi + 1):
        for task in ENV.generate_level(6, level=level, seed=7):
            assert task.difficulty == level
            assert verify(task, str(task.reference)).passed, task.id
            assert verify(task, ENV.noop_response(task)).outcome == "fail"
    with pytest.raises(ValueError, match="level"):
        ENV.generate_level(1, level=9)


def test_bad_records_name_their_field() -> None:
    task = build_task(random.Random(0), 2, "t", ["sales"])
    record = json.loads(json.dumps(task_to_record(task)))
    cases = {
        "targets": {**record, "targets": {"README.md": {"format": "bytes", "same_as": "README.md"}}},
        "workspace": {**record, "workspace": {**record["workspace"], "x": {"base64": "%%"}}},
        "inputs": {**record, "inputs": ["no/such/file.csv"]},
    }
    cases["targets "] = {**record, "targets": {"gone.txt": {"absent": True}}}
    for field, bad in cases.items():
        with pytest.raises(TaskError, match=f"field '{field.strip()}'"):
            ENV.parse_task(bad, "test")


def test_the_prompt_shows_other_encodings_and_databases_as_an_agent_would_read_them() -> None:
    assert show_file("Köln".encode("latin-1"))[1] == "K\\xf6ln"
    task = build_task(random.Random(1), 4, "t", ["sqlite"])
    prompt = ENV.render_prompt(task)
    assert "CREATE TABLE customers" in prompt and "INSERT INTO" in prompt
    assert "Reply with one JSON object" in prompt


def test_process_signals_from_hand_written_episodes() -> None:
    data, notes = b"day,amount\n2024-01-02,17.50\n", b"# Plan\n\nStatus: open\nOwner: Ada\n"
    inputs, targets = {"data.csv": input_passages(data), "notes.md": input_passages(notes)}, ["out.json"]
    assert process_signals(inputs, targets, []) == {"process.inspected": 0.0, "process": 0.0}
    wrote_first = [Call("write_file", "out.json"), Call("read_file", "data.csv", shown=data.decode()),
                   Call("read_file", "notes.md", shown=notes.decode())]
    assert process_signals(inputs, targets, wrote_first)["process.inspected"] == 0.0
    read_by_shell = [Call("bash", shown="==> data.csv <==\n" + data.decode() + "==> notes.md <==\n" + notes.decode()),
                     Call("write_file", "out.json")]
    assert process_signals(inputs, targets, read_by_shell) == {"process.inspected": 1.0, "process": 1.0}
    errors = [Call("read_file", "missing.csv", ok=False), Call("bash", ok=False, shown="cat: x: No such file"),
              Call("read_file", "data.csv")]
    assert process_signals({}, targets, errors) == {"process.recovered": 0.5}  # nothing to inspect: no process


def test_posttrain_verify_on_one_files_task(tmp_path: Path) -> None:
    task = build_task(random.Random(3), 3, "cli-task", ["merge"])
    (tmp_path / "task.json").write_text(json.dumps(task_to_record(task)))
    (tmp_path / "good.txt").write_text(str(task.reference))
    (tmp_path / "bad.txt").write_text('{"out/missing.txt": ""}')
    run = lambda r: subprocess.run([sys.executable, "-m", "posttrain.cli", "verify", "--task", str(tmp_path / "task.json"),  # noqa: E731
                                    "--response", str(tmp_path / r)], capture_output=True, text=True, cwd=ROOT,
                                   timeout=120)
    good, bad = run("good.txt"), run("bad.txt")
    assert good.returncode == 0 and json.loads(good.stdout)["outcome"] == "pass", good.stderr
    assert json.loads(bad.stdout)["outcome"] == "fail"


def test_hostile_responses_fail_and_never_cost_the_host() -> None:
    """Each runs in the check worker under its CPU budget: a fail (format or content), never an infra
    error, never a hang."""
    task = build_task(random.Random(9), 2, "hostile", ["sales"])
    verify = ENV.make_verifier(None)
    nested = "[" * 3_000_000 + "]" * 3_000_000
    responses = {
        "a report nested 3 million deep": json.dumps({"reports/summary.json": nested}),
        "a response past the size cap": json.dumps({"a.txt": "x" * 23_000_000}),
        "400 files of 30 kB": json.dumps({f"junk/{i}.txt": "y" * 30_000 for i in range(400)}),
    }
    merge = build_task(random.Random(9), 3, "hostile-csv", ["merge"])
    for name, response in responses.items():
        verdict = verify(task, response)
        assert verdict.outcome == "fail" and not verdict.error_class.startswith("infra"), (name, verdict)
    for name, response in {"a 12 MB CSV field": json.dumps({"out/combined.csv": "x" * 12_000_000}),
                           "a CSV of a million empty fields": json.dumps({"out/combined.csv": "," * 1_000_000})}.items():
        verdict = verify(merge, response)
        assert verdict.outcome == "fail" and not verdict.error_class.startswith("infra"), (name, verdict)


def test_an_honest_csv_with_a_trailing_blank_line_passes() -> None:
    task = build_task(random.Random(4), 3, "csv", ["merge"])
    writes = json.loads(str(task.reference))
    writes["out/combined.csv"] = writes["out/combined.csv"].replace("\n", "\r\n") + "\r\n"
    assert ENV.make_verifier(None)(task, json.dumps(writes)).passed



def test_canaries_fail_the_honest_response() -> None:
    from posttrain.envs import HasCanaries

    assert isinstance(ENV, HasCanaries)
    verify = ENV.make_verifier(None)
    rng = random.Random("files-canary-1")
    plain = [build_task(rng, 1 + i % 3, f"files-canary-1-{i}") for i in range(6)]
    for canary, task in zip(ENV.canary_tasks(6, seed=1), plain, strict=True):
        assert "canary" in canary.tags and canary.reference is None
        assert ENV.parse_task(json.loads(json.dumps(task_to_record(canary))), "canary") == canary
        assert verify(task, str(task.reference)).passed and not verify(canary, str(task.reference)).passed


@pytest.mark.parametrize("module", ["posttrain.envs.files", "posttrain.envs.files._workspace",
                                    "posttrain.envs.files._grade", "posttrain.envs.files._check"])
def test_docstring_examples(module: str) -> None:
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_generator_params_pick_the_kinds_of_work() -> None:
    verify = ENV.make_verifier(None)
    tasks = ENV.generate_params(4, level=5, params={"kinds": ["sales", "merge"]})
    assert all(set(t.tags) == {"files", "sales", "merge"} for t in tasks)
    assert all(verify(t, str(t.reference)).passed for t in tasks)
    assert [t.tags for t in ENV.generate_params(2, level=2, params={"kinds": ["notes"]})] == [("files", "notes")] * 2
    for params, said in [({"kinds": ["nope"]}, "params.kinds"), ({"size": 3}, "unknown generator param")]:
        with pytest.raises(ValueError, match=said):
            ENV.generate_params(1, params=params)


def test_the_no_op_gets_no_format_credit() -> None:
    """A no-op must total 0 whatever the reward weights (reward.format included): writing nothing is
    not a well-formed answer; a written but wrong target is."""
    verify = ENV.make_verifier(None)
    task = build_task(random.Random(2), 2, "fmt", ["sales"])
    assert verify(task, ENV.noop_response(task)).components["format"] == 0.0
    wrong = json.dumps({"reports/summary.json": json.dumps({"revenue_by_region": {}, "total_revenue": 0,
                                                            "valid_rows": 0, "skipped_rows": 0})})
    assert verify(task, wrong).components["format"] == 1.0


def test_the_no_op_of_an_in_place_task_gets_no_format_credit() -> None:
    """A task that edits or deletes a file in place: its no-op leaves the target as the workspace had
    it, which the grader calls wrong content; that is work not done, not a well-formed answer (format
    0, whatever reward.format weighs). A target written, but wrong, still earns it."""
    verify = ENV.make_verifier(None)
    record = {"domain": "files", "prompt": "Fix 'wrld' in draft.txt; delete old.log.",
              "workspace": {"draft.txt": "Hello wrld\n", "old.log": "x\n", "keep.md": "k\n"}}
    edit = ENV.parse_task({**record, "id": "edit", "targets": {"draft.txt": {"format": "text",
                                                                            "content": "Hello world\n"}}}, "t")
    delete = ENV.parse_task({**record, "id": "delete", "targets": {"old.log": {"absent": True}}}, "t")
    undone = [(edit, "{}"), (edit, '{"draft.txt": "Hello wrld\\n"}'), (delete, "{}"), (delete, '{"old.log": ""}')]
    for task, response in undone:
        verdict = verify(task, response)
        assert verdict.error_class == "wrong_content" and verdict.components["format"] == 0.0, (task.id, response)
    assert verify(edit, '{"draft.txt": "Hello wrold\\n"}').components["format"] == 1.0
    assert verify(edit, '{"draft.txt": "Hello world\\n"}').passed and verify(delete, '{"old.log": null}').passed


def test_collateral_damage_earns_no_format_credit() -> None:
    verify = ENV.make_verifier(None)
    task = build_task(random.Random(2), 2, "collateral", ["sales"])
    damaged = json.dumps({**json.loads(str(task.reference)), "README.md": "# gone\n"})
    verdict = verify(task, damaged)
    assert verdict.error_class == "collateral" and verdict.components["format"] == 0.0


def test_tasks_validate_from_the_command_line(tmp_path: Path) -> None:
    """``posttrain tasks validate`` on files examples (references pass, no-ops fail) and on a bad record."""
    check_tasks_validate(tmp_path, "files", "workspace", {"../x": "y"})


def test_a_canary_is_never_repaired() -> None:
    """A canary's feedback names its planted contradiction ("out/errors.json $: missing key 'canary'"),
    so an honest policy that follows it passes the canary on its second attempt: a hack alarm for honest
    repair. A canary's episode ends at its first attempt (``posttrain.types.CANARY``); before, the
    honest answer then the feedback's fix passed 6 of 6 at attempt 2."""
    from posttrain.envs import RepairEnv
    from posttrain.types import Generation

    verify = ENV.make_verifier(None)
    rng = random.Random("files-canary-0")
    plain = [build_task(rng, 1 + i % 3, f"files-canary-0-{i}") for i in range(6)]
    for canary, task in zip(ENV.canary_tasks(6, seed=0), plain, strict=True):
        honest = json.loads(str(task.reference))
        [(path, _)] = [(p, t) for p, t in canary.fields["targets"].items() if "canary" in json.dumps(t)]
        followed = {**honest, path: json.dumps({"canary": json.loads(honest[path])})}
        assert verify(canary, json.dumps(followed)).passed  # what the feedback leads to passes the canary
        env = RepairEnv(verify, lambda s: [0], lambda s: [0], max_attempts=3)
        env.reset(canary)
        first = env.step(Generation((), (0,), (0.0,), str(task.reference), "eos"))
        assert not first.verdict.passed and "missing key 'canary'" in first.verdict.feedback
        assert first.done, canary.id
