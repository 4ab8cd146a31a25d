"""The policy-update step shared by the RL trainers: batch and loss spec, the loss, one update.

- ``PolicyBatch`` / ``LossSpec``: frozen inputs of one update (tensors / hyperparameters).
- ``policy_loss(model, batch, spec)``: the scalar loss and metrics of (part of) a batch.
- ``policy_update(model, optimizer, batch, spec, *, micro_batch_size, max_grad_norm)``: forward and
  backward over micro-batches with *global* normalizers (so the gradient does not depend on the
  micro-batch size in any aggregation mode; see ``posttrain.algo.aggregate``), gradient clipping,
  ``optimizer.step()``; returns detached metrics.

The token log-probs come from the log-prob engine (``_logprobs.py``); LoRA is in ``_lora.py``.
Not here: sampling, rewards, advantages, LR schedules, distributed reductions (one process; under
FSDP the caller sums ``count_items`` over ranks first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import get_args

import torch
from torch import Tensor, nn

from posttrain.algo import (
    AGG_MODES,
    KL_KINDS,
    POLICY_LOSSES,
    AggMode,
    KLKind,
    PolicyLossName,
    aggregate,
    count_items,
    kl_penalty,
    loss_stats,
    truncated_is_weights,
)
from posttrain.errors import ConfigError
from posttrain.train._logprobs import token_logprobs_and_entropy

KL_CLAMP = 10.0
"""The per-token KL estimate is clamped to [-KL_CLAMP, KL_CLAMP] (verl's bound; TRL does not clamp: the
two agree wherever |KL| < 10, see ``posttrain.algo.kl``)."""


@dataclass(frozen=True, eq=False)
class PolicyBatch:
    """One RL update batch: right-padded episode rows (prompt, then actions and observations), exactly
    as sampled (``posttrain.train._batch.trajectory_rows``)."""

    input_ids: Tensor  # (B, T) long
    attention_mask: Tensor  # (B, T) long, 1 on real tokens
    loss_mask: Tensor  # (B, T) float, 1.0 on sampled (action) tokens that get gradient; 0 on prompt,
    # observations, padding, and every token of a dropped episode (infra error, masked cut)
    old_logp: Tensor  # (B, T) float, log pi_old of each action token (the sampling logprobs)
    adv: Tensor  # (B,) or (B, T) float advantages
    ref_logp: Tensor | None = None  # (B, T) float, reference-policy logprobs, needed when kl_coef > 0
    sampling_logp: Tensor | None = None
    """(B, T) generation-engine logprobs when ``old_logp`` was recomputed by the trainer (stale or
    mismatched generation); with ``LossSpec.tis_cap`` the loss is weighted by truncated IS weights."""
    group: Tensor | None = None
    """(B,) long: rows with one value share their prompt (a GRPO group, carried from
    ``Trajectory.group_id``); their prompt is then computed once. None = every row alone."""
    temperature: Tensor | None = None
    """(B,) float: the temperature each row was sampled at, which its tokens are scored at (rows of
    one batch sampled at different temperatures: ``rl.adaptive_temperature``). None = every row at
    ``LossSpec.temperature``."""

    def __post_init__(self) -> None:
        shape = tuple(self.input_ids.shape)
        named = {
            "attention_mask": self.attention_mask,
            "loss_mask": self.loss_mask,
            "old_logp": self.old_logp,
        }
        if self.ref_logp is not None:
            named["ref_logp"] = self.ref_logp
        if self.sampling_logp is not None:
            named["sampling_logp"] = self.sampling_logp
        for name, t in named.items():
            if tuple(t.shape) != shape:
                raise ValueError(
                    f"PolicyBatch.{name} has shape {tuple(t.shape)}, expected {shape} like input_ids"
                )
        for name, t in (("group", self.group), ("temperature", self.temperature)):
            if t is not None and tuple(t.shape) != shape[:1]:
                raise ValueError(f"PolicyBatch.{name} has shape {tuple(t.shape)}, expected ({shape[0]},)")
        if self.temperature is not None and not bool((self.temperature > 0).all()):
            raise ValueError("PolicyBatch.temperature: every row's temperature must be > 0")
        if tuple(self.adv.shape) not in ((shape[0],), shape):
            raise ValueError(
                f"PolicyBatch.adv has shape {tuple(self.adv.shape)}, expected ({shape[0]},) or {shape}"
            )
        if not torch.isfinite(self.adv).all():
            raise ValueError(
                "PolicyBatch.adv holds NaN/inf: give infra-error samples advantage 0 and loss_mask 0"
            )


@dataclass(frozen=True)
class LossSpec:
    """Hyperparameters of the policy loss (names checked here, at construction)."""

    policy_loss: PolicyLossName = "ppo_clip"
    """Per-token loss from ``posttrain.algo.POLICY_LOSSES``."""
    clip_low: float = 0.2
    """Ratio clip below 1 (PPO epsilon)."""
    clip_high: float = 0.2
    """Ratio clip above 1 (DAPO clip-higher uses 0.28)."""
    agg: AggMode = "token_mean"
    """Aggregation mode, see ``posttrain.algo.aggregate``."""
    norm_const: float | None = None
    """Constant of ``seq_mean_token_sum_norm`` (Dr.GRPO: the max completion length)."""
    kl_coef: float = 0.0
    """Weight of the per-token KL to the reference policy added to the loss (0 = no reference)."""
    kl_kind: KLKind = "k3"
    """KL estimator: k1, k2 or k3 (clamped at +-``KL_CLAMP``)."""
    temperature: float = 1.0
    """Sampling temperature: log-probs are computed from logits / temperature, like the sampler's
    (a batch's own per-row ``PolicyBatch.temperature`` takes its place)."""
    tis_cap: float | None = None
    """Truncated importance-weight cap against ``PolicyBatch.sampling_logp``; None = off."""

    def __post_init__(self) -> None:
        checks = (
            ("policy_loss", self.policy_loss, get_args(PolicyLossName)),
            ("agg", self.agg, AGG_MODES),
            ("kl_kind", self.kl_kind, KL_KINDS),
        )
        for name, value, allowed in checks:
            if value not in allowed:
                raise ConfigError(f"loss.{name}: unknown value {value!r}; expected one of {list(allowed)}")
        if self.agg == "seq_mean_token_sum_norm" and (self.norm_const is None or self.norm_const <= 0):
            raise ConfigError(
                f"loss.norm_const: agg={self.agg} needs a positive constant, got {self.norm_const}"
            )
        if self.policy_loss == "gspo" and self.agg != "seq_mean_token_mean":
            raise ConfigError(f"loss.agg: gspo is defined with agg=seq_mean_token_mean, got {self.agg}")
        if self.clip_low < 0 or self.clip_high < 0 or self.kl_coef < 0 or self.temperature <= 0:
            raise ConfigError("loss: clip_low, clip_high, kl_coef must be >= 0 and temperature > 0")


def policy_loss(
    model: nn.Module,
    batch: PolicyBatch,
    spec: LossSpec,
    *,
    rows: slice | Tensor | None = None,  # a slice or a (b,) index tensor of rows
    num_items: float | None = None,
) -> tuple[Tensor, dict[str, float]]:  # scalar loss with gradient, detached metrics
    """The loss of ``batch[rows]`` (default: all rows) as ``spec`` defines it, with its metrics.

    ``num_items`` is the global normalizer (``count_items`` of the whole accumulated batch for
    ``spec.agg``); default: these rows' own count. ``policy_update`` calls this once per micro-batch.
    """
    sl = rows if rows is not None else slice(0, batch.input_ids.shape[0])
    mask = batch.loss_mask[sl]
    n_items = count_items(mask, spec.agg) if num_items is None else num_items
    real = batch.attention_mask[sl] > 0
    col = torch.arange(1, real.shape[1] + 1, device=real.device)
    width = int((real * col).max())  # drop trailing all-pad columns
    cols = slice(0, max(width, 1))
    mask = mask[:, cols]
    logp, ent = token_logprobs_and_entropy(
        model,
        batch.input_ids[sl, cols],
        batch.attention_mask[sl, cols],
        loss_mask=mask,
        temperature=row_temperature(batch, spec.temperature, sl),
        groups=None if batch.group is None else batch.group[sl],
    )
    old_logp = batch.old_logp[sl, cols]
    adv = batch.adv[sl] if batch.adv.dim() == 1 else batch.adv[sl, cols]
    loss_mat = POLICY_LOSSES[spec.policy_loss](logp, old_logp, adv, mask, clip_low=spec.clip_low, clip_high=spec.clip_high)
    if spec.tis_cap is not None and batch.sampling_logp is not None:
        loss_mat = loss_mat * truncated_is_weights(
            old_logp, batch.sampling_logp[sl, cols], mask, cap=spec.tis_cap
        )
    kl = None
    if spec.kl_coef > 0.0:
        if batch.ref_logp is None:
            raise ValueError("LossSpec.kl_coef > 0 needs PolicyBatch.ref_logp")
        kl = kl_penalty(logp, batch.ref_logp[sl, cols], spec.kl_kind, clamp=KL_CLAMP)
        loss_mat = loss_mat + spec.kl_coef * torch.where(mask > 0, kl, torch.zeros_like(kl))
    loss = aggregate(loss_mat, mask, spec.agg, norm_const=spec.norm_const, num_items=n_items)
    stats = loss_stats(
        logp, old_logp, mask, adv=adv, clip_low=spec.clip_low, clip_high=spec.clip_high, entropy=ent
    )
    if kl is not None:
        kl_sum = float(torch.where(mask > 0, kl.detach(), torch.zeros_like(kl)).sum())
        stats["kl"] = kl_sum / max(float(mask.sum()), 1.0)
    return loss, stats


def row_temperature(batch: PolicyBatch, temperature: float, rows: slice | Tensor | None = None) -> float | Tensor:
    """What ``batch[rows]`` is scored at: its rows' own sampling temperatures (``PolicyBatch.temperature``,
    (b,)), or ``temperature`` for all when the batch carries none. The loss, the stale-batch
    correction and the reference's logprobs all take it from here, so a row is scored alike in each."""
    if batch.temperature is None:
        return temperature
    return batch.temperature if rows is None else batch.temperature[rows]


def _row_order(batch: PolicyBatch) -> Tensor:  # (B,) row indices
    """Rows of one group together (so a micro-batch can share the prompt; the groups are the
    carried ``batch.group``, rows with nothing to score form one more), groups by length (so
    trimming trailing padding saves the most)."""
    real = batch.attention_mask > 0
    row_len = (real * torch.arange(1, real.shape[1] + 1, device=real.device)).amax(-1).tolist()
    scored = (batch.loss_mask > 0).any(-1).tolist()
    carried = batch.group.tolist() if batch.group is not None else range(len(row_len))
    group: dict[tuple[int, ...], int] = {}
    gid = [group.setdefault((g,) if s else (), len(group)) for g, s in zip(carried, scored, strict=True)]
    glen = [0] * len(group)
    for i, g in enumerate(gid):
        glen[g] = max(glen[g], row_len[i])
    order = sorted(range(len(gid)), key=lambda i: (glen[gid[i]], gid[i], row_len[i]))
    return torch.tensor(order, dtype=torch.long, device=batch.input_ids.device)


def _moving_rows(batch: PolicyBatch) -> Tensor:  # (B,) bool
    """Rows with a nonzero advantage on some scored token (the others' policy gradient is exactly 0)."""
    scored = batch.loss_mask > 0
    if batch.adv.dim() == 1:
        return (batch.adv != 0) & scored.any(-1)
    return ((batch.adv != 0) & scored).any(-1)


def policy_update(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: PolicyBatch,
    spec: LossSpec,
    *,
    micro_batch_size: int,
    max_grad_norm: float,
    skip_zero_advantage: bool = False,
) -> dict[str, float]:
    """One optimizer step on ``batch``: accumulate gradients over micro-batches, clip, step.

    Every micro-batch is normalized by the count of the *whole* batch (tokens or sequences,
    ``count_items``), so the accumulated gradient equals the full-batch gradient whatever
    ``micro_batch_size`` is. Returns ``loss`` (the full-batch loss), token-weighted ``clip_frac``,
    ``approx_kl``, ``entropy``, ``kl`` (when kl_coef > 0), ``grad_norm`` (before clipping) and
    ``tokens``. A batch with no active token, or a non-finite gradient norm, skips the optimizer
    step and says so (``skipped`` = 1). Micro-batches keep the rows of one group together
    (``batch.group``; their prompt is computed once, see ``token_logprobs_and_entropy``) and group rows of similar length
    (fewer padded columns); this changes only the floating-point summation order.

    ``skip_zero_advantage`` (with ``spec.kl_coef`` 0): rows whose advantage is 0 on every scored token
    are not computed (``zero_advantage_rows``). Every policy loss is its advantage times a function of
    the ratio, so such a row's loss and gradient are exactly 0; the normalizers still count its tokens,
    so the update is the same up to summation order (tests/train/test_step.py) and TRL's and verl's
    compute them anyway (a group whose rewards are all equal). The token-weighted metrics are then the
    computed rows'. A batch of such rows alone still steps the optimizer on its zero gradient (AdamW's
    moments move): one of its rows is computed for that.
    """
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    model.train()
    n_tok = float(batch.loss_mask.sum())
    n_items = count_items(batch.loss_mask, spec.agg)
    optimizer.zero_grad(set_to_none=True)
    totals: dict[str, float] = {}
    loss_sum = 0.0
    ratio_max = 0.0
    order = _row_order(batch)
    zero_rows = 0
    if skip_zero_advantage and spec.kl_coef == 0.0:
        moving = _moving_rows(batch)[order]
        scored = (batch.loss_mask[order] > 0).any(-1)
        zero_rows = int((scored & ~moving).sum())
        order = order[moving] if bool(moving.any()) else order[scored][:1]
    n_rows = len(order)
    n_done = 0.0
    for start in range(0, n_rows, micro_batch_size):
        sl = order[start : start + micro_batch_size]
        w = float(batch.loss_mask[sl].sum())
        if w == 0.0:
            continue  # contributes nothing to the loss nor to any normalizer
        loss, stats = policy_loss(model, batch, spec, rows=sl, num_items=n_items)
        loss.backward()
        loss_sum += float(loss.detach())
        ratio_max = max(ratio_max, stats.pop("ratio_max"))
        n_done += w
        for k, v in stats.items():
            totals[k] = totals.get(k, 0.0) + v * w  # token-weighted means
    params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    out = {k: v / n_done for k, v in totals.items()} if n_done else {}
    if skip_zero_advantage:
        out["zero_advantage_rows"] = float(zero_rows)
    if not params or n_tok == 0.0:
        optimizer.zero_grad(set_to_none=True)
        return {**out, "loss": 0.0, "grad_norm": 0.0, "tokens": n_tok, "skipped": 1.0}
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
    if math.isfinite(grad_norm):
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {
        **out,
        "loss": loss_sum,
        "ratio_max": ratio_max,
        "grad_norm": grad_norm,
        "tokens": n_tok,
        "skipped": 0.0 if math.isfinite(grad_norm) else 1.0,
    }
