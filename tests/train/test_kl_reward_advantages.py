"""A KL to the reference in the reward (``rl.kl_placement: reward``) is centred with the group, never
scaled by a reward std (``grpo.group_advantages``'s ``kl_term``).

Added to the rewards before a std-scaled estimator, the KL made a group that fails alike (rewards that
differ only by beta * KL, ~1e-3) a group of full-size advantages: the answer nearest the reference (an
empty one) was pushed up as far as a pass would be, and RLOO's leave-one-out std gave a pass in a group
of near-equal failures +1478. The task reward's advantage is now scaled as the recipe says, and the KL
term's is only centred: exactly the old sum where the estimator has no std.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch

from posttrain.algo import ADVANTAGES, kl_in_reward
from posttrain.train.grpo import group_advantages
from posttrain.train.recipe import RLConfig
from posttrain.types import Trajectory, Turn, Verdict

ESTIMATORS = [(name, std) for name in ADVANTAGES for std in (True, False)]
BETA = 0.05


def _group(rewards: list[float], lengths: list[int]) -> list[Trajectory]:
    """One group of single-turn episodes with distinct completions (``lengths`` tokens each)."""
    out = []
    for i, (r, n) in enumerate(zip(rewards, lengths, strict=True)):
        verdict = Verdict("pass" if r == 1.0 else "fail", r)
        out.append(Trajectory("t", "g", i, (Turn((1, 2, 3), tuple(range(10 + i, 10 + i + n)), (-0.5,) * n, "eos", verdict),),
                              r))
    return out


def _kl_term(rewards: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """``-beta * KL`` of each row, by the trainer's own ``kl_in_reward``: each completion token 0.01 nats
    from the reference (an empty answer: none)."""
    t = max(lengths)
    mask = torch.tensor([[1.0] * n + [0.0] * (t - n) for n in lengths])
    logp = torch.full((len(lengths), t), -1.0)
    shaped = kl_in_reward(rewards.reshape(-1), logp, logp - 0.01, mask, kl_coef=BETA, kind="k1")
    return (shaped - rewards.reshape(-1)).reshape(rewards.shape)


def _both(name: str, std: bool, task: list[float], lengths: list[int], *, dedup: bool = False
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """(the advantages now, the old ones: the estimator over rewards with the KL in them)."""
    groups = [_group(task, lengths)]
    rewards = torch.tensor([task])
    kl = _kl_term(rewards, lengths)
    cfg = RLConfig(advantage=name, scale_by_std=std, dedup=dedup)
    now = group_advantages(groups, rewards, cfg, kl_term=kl)[0]
    old = functools.partial(ADVANTAGES[name], scale_by_std=std)(rewards + kl)[0]
    return now, old


@pytest.mark.parametrize(("name", "std"), ESTIMATORS)
def test_a_group_failing_alike_gets_only_its_kl_centred(name: str, std: bool) -> None:
    """Four wrong answers, the last one empty (no KL): the advantages are the KL's differences
    (~1e-3), not full-size; the empty answer is ahead of the others by exactly that much."""
    lengths = [20, 30, 10, 0]
    now, old = _both(name, std, [0.0, 0.0, 0.0, 0.0], lengths)
    kl_spread = BETA * 0.01 * max(lengths)
    assert float(now.abs().max()) <= 2 * kl_spread, now
    assert float(now[3]) > 0 and float(now[3]) <= 2 * kl_spread
    if std:  # the hole: std scaling made the KL alone a full-size advantage (reinforce_pp whitens the batch)
        assert float(old.abs().max()) > 0.5, old


@pytest.mark.parametrize(("name", "std"), ESTIMATORS)
def test_a_pass_keeps_the_advantage_its_reward_earns(name: str, std: bool) -> None:
    """A pass among near-equal failures: its advantage is the task reward's (as without KL) within the
    KL's size. RLOO's leave-one-out std over failures that differ only by KL gave it +1478 until that
    std was floored at half the group's (476cb99): the KL folded in now gives at most 2 sqrt(n)."""
    lengths = [20, 21, 22, 23]
    now, old = _both(name, std, [1.0, 0.0, 0.0, 0.0], lengths)
    alone = functools.partial(ADVANTAGES[name], scale_by_std=std)(torch.tensor([[1.0, 0.0, 0.0, 0.0]]))[0]
    assert torch.allclose(now, alone, atol=2 * BETA * 0.01 * max(lengths)), (now, alone)
    if name == "rloo" and std:
        assert 0 < float(old[0]) <= 2 * math.sqrt(4) + 1e-6, old


@pytest.mark.parametrize("name", list(ADVANTAGES))
@pytest.mark.parametrize("dedup", [False, True])
def test_without_std_it_is_the_old_sum(name: str, dedup: bool) -> None:
    """No std: the estimators are linear, so the task's advantage plus the centred KL is the estimator
    over the shaped rewards, as before."""
    for task in ([1.0, 0.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 1.0]):
        now, old = _both(name, False, task, [20, 30, 10, 5], dedup=dedup)
        assert torch.allclose(now, old, atol=1e-6), (task, now, old)


def test_an_infra_row_stays_out() -> None:
    """A NaN reward (infra) has a NaN KL term too: advantage 0, out of the others' baseline."""
    rewards = torch.tensor([[1.0, 0.0, float("nan"), 0.0]])
    lengths = [20, 30, 10, 5]
    kl = _kl_term(rewards, lengths)
    adv = group_advantages([_group([1.0, 0.0, 0.0, 0.0], lengths)], rewards, RLConfig(), kl_term=kl)[0]
    assert float(adv[2]) == 0.0 and torch.isfinite(adv).all()
    assert float(adv[0]) > 0.5 > float(adv[1])
