"""Per-token policy losses, aggregation, KL and importance weights against reference/algorithms.md 5.2-5.4."""

import math

import pytest
import torch

from posttrain.algo import (
    AGG_MODES,
    KL_KINDS,
    POLICY_LOSSES,
    aggregate,
    cispo_loss,
    count_items,
    gspo_loss,
    kl_in_reward,
    kl_penalty,
    loss_stats,
    ppo_clip_loss,
    truncated_is_weights,
)


def _one(ratio: float, adv: float, **kw) -> float:
    logp = torch.tensor([[math.log(ratio)]], dtype=torch.float64)
    return float(
        ppo_clip_loss(
            logp,
            torch.zeros_like(logp),
            torch.tensor([adv], dtype=torch.float64),
            torch.ones_like(logp),
            **kw,
        )
    )


@pytest.mark.parametrize(
    ("ratio", "adv", "kw", "expected"),
    [
        (1.5, 1.0, {}, -1.2),
        (1.5, 1.0, {"clip_high": 0.28}, -1.28),
        (0.5, 1.0, {}, -0.5),
        (1.5, -1.0, {}, 1.5),
        (0.5, -1.0, {}, 0.8),
        (5.0, -1.0, {}, 5.0),
        (5.0, -1.0, {"dual_clip": 3.0}, 3.0),
    ],
)
def test_ppo_clip_reference_values(ratio, adv, kw, expected):
    assert math.isclose(_one(ratio, adv, **kw), expected, abs_tol=1e-9)


def test_losses_are_masked_even_on_inf_padding():
    logp = torch.tensor([[-1.0, -float("inf")]])
    mask = torch.tensor([[1.0, 0.0]])
    for name, fn in POLICY_LOSSES.items():
        out = fn(logp, logp.clone(), torch.tensor([1.0]), mask)
        assert out[0, 1] == 0 and torch.isfinite(out).all(), name


def test_ppo_gradient_is_zero_where_clipped():
    logp = torch.log(torch.tensor([[1.5, 1.1]])).requires_grad_()
    ppo_clip_loss(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2)).sum().backward()
    assert logp.grad[0, 0] == 0 and math.isclose(float(logp.grad[0, 1]), -1.1, rel_tol=1e-6)


def test_gspo_value_and_gradient_match_the_sequence_ratio():
    torch.manual_seed(1)
    logp = (torch.randn(2, 5, dtype=torch.float64) * 0.01).requires_grad_()
    old = torch.zeros(2, 5, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.float64)
    adv = torch.tensor([1.0, -0.5], dtype=torch.float64)
    ours = aggregate(
        gspo_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2), mask, "seq_mean_token_mean"
    )
    (g_ours,) = torch.autograd.grad(ours, logp)
    # TRL importance_sampling_level="sequence": ratio exp(mean_t log_ratio), shape (B, 1), loss_type grpo
    s = torch.exp(((logp - old) * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True))
    trl = -torch.min(s * adv[:, None], torch.clamp(s, 0.8, 1.2) * adv[:, None])
    trl = ((trl * mask).sum(-1) / mask.sum(-1)).mean()
    (g_trl,) = torch.autograd.grad(trl, logp)
    assert torch.allclose(ours, trl, atol=1e-12) and torch.allclose(g_ours, g_trl, atol=1e-12)


def test_cispo_keeps_gradient_with_clipped_weight():
    logp = torch.log(torch.tensor([[9.0]])).requires_grad_()
    loss = cispo_loss(
        logp, torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1), clip_low=1.0, clip_high=4.0
    )
    assert math.isclose(float(loss.detach()), -5.0 * math.log(9.0), rel_tol=1e-6)
    loss.sum().backward()
    assert math.isclose(float(logp.grad), -5.0, rel_tol=1e-6)
    with pytest.raises(ValueError, match="dual clip"):
        cispo_loss(logp, logp, torch.ones(1), torch.ones(1, 1), dual_clip=3.0)


def test_aggregation_reference_values():
    loss = torch.tensor([[1.0, 2.0, 0.0, 0.0], [3.0, 4.0, 5.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    got = {m: float(aggregate(loss, mask, m, norm_const=8)) for m in AGG_MODES}
    assert got == {
        "token_mean": 3.5,
        "seq_mean_token_mean": 3.0,
        "seq_mean_token_sum": 10.5,
        "seq_mean_token_sum_norm": 1.3125,
    }
    with pytest.raises(ValueError, match="norm_const"):
        aggregate(loss, mask, "seq_mean_token_sum_norm")
    with pytest.raises(ValueError, match="unknown aggregation mode"):
        aggregate(loss, mask, "token-mean")  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", AGG_MODES)
def test_aggregation_is_invariant_to_micro_batching_with_global_counts(mode):
    torch.manual_seed(0)
    loss = torch.randn(8, 7, dtype=torch.float64)
    mask = (torch.rand(8, 7) > 0.3).to(torch.float64)
    mask[3] = 0  # an empty sequence does not count in the seq_* normalizers
    full = aggregate(loss, mask, mode, norm_const=7)
    n = count_items(mask, mode)
    parts = sum(
        aggregate(loss[i : i + 2], mask[i : i + 2], mode, norm_const=7, num_items=n) for i in range(0, 8, 2)
    )
    assert torch.allclose(full, parts, atol=1e-12)


def test_kl_reference_values():
    logp, ref = (
        torch.log(torch.tensor([0.3], dtype=torch.float64)),
        torch.log(torch.tensor([0.5], dtype=torch.float64)),
    )
    got = [float(kl_penalty(logp, ref, k)) for k in KL_KINDS]
    assert all(
        math.isclose(a, b, abs_tol=1e-6) for a, b in zip(got, [-0.510826, 0.130471, 0.155841], strict=True)
    )


def test_kl_clamps():
    logp, ref = torch.tensor([0.0]), torch.tensor([30.0])
    assert float(kl_penalty(logp, ref, "k3")) == 10.0  # input clamp 20 then output clamp 10
    assert float(kl_penalty(logp, ref, "k1", clamp=None)) == -30.0
    assert math.isinf(float(kl_penalty(logp, torch.tensor([200.0]), "k3", clamp=None)))
    with pytest.raises(ValueError, match="unknown KL estimator"):
        kl_penalty(logp, ref, "k4")  # type: ignore[arg-type]


def test_kl_in_reward_subtracts_sequence_kl():
    r = kl_in_reward(
        torch.tensor([1.0, float("nan")]),
        torch.zeros(2, 3),
        torch.full((2, 3), -0.5),
        torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]),
        kl_coef=0.1,
    )
    assert math.isclose(float(r[0]), 0.9, rel_tol=1e-6) and math.isnan(float(r[1]))


def test_truncated_is_weights():
    old = torch.log(torch.tensor([[0.9, 0.3, 0.5]]))
    samp = torch.log(torch.tensor([[0.3, 0.6, 0.5]]))
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert torch.allclose(truncated_is_weights(old, samp, mask, cap=2.0), torch.tensor([[2.0, 0.5, 0.0]]))
    assert torch.allclose(truncated_is_weights(old, samp, mask, mode="mask"), torch.tensor([[0.0, 0.5, 0.0]]))
    seq = truncated_is_weights(old, samp, mask, level="sequence", cap=10.0)
    assert torch.allclose(seq, torch.tensor([[1.5, 1.5, 0.0]]))


def test_loss_stats():
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.0, 3.0]]))
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    s = loss_stats(logp, torch.zeros(1, 4), mask, adv=torch.tensor([1.0]), logits=torch.zeros(1, 4, 5))
    assert math.isclose(s["clip_frac"], 1 / 3) and s["clip_frac_low"] == 0.0  # 0.5 with A>0 is not clipped
    assert math.isclose(s["ratio_max"], 1.5, rel_tol=1e-6)
    assert math.isclose(s["entropy"], math.log(5), rel_tol=1e-6)
    expected_kl = ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5))) / 3
    assert math.isclose(s["approx_kl"], expected_kl, rel_tol=1e-5)
