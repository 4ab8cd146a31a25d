"""Loss aggregation: how a (B, T) per-token loss becomes one scalar.

The largest source of silent differences between frameworks (reference/algorithms.md 5.3). Four
modes, named after verl's ``agg_loss``:

- ``token_mean``: ``sum(L m) / N_tokens``. DAPO (Yu et al. 2025, arXiv:2503.14476, "token-level
  policy gradient loss"); verl/OpenRLHF default; TRL ``loss_type="dapo"`` (and ``"bnpo"`` with a
  local normalizer).
- ``seq_mean_token_mean``: mean over sequences of each sequence's token mean. The original GRPO
  objective (Shao et al. 2024, arXiv:2402.03300, eq. 3); TRL ``loss_type="grpo"``; required by GSPO.
  Its length bias (Dr.GRPO's point): each token of a sequence is pushed by ``A / |o|``, so a failure
  that runs long is pushed down less per token. In one batch [pass, wrong in 5 tokens, wrong in 50
  cut at max_new_tokens] the 50-token failure's tokens get 1/10 of the 5-token one's push (ppo_clip,
  cispo, gspo alike), where every other mode gives both the same. With ``reward.length`` (1, max_tokens
  60, buffer 40: -0.75 for the 50 tokens) its advantage is -0.95 against the short one's -0.09 and its
  per-token push the same again: in this mode the length penalty is what keeps a failure from paying
  for running long. ``token_mean`` (the recipe's default) has no such bias
  (tests/algo/test_escape_attacks.py).
- ``seq_mean_token_sum``: mean over sequences of each sequence's token sum (no length
  normalization; verl ``seq-mean-token-sum``).
- ``seq_mean_token_sum_norm``: ``sum(L m) / (N_seqs * norm_const)`` with a *fixed* constant (e.g.
  the max completion length). Dr.GRPO (Liu et al. 2025, arXiv:2503.20783, "GRPO done right"), which
  removes the length bias of the per-sequence mean; TRL ``loss_type="dr_grpo"``.

Micro-batching and gradient accumulation: pass ``num_items``, the count over the *whole* batch
being accumulated (tokens for ``token_mean``, non-empty sequences for the ``seq_*`` modes;
``count_items`` computes it). Each micro-batch then returns its share of the global loss and the
sum of the micro-batch losses (and gradients) equals the loss of the full batch, in every mode.
Without ``num_items`` the normalizer is the local count, which is *not* invariant for
``token_mean`` (TRL ``bnpo``, SkyRL ``token_mean_legacy``).

Not here: the per-token losses themselves (losses.py), distributed reductions (the trainer sums
``count_items`` across ranks before calling this).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

AggMode = Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"]
AGG_MODES: tuple[AggMode, ...] = get_args(AggMode)


def count_items(mask: Tensor, mode: AggMode) -> float:
    """The normalizer count of ``mode`` for this mask: active tokens, or sequences with >= 1 active token.

    >>> m = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    >>> count_items(m, "token_mean"), count_items(m, "seq_mean_token_mean")
    (2.0, 1.0)
    """
    if mode not in AGG_MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; expected one of {AGG_MODES}")
    if mode == "token_mean":
        return float(mask.sum())
    return float((mask.sum(-1) > 0).sum())


def aggregate(
    loss_mat: Tensor,  # (B, T) per-token loss, 0 where mask is 0
    mask: Tensor,  # (B, T) 1.0 where the token counts
    mode: AggMode,
    *,
    norm_const: float | None = None,
    num_items: float | None = None,
) -> Tensor:  # () scalar
    """Aggregate a per-token loss; see the module docstring for the modes and their papers.

    ``num_items`` is the global count (tokens or sequences, see ``count_items``); default: this
    batch's own count. ``norm_const`` is required by ``seq_mean_token_sum_norm`` and ignored by
    the other modes.

    >>> L = torch.tensor([[1.0, 2.0, 0.0, 0.0], [3.0, 4.0, 5.0, 6.0]])
    >>> m = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    >>> [round(float(aggregate(L, m, k, norm_const=8)), 4) for k in AGG_MODES]
    [3.5, 3.0, 10.5, 1.3125]
    """
    if loss_mat.shape != mask.shape or loss_mat.dim() != 2:
        raise ValueError(
            f"loss_mat and mask must share one (B, T) shape, got {tuple(loss_mat.shape)}, {tuple(mask.shape)}"
        )
    if mode not in AGG_MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; expected one of {AGG_MODES}")
    if mode == "seq_mean_token_sum_norm" and norm_const is None:
        raise ValueError(
            "seq_mean_token_sum_norm needs norm_const (e.g. the max completion length), got None"
        )
    if norm_const is not None and norm_const <= 0:
        raise ValueError(f"norm_const must be > 0, got {norm_const}")
    m = mask.to(loss_mat.dtype)
    n = count_items(mask, mode) if num_items is None else float(num_items)
    n = max(n, 1.0)  # an all-masked batch gives a (differentiable) 0, not NaN
    masked = torch.where(m > 0, loss_mat, torch.zeros_like(loss_mat))
    if mode == "token_mean":
        return masked.sum() / n
    if mode == "seq_mean_token_mean":
        per_seq = masked.sum(-1) / m.sum(-1).clamp(min=1)  # (B,)
        return per_seq.sum() / n
    if mode == "seq_mean_token_sum":
        return masked.sum() / n
    return masked.sum() / (n * float(norm_const))  # seq_mean_token_sum_norm
