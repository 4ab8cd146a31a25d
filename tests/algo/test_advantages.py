"""Advantage estimators against the numeric vectors of reference/algorithms.md 5.1."""

import math

import pytest
import torch

from posttrain.algo import ADVANTAGES, gae, grpo_advantages, reinforce_pp_advantages, rloo_advantages

R = torch.tensor([[1.0, 0.0, 0.0, 0.5]], dtype=torch.float64)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"eps": 1e-6}, [1.305580, -0.783348, -0.783348, 0.261116]),  # verl / SkyRL / slime / ROLL
        ({"eps": 1e-4}, [1.305310, -0.783186, -0.783186, 0.261062]),  # TRL scale_rewards="group"
        ({"eps": 1e-9}, [1.305582, -0.783349, -0.783349, 0.261116]),  # OpenRLHF group_norm
        ({"eps": 1e-5}, [1.305555, -0.783333, -0.783333, 0.261111]),  # AReaL
        ({"eps": 1e-6, "ddof": 0}, [1.507553, -0.904532, -0.904532, 0.301511]),  # rLLM
        ({"scale_by_std": False}, [0.625, -0.375, -0.375, 0.125]),  # Dr.GRPO
    ],
)
def test_grpo_reference_vectors(kwargs, expected):
    got = ADVANTAGES["grpo"](R, **kwargs)
    assert torch.allclose(got, torch.tensor([expected], dtype=torch.float64), atol=1e-6)


def test_rloo_reference_vectors():
    assert torch.allclose(
        rloo_advantages(R), torch.tensor([[0.833333, -0.5, -0.5, 0.166667]], dtype=R.dtype), atol=1e-6
    )
    nemo = rloo_advantages(R, scale_by_std=True, eps=1e-6)  # NeMo-RL default: LOO mean + LOO std
    assert torch.allclose(
        nemo, torch.tensor([[2.886741, -0.999998, -0.999998, 0.288675]], dtype=R.dtype), atol=1e-6
    )


def test_trl_readme_vector():
    got = grpo_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0]]), eps=1e-4)
    assert torch.allclose(got.abs(), torch.full((1, 4), 0.8659), atol=1e-4)


def test_nan_rewards_are_excluded_from_group_stats_and_get_zero():
    nan = float("nan")
    with_nan = torch.tensor([[1.0, nan, 0.0, 0.0, 0.5]], dtype=torch.float64)
    for name, fn in ADVANTAGES.items():
        got = fn(with_nan)
        assert got[0, 1] == 0.0, name
        assert torch.isfinite(got).all(), name
        # the finite entries equal the advantages of the group without the NaN sample
        assert torch.allclose(got[:, [0, 2, 3, 4]], fn(R), atol=1e-12), name


def test_degenerate_groups_give_zero():
    nan = float("nan")
    r = torch.tensor([[1.0, 1.0, 1.0], [0.7, nan, nan], [nan, nan, nan]])
    for name, fn in ADVANTAGES.items():
        assert (fn(r) == 0).all(), name


@pytest.mark.parametrize("group_size", [2, 3, 5, 8, 12, 16, 64])
def test_a_group_whose_rewards_are_all_equal_gets_exactly_zero(group_size):
    """Equal rewards that are not 0 or 1 (a format or process weight: every member failing alike) have a
    float32 mean that can miss them by an ulp (8 x 0.2 -> 0.19999999); that noise over a std of its own
    size was an advantage of -0.015 for every member (+0.106 for 12 x 0.7): a group failing alike pushed
    up or down, and rows ``rl.skip_zero_advantage`` could not skip. Such a group has no signal."""
    for value in (0.2, 0.7, 0.45, 1 / 3, 0.1, 0.35, 0.9):
        r = torch.full((2, group_size), value)
        for name, fn in ADVANTAGES.items():
            for std in (True, False):
                assert (fn(r, scale_by_std=std) == 0).all(), (name, std, value)
    # with a group that has signal, reinforce_pp still whitens the equal group's rows (a = 0 exactly)
    mixed = torch.tensor([[0.7] * 12, [1.0, 0.0] * 6])
    got = reinforce_pp_advantages(mixed)
    assert torch.allclose(got[0], got[0, :1].expand(12)) and got[1].abs().min() > 0.5


def test_reinforce_pp_whitens_over_the_batch():
    r = torch.tensor([[1.0, 0.0, 0.0, 0.5], [0.0, 0.0, 1.0, 1.0]], dtype=torch.float64)
    got = reinforce_pp_advantages(r)
    centered = r - r.mean(-1, keepdim=True)
    expected = (centered - centered.mean()) / (centered.flatten().std() + 1e-6)
    assert torch.allclose(got, expected, atol=1e-12)
    assert abs(float(got.mean())) < 1e-12


def test_rejects_wrong_shape():
    with pytest.raises(ValueError, match="N prompts, G samples"):
        grpo_advantages(torch.ones(4))


def test_gae_matches_a_python_loop():
    torch.manual_seed(0)
    b, t, gamma, lam = 3, 6, 0.9, 0.8
    rewards, values = torch.randn(b, t, dtype=torch.float64), torch.randn(b, t, dtype=torch.float64)
    mask = torch.ones(b, t, dtype=torch.float64)
    mask[0, 4:] = 0  # right padding
    mask[1, 2] = 0  # a tool-output token inside the completion: skipped by the recursion
    adv, ret = gae(rewards, values, mask, gamma=gamma, lam=lam)
    for i in range(b):
        idx = [k for k in range(t) if mask[i, k] > 0]
        last, expect = 0.0, {}
        for pos, k in reversed(list(enumerate(idx))):
            nv = float(values[i, idx[pos + 1]]) if pos + 1 < len(idx) else 0.0
            delta = float(rewards[i, k]) + gamma * nv - float(values[i, k])
            last = delta + gamma * lam * last
            expect[k] = last
        for k in range(t):
            assert math.isclose(float(adv[i, k]), expect.get(k, 0.0), abs_tol=1e-12)
            want = expect[k] + float(values[i, k]) if k in expect else 0.0
            assert math.isclose(float(ret[i, k]), want, abs_tol=1e-12)
