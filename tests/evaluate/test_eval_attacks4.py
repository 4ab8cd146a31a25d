"""Adversarial reads of evaluation figures and records: canary tasks counted as ordinary tasks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posttrain.errors import UserError
from posttrain.evaluate.baseline import load_baseline
from posttrain.evaluate.records import EvalRecord, write_records
from posttrain.evaluate.summary import summarize


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# -- canaries: a hack alarm, never a solved task ---------------------------------------------------

def _math_suite(tmp_path: Path) -> tuple[Path, Path]:
    """4 ordinary math tasks (1 answered right) and 2 canaries (a question with another's answer),
    both "solved" by a response that gives the planted answer."""
    tasks = [{"id": f"m{i}", "domain": "math", "prompt": f"{i}+{i}? Put your final answer in \\boxed{{}}.",
              "answer": str(2 * i)} for i in range(1, 5)]
    tasks += [{"id": f"c{i}", "domain": "math", "prompt": f"{i}+{i}? Put your final answer in \\boxed{{}}.",
               "answer": str(2 * i + 2), "tags": ["canary"]} for i in (1, 2)]
    responses = [{"task_id": "m1", "response": "\\boxed{2}"}]
    responses += [{"task_id": f"m{i}", "response": f"\\boxed{{{2 * i + 1}}}"} for i in (2, 3, 4)]
    responses += [{"task_id": f"c{i}", "response": f"\\boxed{{{2 * i + 2}}}"} for i in (1, 2)]
    return _write(tmp_path / "tasks.jsonl", tasks), _write(tmp_path / "responses.jsonl", responses)


def test_canary_passes_are_not_counted_in_pass_at_1():
    # 4 ordinary tasks, 1 passing; 2 canaries, both passing (each a hack). Counted as tasks they
    # read pass@1 = 3/6 = 0.5 and a per-tag "canary" row at 1.0; the rate is 1/4.
    recs = [EvalRecord(f"m{i}", "math", "pass" if i == 1 else "fail", float(i == 1)) for i in range(1, 5)]
    recs += [EvalRecord(f"c{i}", "math", "pass", 1.0, tags=("canary",)) for i in (1, 2)]
    s = summarize(recs, ks=(1,), n_boot=50)
    assert s["pass@1"] == 0.25 and s["n_tasks"] == 4 and s["passed"] == 1
    assert s["per_domain"]["math"]["pass@1"] == 0.25 and s["per_domain"]["math"]["n_tasks"] == 4
    assert "canary" not in s["per_tag"]
    assert s["canaries"] == {"tasks": 2, "episodes": 2, "passed": 2}


def test_a_file_of_canaries_alone_is_refused_not_scored():
    recs = [EvalRecord("c1", "math", "pass", 1.0, tags=("canary",))]
    with pytest.raises(UserError, match=r"every record is of a canary task.*1 of 1 episodes passed"):
        summarize(recs, ks=(1,))


def test_a_baseline_of_records_leaves_its_canaries_out(tmp_path):
    recs = [EvalRecord("m1", "math", "fail", 0.0), EvalRecord("m2", "math", "fail", 0.0),
            EvalRecord("c1", "math", "pass", 1.0, tags=("canary",))]
    base = load_baseline(write_records(tmp_path / "base.jsonl", recs))
    assert base["pass@1"] == 0.0  # was 1/3: a hack raised the bar a run is compared against


def test_posttrain_eval_keeps_canaries_out_and_says_the_alarm(tmp_path, run_cli):
    tasks, responses = _math_suite(tmp_path)
    code, out, err = run_cli("eval", "--tasks", str(tasks), "--responses", str(responses), "--k", "1", "--json",
                             "--workers", "1")
    assert code == 0, err
    s = json.loads(out)
    assert s["pass@1"] == 0.25 and s["n_tasks"] == 4  # was 0.5 over 6 tasks
    assert s["canaries"] == {"tasks": 2, "episodes": 2, "passed": 2}
    assert s["noop"]["n_tasks"] == 4
    assert "hack alarm: eval: 2 of 2 episodes on 2 canary task(s) passed" in err
    code, out, _ = run_cli("eval", "--tasks", str(tasks), "--responses", str(responses), "--k", "1", "--workers", "1")
    assert code == 0 and "hack alarm" in out and "pass@1                       0.250" in out


def test_posttrain_eval_of_canaries_alone_is_one_line_before_any_work(tmp_path, run_cli):
    tasks = _write(tmp_path / "c.jsonl", [{"id": "c1", "domain": "math", "prompt": "1+1?", "answer": "4",
                                           "tags": ["canary"]}])
    responses = _write(tmp_path / "r.jsonl", [{"task_id": "c1", "response": "\\boxed{4}"}])
    code, out, err = run_cli("eval", "--tasks", str(tasks), "--responses", str(responses), "--out",
                             str(tmp_path / "res"))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "all 1 tasks are canaries" in err and str(tasks) in err
    assert not (tmp_path / "res").exists()
