"""Sample filtering used by GRPO variants: dynamic sampling.

(DAPO's soft overlong penalty is a reward component: ``posttrain.verify.rewards.length_penalty``.)

- Dynamic sampling (DAPO, Yu et al. 2025, arXiv:2503.14476): groups whose finite rewards all agree
  carry no signal under group-relative advantages. ``informative_groups`` says which groups to keep;
  *refilling* the batch with new groups is the trainer's job (it samples more tasks), not this
  module's.

Not here, by design: truncation masking (TRL ``mask_truncated_completions``, AReaL
``mask_no_eos_with_zero``, DAPO's overlong filtering). A completion cut at the length limit that gets
no gradient escapes the negative advantage of the failure it is, so a failing policy would learn to
run long (docs/contracts.md, "Reward accounting"); DAPO's soft overlong penalty
(``reward.length``) is the way to discourage length.
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
