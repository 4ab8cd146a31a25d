"""Detached metrics of a policy update: clip fraction, approximate KL, ratio, entropy.

Kept apart from the loss (Spinning Up ``pi_info``, CleanRL ``approx_kl``) so that logging never
changes the graph. Every value is a Python float computed under ``no_grad``.

Not here: reward statistics (the trainer logs them from verdicts).
"""

from __future__ import annotations

import torch
from torch import Tensor


def entropy_from_logits(logits: Tensor) -> Tensor:  # (..., V) -> (...)
    """Entropy of the softmax distribution over the last dim: ``logsumexp(z) - sum(p z)``.

    >>> round(float(entropy_from_logits(torch.zeros(4))), 6)  # uniform over 4: log 4
    1.386294
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def _masked_mean(x: Tensor, m: Tensor) -> float:
    n = float(m.sum())
    return float((torch.where(m > 0, x, torch.zeros_like(x))).sum()) / n if n > 0 else 0.0


def loss_stats(
    logp: Tensor,  # (B, T) current log-probs
    old_logp: Tensor,  # (B, T)
    mask: Tensor,  # (B, T)
    *,
    adv: Tensor | None = None,  # (B,), (B, 1) or (B, T): counts only clipping that removes gradient
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    logits: Tensor | None = None,  # (B, T, V) to compute the entropy
    entropy: Tensor | None = None,  # (B, T) precomputed per-token entropy
) -> dict[str, float]:
    """Token-mean metrics over ``mask``: ``clip_frac``, ``clip_frac_low``, ``clip_frac_high``,
    ``approx_kl`` (k3 of old vs new, CleanRL), ``ratio_mean``, ``ratio_max`` and ``entropy`` when
    ``logits`` or ``entropy`` is given.

    With ``adv``, a token counts as clipped only where the clip is active (ratio above 1+clip_high
    with A > 0, below 1-clip_low with A < 0), as TRL's ``clip_ratio/region_mean``.

    >>> s = loss_stats(torch.log(torch.tensor([[1.5, 1.0]])), torch.zeros(1, 2), torch.ones(1, 2))
    >>> s["clip_frac"], round(s["ratio_max"], 3)
    (0.5, 1.5)
    """
    with torch.no_grad():
        m = mask.to(torch.float32)
        log_ratio = torch.where(m > 0, (logp - old_logp).float(), torch.zeros_like(m))
        ratio = torch.exp(log_ratio)
        low = ratio < 1.0 - clip_low
        high = ratio > 1.0 + clip_high
        if adv is not None:
            a = adv.unsqueeze(-1) if adv.dim() == 1 else adv
            low = low & (a < 0)
            high = high & (a > 0)
        out = {
            "clip_frac": _masked_mean((low | high).float(), m),
            "clip_frac_low": _masked_mean(low.float(), m),
            "clip_frac_high": _masked_mean(high.float(), m),
            "approx_kl": _masked_mean((ratio - 1.0) - log_ratio, m),
            "ratio_mean": _masked_mean(ratio, m),
            "ratio_max": float(torch.where(m > 0, ratio, torch.zeros_like(ratio)).max())
            if m.sum() > 0
            else 0.0,
        }
        if entropy is None and logits is not None:
            entropy = entropy_from_logits(logits)
        if entropy is not None:
            out["entropy"] = _masked_mean(entropy.float(), m)
        return out
