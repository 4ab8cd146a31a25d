"""Advantage estimators: group-relative (GRPO, Dr.GRPO, RLOO, REINFORCE++) and GAE (PPO).

Group estimators take the rewards of N prompts x G samples and return one advantage per sample,
to be broadcast over that sample's completion tokens by the policy loss. They are selected by name
from ``ADVANTAGES``; every entry shares the ``AdvantageFn`` signature, and every keyword has a
meaning in every entry (``scale_by_std``, ``ddof``, ``eps``).

NaN rewards (infrastructure errors, DESIGN.md "three outcomes, never two") are *excluded*: group
statistics (mean, std, leave-one-out baseline) are computed over the finite rewards only, and a NaN
reward gets advantage 0. An infinite reward is a ``ValueError`` (the reward's bug): left out as NaN
is, a failure scored -inf got advantage 0 where one scored 0 got -0.71 ([1, 0, -inf], GRPO). The caller must also zero that sample's ``loss_mask`` so that it adds
neither gradient nor tokens to the normalizers (``train.grpo.build_batch`` does).
A group with fewer than two finite rewards has no baseline information: all its advantages are 0
(SkyRL's choice; verl instead returns the raw reward for G=1). So has a group whose finite rewards
are all equal: its advantages are exactly 0, never the float noise of its mean (``_spread``), whatever
the rest of the batch (reinforce_pp's whitening included).

RLOO's and REINFORCE++'s statistics are taken in float64 (``_wide``) and the advantages returned in
the rewards' dtype (GRPO's one mean and std per group keep order as they are): the
float32 noise of a group mean, a leave-one-out mean in particular, which differs per sample, gave a
reward a little worse a little more advantage (rewards 1e-6 apart, ~8 float32 ulps).

Every advantage is bounded by its group's size, whatever the rewards: a z-score of n samples is at
most ``sqrt((n-1)(n-ddof)/n)`` from their mean (GRPO, reinforce_pp over the batch), RLOO's std-scaled
one ``2 sqrt(n(n-ddof)/(n-1))`` (its leave-one-out std is floored at half the group's std,
``rloo_advantages``); unscaled ones by the group's reward range.

``gae`` is PPO's per-token estimator with a value head; it needs values and a token mask, so it has
its own signature and call site (not in the registry).

Not here: reward shaping (``shaping.py``), KL-in-reward (``kl.py``), the trainer loop.
"""

from __future__ import annotations

from typing import Literal, Protocol

import torch
from torch import Tensor

AdvantageName = Literal["grpo", "rloo", "reinforce_pp"]


class AdvantageFn(Protocol):
    def __call__(
        self, rewards: Tensor, /, *, scale_by_std: bool = ..., ddof: int = ..., eps: float = ...
    ) -> Tensor: ...


def _wide(rewards: Tensor) -> Tensor:
    # the rewards in float64 for the statistics (on the CPU where the device has no float64: MPS; the
    # advantages go back cast first, then moved)
    return rewards.to("cpu" if rewards.device.type == "mps" else rewards.device, torch.float64)


def _group_stats(rewards: Tensor, ddof: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    # rewards (N, G) possibly with NaN -> (valid (N, G) bool, count (N, 1), mean (N, 1), std (N, 1))
    valid = torch.isfinite(rewards)
    r = torch.where(valid, rewards, torch.zeros_like(rewards))
    count = valid.sum(dim=-1, keepdim=True).to(rewards.dtype)  # (N, 1)
    mean = r.sum(dim=-1, keepdim=True) / count.clamp(min=1)  # (N, 1)
    sq = torch.where(valid, (r - mean) ** 2, torch.zeros_like(r))
    var = sq.sum(dim=-1, keepdim=True) / (count - ddof).clamp(min=1)  # (N, 1)
    return valid, count, mean, var.sqrt()


def _spread(rewards: Tensor, valid: Tensor) -> Tensor:  # (N, G), (N, G) bool -> (N, 1) bool
    # True where a group's finite rewards are not all equal. Where they are, the float32 mean of equal
    # values can miss them by an ulp (8 x 0.2 -> 0.19999999), and that noise over a std of its own size
    # was an advantage of up to ~0.1 for every member alike: a group failing alike pushed up or down.
    hi = torch.where(valid, rewards, torch.full_like(rewards, -torch.inf)).amax(-1, keepdim=True)
    lo = torch.where(valid, rewards, torch.full_like(rewards, torch.inf)).amin(-1, keepdim=True)
    return hi > lo


def _check(rewards: Tensor) -> None:
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be (N prompts, G samples), got shape {tuple(rewards.shape)}")
    if not rewards.is_floating_point():
        raise ValueError(f"rewards must be a float tensor, got {rewards.dtype}")
    if bool(torch.isinf(rewards).any()):
        # NaN alone means infra; an infinite reward left out like one gave a failure scored -inf
        # advantage 0 and no place in its group's baseline (its row still trained, with 0)
        where = [tuple(ix) for ix in torch.isinf(rewards).nonzero().tolist()[:3]]
        raise ValueError(f"rewards must be finite or NaN (infra error), got +-inf at (group, sample) {where}: "
                         "the reward's bug, never an infra error")


def grpo_advantages(
    rewards: Tensor,  # (N, G) one scalar reward per sample, NaN = infra error
    /,
    *,
    scale_by_std: bool = True,
    ddof: int = 1,
    eps: float = 1e-6,
) -> Tensor:  # (N, G)
    """Group-normalized advantage: ``(r - mean_group) / (std_group + eps)``.

    GRPO (Shao et al. 2024, DeepSeekMath, arXiv:2402.03300). ``scale_by_std=False`` is Dr.GRPO
    (Liu et al. 2025, arXiv:2503.20783): ``r - mean``. ``ddof=1`` (Bessel) matches verl, TRL, SkyRL,
    slime; ``ddof=0`` matches rLLM. ``eps`` is 1e-6 in verl/SkyRL/slime, 1e-4 in TRL.

    >>> [round(a, 5) for a in grpo_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.5]]))[0].tolist()]
    [1.30558, -0.78335, -0.78335, 0.26112]
    """
    _check(rewards)
    # in the rewards' dtype (not _wide): one mean and one std for the whole group keep the order of
    # its rewards, and runs recorded before keep their advantages to the bit
    valid, count, mean, std = _group_stats(rewards, ddof)
    adv = rewards - mean
    if scale_by_std:
        adv = adv / (std + eps)
    keep = valid & (count >= 2) & _spread(rewards, valid)
    return torch.where(keep, adv, torch.zeros_like(adv))


def rloo_advantages(
    rewards: Tensor,  # (N, G)
    /,
    *,
    scale_by_std: bool = False,
    ddof: int = 1,
    eps: float = 1e-6,
) -> Tensor:  # (N, G)
    """Leave-one-out baseline: ``r_i - mean_{j != i} r_j`` (RLOO, Ahmadian et al. 2024, arXiv:2402.14740).

    Equal to ``(r_i - mean) * n / (n - 1)`` for n finite rewards in the group (verl, SkyRL, OpenRLHF),
    which is how it is computed: one mean for the group, so a better reward never gets less.
    ``scale_by_std=True`` also divides by the leave-one-out std (``ddof`` over the n-1 others) plus
    ``eps``: NeMo-RL's default estimator, with one departure. The others' std is floored at half the
    group's std (same ``ddof``), which bounds ``|a| <= 2 sqrt(n(n-ddof)/(n-1))`` (2 sqrt(n) for ddof=1).
    NeMo-RL divides by the others' std alone where it is > 0 and leaves the difference unscaled where it
    is 0: where the others are (nearly) equal that is a division by ~0, and one lucky or unlucky
    completion got an unbounded weight: [1, 0 x 6, 0.05] gave the pass +52, [1, 0 x 6, 0.001] +2638,
    the one failure among near-equal passes -2638; and with the others exactly equal, +1.0, in reward
    units (x10 for rewards scaled by 10). Floored, those are +5.65 .. +5.66 (= 2 sqrt(8)), and wherever
    the others' std is at least half the group's (the doctest's group) the advantage is NeMo-RL's.

    >>> [round(a, 5) for a in rloo_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.5]]))[0].tolist()]
    [0.83333, -0.5, -0.5, 0.16667]
    >>> [round(a, 4) for a in rloo_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), scale_by_std=True)[0].tolist()]
    [4.0, -0.5773, -0.5773, -0.5773]
    """
    _check(rewards)
    x = _wide(rewards)
    n_groups, g = x.shape
    valid, count, mean, group_std = _group_stats(x, ddof)
    r = torch.where(valid, x, torch.zeros_like(x))
    adv = (r - mean) * count / (count - 1).clamp(min=1)  # r_i - mean of the others, (N, G)
    if scale_by_std:
        # others[n, i, j] = 1 where j != i and j is valid: the leave-one-out set of sample i, (N, G, G)
        eye = torch.eye(g, dtype=torch.bool, device=x.device)
        others = (~eye).unsqueeze(0) & valid.unsqueeze(1)
        n_o = others.sum(-1).to(x.dtype)  # (N, G)
        r_j = r.unsqueeze(1).expand(n_groups, g, g)
        base = torch.where(others, r_j, torch.zeros_like(r_j)).sum(-1) / n_o.clamp(min=1)  # (N, G)
        dev = torch.where(others, (r_j - base.unsqueeze(-1)) ** 2, torch.zeros_like(r_j))
        std = (dev.sum(-1) / (n_o - ddof).clamp(min=1)).sqrt()  # (N, G)
        adv = adv / (torch.maximum(std, group_std / 2) + eps)
    keep = valid & (count >= 2) & _spread(x, valid)
    return torch.where(keep, adv, torch.zeros_like(adv)).to(rewards.dtype).to(rewards.device)


def reinforce_pp_advantages(
    rewards: Tensor,  # (N, G)
    /,
    *,
    scale_by_std: bool = True,
    ddof: int = 1,
    eps: float = 1e-6,
) -> Tensor:  # (N, G)
    """REINFORCE++-baseline (Hu et al. 2025, arXiv:2501.03262): group-mean baseline, then batch whitening.

    ``a = r - mean_group``; then ``(a - mean_batch(a)) / (std_batch(a) + eps)`` over all finite
    samples of the batch (``scale_by_std=False``: only centered).

    Departure: verl and OpenRLHF whiten over *tokens* (a long completion weighs more); here the
    batch statistics are over *samples*, which is the same when all completions have equal length.

    >>> [round(a, 4) for a in reinforce_pp_advantages(torch.tensor([[1.0, 0.0], [1.0, 1.0]])).flatten().tolist()]
    [1.2247, -1.2247, 0.0, 0.0]
    """
    _check(rewards)
    x = _wide(rewards)
    valid, count, mean, _ = _group_stats(x, ddof)
    keep = valid & (count >= 2)  # a group whose rewards are all equal counts in the whitening with a = 0
    signal = keep & _spread(x, valid)
    a = torch.where(signal, x - mean, torch.zeros_like(x))
    n = keep.sum().to(x.dtype)
    if n < 2:
        return torch.zeros_like(rewards)
    mu = a[keep].mean()  # 0 but for float noise: each group's a sums to 0
    out = a - mu
    if scale_by_std:
        var = ((a[keep] - mu) ** 2).sum() / (n - ddof).clamp(min=1)
        out = out / (var.sqrt() + eps)
    # and gets exactly 0, not -mu/std: the noise pushed a group failing alike up or down
    return torch.where(signal, out, torch.zeros_like(out)).to(rewards.dtype).to(rewards.device)


ADVANTAGES: dict[AdvantageName, AdvantageFn] = {
    "grpo": grpo_advantages,
    "rloo": rloo_advantages,
    "reinforce_pp": reinforce_pp_advantages,
}


def gae(
    rewards: Tensor,  # (B, T) per-token rewards (outcome reward on the last completion token, KL shaping...)
    values: Tensor,  # (B, T) value-head estimates V(s_t)
    mask: Tensor,  # (B, T) 1.0 on completion tokens
    *,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[Tensor, Tensor]:  # advantages (B, T), returns (B, T); both 0 where mask is 0
    """Generalized advantage estimation (Schulman et al. 2016, arXiv:1506.02438), for PPO.

    ``delta_t = r_t + gamma * V_{t+1} - V_t``; ``A_t = delta_t + gamma * lam * A_{t+1}``; returns
    ``A_t + V_t``. Positions where ``mask`` is 0 are skipped (the next *masked-in* token is the
    successor), so padding and tool-output tokens inside a multi-turn completion do not cut the
    recursion (verl ``compute_gae_advantage_return`` multi-turn form). The value after the last
    completion token is 0 (terminal). No whitening: callers do it if they want it.

    >>> a, ret = gae(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 0.5]]), torch.ones(1, 2), gamma=1.0, lam=1.0)
    >>> a.tolist(), ret.tolist()
    ([[0.5, 0.5]], [[1.0, 1.0]])
    """
    if not (rewards.shape == values.shape == mask.shape) or rewards.dim() != 2:
        raise ValueError(
            f"gae needs rewards, values, mask of one (B, T) shape, got {tuple(rewards.shape)}, "
            f"{tuple(values.shape)}, {tuple(mask.shape)}"
        )
    with torch.no_grad():
        m = mask.to(values.dtype)
        next_value = torch.zeros_like(values[:, 0])  # (B,)
        last = torch.zeros_like(values[:, 0])  # (B,)
        adv = torch.zeros_like(values)
        for t in reversed(range(values.shape[1])):
            delta = rewards[:, t] + gamma * next_value - values[:, t]
            cur = delta + gamma * lam * last
            keep = m[:, t] > 0
            last = torch.where(keep, cur, last)
            next_value = torch.where(keep, values[:, t], next_value)
            adv[:, t] = torch.where(keep, cur, torch.zeros_like(cur))
        returns = (adv + values) * m
    return adv, returns
