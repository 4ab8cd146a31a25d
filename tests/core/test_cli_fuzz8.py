"""Bad-input leftovers of the CLI (a helper's eighth round, after test_cli_fuzz7.py): each is one line
naming the file, field or value and what was expected, exit 2, before any work, and nothing already
written is lost; a UTF-8 byte-order mark is read wherever a user's file is read.

Before: argparse echoed a ``--n`` of 5,000 digits whole (5,117 characters on one line); ``tasks stats``
of an empty trajectories/rl.jsonl printed an empty table, exit 0, and showed ``"domain": null`` as a
domain "None" beside the "?" of a record without one; ``audit`` said "records file not found" of a
canaries/*.jsonl pipe and "--tasks: ... not found" of a dangling RUN/tasks/*.jsonl it found itself;
``eval --run`` read RUN/eval/summary@<protocol>.json with a NaN (and wrote it back), refused one with a
byte-order mark and evaluated every checkpoint before failing on one that is a directory; ``verify
--response`` of a file saved with a byte-order mark failed a correct program as a SyntaxError.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import test_cli_fuzz4
from test_bad_inputs import HUMANEVAL, assert_refused_in_one_line

from posttrain.cli import main

ws = test_cli_fuzz4.ws
"""The fixture: a workspace with good.jsonl (task m1, math) and r.yaml, in which a recipe that starts fails."""
tiny = test_cli_fuzz4.tiny
"""The fixture: a tiny random-weight checkpoint."""

BOM = b"\xef\xbb\xbf"
RL = {"task_id": "m1", "outcome": "pass", "reward": 1.0, "step": 0, "sample_idx": 0, "attempt": 0}
PROTOCOL = {"tasks": "good.jsonl", "n_tasks": 1, "samples_per_task": 1, "temperature": 0.0, "max_new_tokens": 4,
            "seed": 0, "max_attempts": 1}
"""What ``eval --run run --tasks good.jsonl --max-new-tokens 4`` names its RUN/eval/summary@ file after."""
EVAL_RUN = ["eval", "--run", "run", "--tasks", "good.jsonl", "--max-new-tokens", "4"]
SUMMARY = "run/eval/summary@good1-n1-t0-len4-seed0.json"


def test_argparse_quotes_a_long_value_by_its_start_and_length(ws, capsys):
    assert_refused_in_one_line(capsys, ws, ["tasks", "decontaminate", "good.jsonl", "good.jsonl", "--n", "9" * 5000],
                               "argument --n: invalid int value: '" + "9" * 40 + "...' (5,000 characters)")


def test_tasks_stats_of_an_empty_trajectories_file_says_so(ws, capsys):
    (ws / "run" / "trajectories").mkdir(parents=True)
    (ws / "run" / "trajectories" / "rl.jsonl").write_text("\n")
    assert_refused_in_one_line(capsys, ws, ["tasks", "stats", "run"],
                               "run: no RL trajectories (trajectories/rl.jsonl holds no records")


def test_tasks_stats_shows_a_null_domain_as_a_missing_one(ws, capsys):
    (ws / "run" / "trajectories").mkdir(parents=True)
    lines = [RL, {**RL, "task_id": "m2", "domain": None}]
    (ws / "run" / "trajectories" / "rl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert main(["tasks", "stats", "run"]) == 0
    out = capsys.readouterr().out
    assert "None" not in out, out
    assert [line.split()[:2] for line in out.splitlines() if line.startswith("?")][0] == ["?", "2"], out


def _audit_run(ws: Path) -> Path:
    run = ws / "run"
    for folder in ("trajectories", "canaries", "tasks"):
        (run / folder).mkdir(parents=True)
    rec = {**RL, "domain": "math", "completion": "\\boxed{2}", "prompt": "1+1?"}
    (run / "trajectories" / "sft.jsonl").write_text(json.dumps(rec) + "\n")
    return run


def test_audit_names_a_canaries_file_that_is_a_pipe(ws, capsys):
    os.mkfifo(_audit_run(ws) / "canaries" / "rl.jsonl")
    assert_refused_in_one_line(capsys, ws, ["audit", "run", "--tasks", "good.jsonl"],
                               "run/canaries/rl.jsonl: a pipe or FIFO, not a file; expected a records .jsonl file")


def test_audit_names_a_saved_task_file_that_links_to_nothing(ws, capsys):
    os.symlink("nowhere", _audit_run(ws) / "tasks" / "train.jsonl")
    assert_refused_in_one_line(capsys, ws, ["audit", "run", "--tasks", "good.jsonl"],
                               "run/tasks/train.jsonl: a symbolic link to nothing (or a loop), not a file; "
                               "expected a task file the run saved")


def _eval_run(ws: Path, tiny: Path, summary: bytes | None) -> Path:
    shutil.copytree(tiny, ws / "run" / "checkpoints" / "base")
    train = {"id": "t1", "domain": "math", "prompt": "What is seven times six?", "answer": "42"}
    (ws / "run" / "tasks").mkdir()
    (ws / "run" / "tasks" / "train.jsonl").write_text(json.dumps(train) + "\n")  # else a note on overlap, a 2nd line
    path = ws / SUMMARY
    path.parent.mkdir(parents=True)
    if summary is None:
        path.mkdir()
    else:
        path.write_bytes(summary)
    return path


def test_eval_run_refuses_a_nan_in_its_summary(ws, tiny, capsys):
    _eval_run(ws, tiny, json.dumps({"eval_protocol": PROTOCOL, "eval": {"sft": {"pass@1": float("nan")}}}).encode())
    assert_refused_in_one_line(capsys, ws, EVAL_RUN, f"{SUMMARY}: not valid JSON (non-finite number NaN is not allowed")


def test_eval_run_reads_its_summary_past_a_byte_order_mark(ws, tiny, capsys):
    _eval_run(ws, tiny, BOM + json.dumps({"eval_protocol": {"seed": 1}, "eval": {}}).encode())
    assert_refused_in_one_line(capsys, ws, EVAL_RUN, f"{SUMMARY} holds an evaluation with another protocol")


def test_eval_run_refuses_a_summary_that_is_a_directory_before_evaluating(ws, tiny, capsys):
    _eval_run(ws, tiny, None)
    assert_refused_in_one_line(capsys, ws, EVAL_RUN, f"{SUMMARY}: is a directory, expected the run's evaluations")


def test_verify_reads_a_response_file_past_a_byte_order_mark(ws, capsys):
    (ws / "he.json").write_text(json.dumps(HUMANEVAL))
    (ws / "a.py").write_bytes(BOM + b"def f():\n    return 1\n")
    assert main(["verify", "--task", "he.json", "--domain", "code", "--response", "a.py"]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "pass"
