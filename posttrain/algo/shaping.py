"""Reward shaping and sample filtering used by GRPO variants: dynamic sampling, overlong penalty,
masking of truncated completions.

- Dynamic sampling (DAPO, Yu et al. 2025, arXiv:2503.14476): groups whose finite rewards all agree
  carry no signal under group-relative advantages. ``informative_groups`` says which groups to keep;
  *refilling* the batch with new groups is the trainer's job (it samples more tasks), not this
  module's.
- Overlong penalty (DAPO "soft overlong punishment", verl ``reward_manager/dapo.py``).
- Truncation masking (TRL ``mask_truncated_completions``, AReaL ``mask_no_eos_with_zero``): a
  completion cut by the length limit gets no gradient at all.
"""

from __future__ import annotations

import torch
from torch import Tensor


def informative_groups(rewards: Tensor) -> Tensor:  # (N, G) -> (N,) bool
    """True for groups with >= 2 finite rewards that are not all equal (NaN = infra error, ignored).

    >>> informative_groups(torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, float("nan")]])).tolist()
    [False, True, False]
    """
    valid = torch.isfinite(rewards)
    hi = torch.where(valid, rewards, torch.full_like(rewards, -torch.inf)).amax(-1)
    lo = torch.where(valid, rewards, torch.full_like(rewards, torch.inf)).amin(-1)
    return (valid.sum(-1) >= 2) & (hi > lo)


def frac_zero_std(rewards: Tensor) -> float:
    """Fraction of groups with no signal (log it as ``reward/frac_zero_std``; warn when ~1)."""
    return 1.0 - float(informative_groups(rewards).float().mean()) if rewards.shape[0] else 0.0


def overlong_penalty(
    lengths: Tensor,  # (B,) completion lengths in tokens
    *,
    max_len: int,
    buffer_len: int,
    factor: float = 1.0,
) -> Tensor:  # (B,) penalty <= 0, to add to the reward
    """DAPO soft overlong punishment: ``min(-(len - (max_len - buffer_len)) / buffer_len * factor, 0)``.

    0 up to ``max_len - buffer_len`` tokens, then linear down to ``-factor`` at ``max_len``.

    >>> overlong_penalty(torch.tensor([10, 14, 16]), max_len=16, buffer_len=4).tolist()
    [0.0, -0.5, -1.0]
    """
    if not 0 < buffer_len <= max_len:
        raise ValueError(f"need 0 < buffer_len <= max_len, got buffer_len={buffer_len}, max_len={max_len}")
    expected = max_len - buffer_len
    exceed = lengths.to(torch.float32) - expected
    return torch.clamp(-exceed / buffer_len * factor, max=0.0)


def mask_truncated(
    mask: Tensor,  # (B, T) loss mask
    truncated: Tensor,  # (B,) bool, True where finish_reason == "length"
) -> Tensor:  # (B, T) mask with truncated rows zeroed
    """Zero the loss mask of completions that hit the length limit.

    >>> mask_truncated(torch.ones(2, 2), torch.tensor([True, False])).tolist()
    [[0.0, 0.0], [1.0, 1.0]]
    """
    return mask * (~truncated.bool()).to(mask.dtype).unsqueeze(-1)
