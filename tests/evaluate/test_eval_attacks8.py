"""Adversarial reads of the regression gate: an evaluation over few tasks, each sampled several
times, whose bootstrap intervals (resampling tasks) are zero-width when its tasks agree, so an
identical model fails ``--fail-on-regression`` on one failed sample in ten."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posttrain.evaluate.baseline import compare
from posttrain.evaluate.records import EvalRecord
from posttrain.evaluate.summary import summarize


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    """Two math tasks (answers 2 and 4) and a baseline evaluation that answered all 10 samples of each."""
    root = tmp_path_factory.mktemp("gate")
    _write(root / "tasks.jsonl", [{"id": f"m{i}", "domain": "math", "answer": str(2 * i),
                                   "prompt": f"{i}+{i}? Put your final answer in \\boxed{{}}."} for i in (1, 2)])
    return root


def _responses(root: Path, name: str, wrong_per_task: int) -> Path:
    rows = [{"task_id": f"m{i}", "response": f"\\boxed{{{2 * i + (s < wrong_per_task)}}}"}
            for i in (1, 2) for s in range(10)]
    return _write(root / f"{name}.jsonl", rows)


def _eval(run_cli, root: Path, name: str, wrong_per_task: int, *extra: str) -> tuple[int, str]:
    code, out, err = run_cli("eval", "--tasks", str(root / "tasks.jsonl"), "--responses",
                             str(_responses(root, name, wrong_per_task)), "--out", str(root / name), *extra)
    assert code in (0, 1), err
    return code, out


def test_one_failed_sample_in_ten_on_a_two_task_domain_is_not_a_regression(run_cli, suite):
    """Baseline 20 of 20, current 18 of 20 (one miss per task: Fisher's one-sided p = 0.24). Resampling
    two tasks that agree gives [1.0, 1.0] and [0.9, 0.9]: each value outside the other's interval, so
    the gate failed (an identical model at a 0.9 pass rate failed it 12% of the time, 150 trials)."""
    assert _eval(run_cli, suite, "base", 0)[0] == 0
    code, out = _eval(run_cli, suite, "same", 1, "--baseline", str(suite / "base"), "--fail-on-regression")
    assert code == 0, out
    summary = json.loads((suite / "same" / "summary.json").read_text())
    row = summary["baseline"]["per_domain"]["math"]
    assert row["current_ci"] == [0.9, 0.9] and row["baseline_ci"] == [1.0, 1.0] and row["regressed"] is False


def test_a_real_drop_on_a_two_task_domain_still_fails_the_gate(run_cli, suite):
    code, out = _eval(run_cli, suite, "drop", 8, "--baseline", str(suite / "base"), "--fail-on-regression")
    assert code == 1, out
    summary = json.loads((suite / "drop" / "summary.json").read_text())
    assert summary["baseline"]["per_domain"]["math"]["regressed"] is True


def test_a_baseline_summary_without_sample_counts_is_judged_by_its_intervals():
    """A summary written before ``n_samples`` (or by hand) has only its interval: judged as before."""
    cur = {"pass@1": 0.2, "ci": {"pass@1": [0.2, 0.2]}, "per_domain": {}}
    base = {"pass@1": 0.8, "ci": {"pass@1": [0.8, 0.8]}, "per_domain": {}}
    assert compare(cur, base)["overall"]["regressed"] is True


def test_sampling_noise_of_many_samples_does_not_widen_a_wide_task_interval():
    recs = [EvalRecord(f"t{t}", "math", o, float(o == "pass"), sample_idx=s)
            for t in range(40) for s, o in enumerate(["pass" if t < 30 else "fail"] * 5)]
    worse = [EvalRecord(f"t{t}", "math", o, float(o == "pass"), sample_idx=s)
             for t in range(40) for s, o in enumerate(["pass" if t < 10 else "fail"] * 5)]
    row = compare(summarize(worse, ks=(1,), n_boot=300), summarize(recs, ks=(1,), n_boot=300))["overall"]
    assert row["regressed"] is True and "judged_ci" not in json.dumps(row)


# -- a domain of one task: no interval from resampling tasks, so it was never judged ----------------

def test_a_one_task_evaluation_that_fails_every_sample_fails_the_gate(run_cli, suite):
    """One task, 10 of 10 samples, then 0 of 10: no task-bootstrap interval on either side, so the row
    read ``not judged`` and --fail-on-regression exited 0 on a collapse. Its samples are i.i.d. draws
    of one task: judged by their Wilson intervals, apart only on a real drop (6/10 against 7/10 is not,
    tests/evaluate/test_eval_attacks3.py)."""
    _write(suite / "one.jsonl", [{"id": "m1", "domain": "math", "answer": "2",
                                  "prompt": "1+1? Put your final answer in \\boxed{}."}])
    right = _write(suite / "right.jsonl", [{"task_id": "m1", "response": "\\boxed{2}"}] * 10)
    wrong = _write(suite / "wrong.jsonl", [{"task_id": "m1", "response": "\\boxed{3}"}] * 10)
    assert run_cli("eval", "--tasks", str(suite / "one.jsonl"), "--responses", str(right),
                   "--out", str(suite / "one-base"))[0] == 0
    code, out, err = run_cli("eval", "--tasks", str(suite / "one.jsonl"), "--responses", str(wrong),
                             "--out", str(suite / "one-now"), "--baseline", str(suite / "one-base"),
                             "--fail-on-regression")
    assert code == 1, out + err
    row = json.loads((suite / "one-now" / "summary.json").read_text())["baseline"]["per_domain"]["math"]
    assert row["regressed"] is True and row["current_ci"] is None and "one task" in row["note"]


def test_one_task_with_a_single_sample_each_side_is_still_not_a_regression():
    one = {"pass@1": 1.0, "ci": {}, "n_tasks": 1, "n_samples": 1, "per_domain": {}}
    row = compare({**one, "pass@1": 0.0}, one)["overall"]
    assert row["regressed"] is False and row["delta"] == -1.0


# -- the audit: an agent episode it did not re-verify is not an infra error ------------------------

def test_an_audit_counts_agent_episodes_apart_from_infra_errors(tmp_path, run_cli):
    """A passed tool episode is not re-verified from its last answer (tests/evaluate/test_audit.py); it
    was counted and shown as an infra error ("1 infra errors", "infra error on re-verify"), so an audit
    that re-verified nothing read as one hit by flaky infrastructure, and a gate reading ``unverified``
    could not tell the two apart."""
    from posttrain.cli._service import open_service
    from posttrain.envs import get_domain, task_to_record
    from posttrain.evaluate.audit import run_audit
    from posttrain.evaluate.records import write_records

    task = get_domain("tool").generate_tasks(1, seed=0)[0]
    _write(tmp_path / "tasks.jsonl", [task_to_record(task)])
    run = tmp_path / "run"
    write_records(run / "trajectories" / "rl.jsonl", [EvalRecord(
        task.id, "tool", "pass", 1.0, completion="Done.", stage="eval/rl",
        extra={"turns": [{"observation": "...", "action": "<tool_call>...", "verdict": None}]})])
    code, out, err = run_cli("audit", str(run), "--sample", "5", "--tasks", str(tmp_path / "tasks.jsonl"))
    assert code == 0, err
    assert ("re-verified 0 of 1 passed records (0 disagreements, 0 infra errors, 0 tasks not found, 1 agent "
            "episodes not re-verified)") in out
    page = (run / "audit" / "review.html").read_text()
    assert "agent episode, not re-verified" in page and "infra error on re-verify" not in page
    result = run_audit(run, sample=5, task_files=[str(tmp_path / "tasks.jsonl")], open_service=open_service)
    assert (result.checked, result.unverified, result.episodes_not_reverified, result.reverified) == (0, 0, 1, 0)
