"""Bad-input leftovers of the CLI (a helper's sixth fuzz, after test_cli_fuzz5.py): each is one line
naming the file, field or value and what was expected, exit 2, before any work, and nothing already
written is lost.

Before: ``report`` of a run whose metrics.jsonl, summary.json or config.yaml was a pipe, a dangling
link or a directory left it out silently (exit 0, a report.html without its curves, eval table or
recipe); a records file that was a pipe was "records file not found" (report, audit), and ``tasks
stats`` called a pipe or a dangling trajectories/rl.jsonl "missing"; ``report RUN RUN`` wrote a
comparison page of a run beside itself; ``eval --baseline`` of a pipe said "not found"; a recipe's
``columns`` on a JSON task file was ignored (the run started with the file's own keys as fields).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import test_cli_fuzz4
from test_bad_inputs import MATH, assert_refused_in_one_line

ws = test_cli_fuzz4.ws
"""The fixture: a workspace with good.jsonl and r.yaml, in which a recipe that starts fails."""

RECORD = {"task_id": "m1", "domain": "math", "outcome": "pass", "reward": 1.0, "sample_idx": 0, "attempt": 0,
          "prompt": "1+1?", "completion": "\\boxed{2}"}


def _run(ws: Path) -> Path:
    """A run directory with one metrics row and one SFT trajectory: enough for report, audit and stats."""
    run = ws / "run"
    (run / "trajectories").mkdir(parents=True)
    (run / "eval").mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"stage": "rl", "step": 0, "loss": 1.0}) + "\n")
    (run / "trajectories" / "sft.jsonl").write_text(json.dumps(RECORD) + "\n")
    return run


def _fifo(p: Path) -> None:
    p.unlink(missing_ok=True)
    os.mkfifo(p)


def _dangling(p: Path) -> None:
    p.unlink(missing_ok=True)
    os.symlink("moved", p)


def _directory(p: Path) -> None:
    p.unlink(missing_ok=True)
    p.mkdir()


@pytest.mark.parametrize(("name", "make", "needle"), [
    ("metrics.jsonl", _fifo, "run/metrics.jsonl: a pipe or FIFO, not a file; expected the run's metrics"),
    ("summary.json", _dangling, "run/summary.json: a symbolic link to nothing (or a loop), not a file; expected "
                                "the run's summary"),
    ("config.yaml", _directory, "run/config.yaml: is a directory, expected the run's resolved recipe"),
    ("eval/rl.jsonl", _fifo, "run/eval/rl.jsonl: a pipe or FIFO, not a file; expected a records .jsonl file"),
], ids=["metrics-fifo", "summary-dangling", "config-directory", "records-fifo"])
def test_report_names_a_run_file_that_is_no_file(ws, capsys, name, make, needle):
    make(_run(ws) / name)
    assert_refused_in_one_line(capsys, ws, ["report", "run"], needle)


def test_audit_names_a_records_file_that_is_a_pipe(ws, capsys):
    _fifo(_run(ws) / "trajectories" / "rl.jsonl")
    assert_refused_in_one_line(capsys, ws, ["audit", "run", "--tasks", "good.jsonl"],
                               "run/trajectories/rl.jsonl: a pipe or FIFO, not a file; expected a records .jsonl file")


@pytest.mark.parametrize(("make", "kind"), [(_fifo, "a pipe or FIFO"), (_dangling, "a symbolic link to nothing")],
                         ids=["fifo", "dangling"])
def test_tasks_stats_names_trajectories_that_are_no_file(ws, capsys, make: Callable[[Path], None], kind):
    make(_run(ws) / "trajectories" / "rl.jsonl")
    assert_refused_in_one_line(capsys, ws, ["tasks", "stats", "run"], f"run/trajectories/rl.jsonl: {kind}")


def test_report_refuses_a_run_given_twice(ws, capsys):
    _run(ws)
    assert_refused_in_one_line(capsys, ws, ["report", "run", "./run/"],
                               "RUN_DIR ./run/: given twice (run is the same directory); give each run once")


def test_eval_names_a_baseline_that_is_a_pipe(ws, capsys):
    (ws / "resp.jsonl").write_text(json.dumps({"task_id": "m1", "response": "\\boxed{2}"}) + "\n")
    os.mkfifo(ws / "base.json")
    assert_refused_in_one_line(capsys, ws, ["eval", "--responses", "resp.jsonl", "--tasks", "good.jsonl",
                                            "--baseline", "base.json"],
                               "--baseline base.json: a pipe, device or socket, not a file")


def test_a_recipe_maps_columns_only_of_a_columnar_file(ws, capsys):
    (ws / "eval.jsonl").write_text(json.dumps({**MATH, "id": "e1", "prompt": "2+2?"}) + "\n")
    (ws / "r.yaml").write_text("stages: [sft]\nsft: {demonstrations: references}\n"
                               "tasks: {train: [{file: good.jsonl, columns: {prompt: question}}], eval: [{file: eval.jsonl}]}\n")
    assert_refused_in_one_line(capsys, ws, ["run", "r.yaml", "--out", "o"],
                               "r.yaml: tasks.train[0]: good.jsonl: columns: only a columnar file (Parquet, Arrow or a "
                               "datasets directory) has columns to map")
