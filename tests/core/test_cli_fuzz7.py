"""Bad-input leftovers of the CLI (a helper's seventh round, after test_cli_fuzz6.py): each is one line
naming the file, field or value and what was expected, exit 2, before any work, and nothing already
written is lost; and a UTF-8 byte-order mark is read wherever JSON or JSONL is read from a user's file.

Before: ``tasks stats`` counted a record ``{"task_id": NaN}`` as a task of domain "?", and a step "0"
as step 0; ``report`` drew a page of a run whose summary.json was ``{"eval": NaN}``, whose metrics had a
step "0" or of 400 digits, or whose config.yaml was a list; ``--set rl.steps=`` of 5,000 digits echoed
them all (10,186 characters on one line); ``--baseline`` and summary.json refused a BOM the task and
response files take; ``tasks decontaminate --n 10**21`` ran (every prompt shorter than n words: exact
duplicates only).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import test_cli_fuzz4
from test_bad_inputs import assert_refused_in_one_line

from posttrain.cli import main

ws = test_cli_fuzz4.ws
"""The fixture: a workspace with good.jsonl and r.yaml, in which a recipe that starts fails."""

BOM = b"\xef\xbb\xbf"
RL = {"task_id": "m1", "domain": "math", "outcome": "pass", "reward": 1.0, "step": 0, "sample_idx": 0, "attempt": 0}


def _run(ws: Path) -> Path:
    """A run directory with one metrics row and one RL trajectory: enough for report and stats."""
    run = ws / "run"
    (run / "trajectories").mkdir(parents=True)
    (run / "metrics.jsonl").write_text(json.dumps({"stage": "rl", "step": 0, "loss": 1.0}) + "\n")
    (run / "trajectories" / "rl.jsonl").write_text(json.dumps(RL) + "\n")
    return run


@pytest.mark.parametrize(("line", "needle"), [
    ('{"task_id": NaN, "domain": "math", "outcome": "pass"}', "field 'task_id' must be a string, got NaN"),
    ('{"domain": "math", "outcome": "pass"}', "missing field 'task_id'"),
    ('{"task_id": "m1", "outcome": "pass", "reward": "1"}', "field 'reward' must be a number in [0, 1] or null"),
    ('{"task_id": "m1", "outcome": "pass", "step": "0"}', "field 'step' must be an integer from 0 to 2**63-1, got \"0\""),
    ('{"task_id": "m1", "outcome": "won"}', "field 'outcome' must be one of pass|fail|infra_error"),
    ('{"task_id": "m1", "outcome": "pass", "domain": 5}', "field 'domain' must be a string, got 5"),
], ids=["task-id-nan", "task-id-missing", "reward-text", "step-text", "outcome", "domain"])
def test_tasks_stats_refuses_a_broken_record(ws, capsys, line, needle):
    (_run(ws) / "trajectories" / "rl.jsonl").write_text(json.dumps(RL) + "\n" + line + "\n")
    assert_refused_in_one_line(capsys, ws, ["tasks", "stats", "run"],
                               f"run/trajectories/rl.jsonl:2: not a trajectory record ({needle}")


@pytest.mark.parametrize(("name", "text", "needle"), [
    ("summary.json", '{"eval": NaN}', "run/summary.json: not valid JSON (non-finite number NaN is not allowed)"),
    ("summary.json", '{"eval": 5}', "run/summary.json: field 'eval' must be an object of evaluations, got int"),
    ("metrics.jsonl", '{"stage": "rl", "step": "0", "loss": 1}\n',
     "run/metrics.jsonl:1: field 'step' must be an integer from 0 to 2**63-1, got \"0\""),
    ("metrics.jsonl", '{"stage": "rl", "step": ' + "9" * 400 + ', "loss": 1}\n',
     "run/metrics.jsonl:1: field 'step' must be an integer from 0 to 2**63-1, got 9999999999999999999999999999999999999999"
     "... (400 characters)"),
    ("config.yaml", "- seed\n- 1\n", "run/config.yaml: expected a mapping of sections (the run's resolved recipe), got list"),
], ids=["summary-nan", "summary-eval-number", "metrics-step-text", "metrics-step-400-digits", "config-list"])
def test_report_refuses_a_broken_run_file(ws, capsys, name, text, needle):
    (_run(ws) / name).write_text(text)
    assert_refused_in_one_line(capsys, ws, ["report", "run"], needle)


def test_a_long_set_value_is_clipped_in_its_message(ws, capsys):
    assert_refused_in_one_line(capsys, ws, ["run", "r.yaml", "--out", "o", "--set", "rl.steps=" + "9" * 500],
                               "rl.steps: expected an integer in [1, 10000000], got 9999999999999999999999999999999999999999"
                               "... (500 characters)")
    assert_refused_in_one_line(capsys, ws, ["run", "r.yaml", "--out", "o", "--set", "rl.steps=" + "9" * 5000],
                               "override 'rl.steps=999999999999999999999999999999... (5009 characters): the value is "
                               "not valid YAML: '999999999999999999999999999999999999999... (5000 characters) is an "
                               "integer longer than any field holds (at most 64 bits)")
    assert_refused_in_one_line(capsys, ws, ["run", "r.yaml", "--out", "o", "--set", "rl.steps=x" + "9" * 5000],
                               "rl.steps: expected an integer, got 'x99999999999999999999999999999999999999... (5001 "
                               "characters)")


def test_a_long_value_in_a_recipe_is_clipped_too(ws, capsys):
    (ws / "r.yaml").write_text("rl:\n  steps: " + "9" * 5000 + "\n")
    main(["run", "r.yaml", "--out", "o"])
    err = capsys.readouterr().err
    assert "'999999999999999999999999999999999999999... (5000 characters) is an integer longer" in err, err
    assert len(err) < 400, err


def test_a_byte_order_mark_is_read_in_a_baseline_and_a_summary(ws, capsys):
    (ws / "resp.jsonl").write_text(json.dumps({"task_id": "m1", "response": "\\boxed{2}"}) + "\n")
    (ws / "base.json").write_bytes(BOM + json.dumps({"eval": {"rl": {"pass@1": 0.5}}}).encode())
    (ws / "base.jsonl").write_bytes(BOM + json.dumps(RL).encode() + b"\n")
    for base in ("base.json", "base.jsonl"):
        code = main(["eval", "--responses", "resp.jsonl", "--tasks", "good.jsonl", "--baseline", base])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert "vs baseline overall" in out, out
    run = _run(ws)
    (run / "summary.json").write_bytes(BOM + json.dumps({"eval": {"rl": {"pass@1": 0.25, "n_tasks": 4}}}).encode())
    (run / "metrics.jsonl").write_bytes(BOM + (run / "metrics.jsonl").read_bytes())
    (run / "trajectories" / "rl.jsonl").write_bytes(BOM + (run / "trajectories" / "rl.jsonl").read_bytes())
    assert main(["report", "run"]) == 0, capsys.readouterr().err
    page = (run / "report.html").read_text()
    assert "0.250" in page and "loss" in page
    assert main(["tasks", "stats", "run"]) == 0, capsys.readouterr().err
    assert "math" in capsys.readouterr().out


@pytest.mark.parametrize("n", [str(10**21), "1001"])
def test_decontaminate_refuses_an_n_out_of_range(ws, capsys, n):
    assert_refused_in_one_line(capsys, ws, ["tasks", "decontaminate", "good.jsonl", "good.jsonl", "--n", n, "--out", "o"],
                               f"tasks decontaminate: --n must be >= 1 (words per n-gram) and at most 1000, got {n}")

