"""Value-function loss for PPO with a value head.

``0.5 * max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2)`` per token (PPO value clipping,
as in OpenAI baselines / verl ``compute_value_loss``); ``clip=None`` is the plain squared error.
Aggregate with ``aggregate`` like the policy loss.
"""

from __future__ import annotations

import torch
from torch import Tensor


def value_loss(
    values: Tensor,  # (B, T) current value-head outputs, with gradient
    old_values: Tensor,  # (B, T) values at rollout time
    returns: Tensor,  # (B, T) targets (GAE returns)
    mask: Tensor,  # (B, T)
    *,
    clip: float | None = 0.2,
) -> Tensor:  # (B, T) per-token loss, 0 where mask is 0
    """Clipped value loss per token.

    >>> value_loss(torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([[0.0]]), torch.ones(1, 1)).tolist()
    [[0.5]]
    """
    if not (values.shape == old_values.shape == returns.shape == mask.shape):
        raise ValueError("values, old_values, returns, mask must share one (B, T) shape")
    err = (values - returns) ** 2
    if clip is not None:
        clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        err = torch.maximum(err, (clipped - returns) ** 2)
    return torch.where(mask > 0, 0.5 * err, torch.zeros_like(err))
