"""The policy-update step shared by the RL trainers: token log-probs, batch and loss spec, one update.

- ``token_logprobs(model, input_ids, attention_mask)``: ``log p(input_ids[t] | input_ids[<t])`` for
  every position, computed from the backbone's hidden states and the LM head on *only* the
  positions that are needed, in chunks, so the (B, T, V) logits tensor never exists.
- ``packed_token_logprobs(model, packed)``: the same for rows packed by ``pack_sequences``.
- ``PolicyBatch`` / ``LossSpec``: frozen inputs of one update (tensors / hyperparameters).
- ``policy_loss(model, batch, spec)``: the scalar loss and metrics of (part of) a batch.
- ``policy_update(model, optimizer, batch, spec, *, micro_batch_size, max_grad_norm)``: forward and
  backward over micro-batches with *global* normalizers (so the gradient does not depend on the
  micro-batch size in any aggregation mode; see ``posttrain.algo.aggregate``), gradient clipping,
  ``optimizer.step()``; returns detached metrics.

- ``LoraSpec`` / ``apply_lora``: peft LoRA as an option of every trainer.

Rows are right-padded (``posttrain.train._batch.collate``); position ids are computed from the
attention mask (the count of real tokens before each one), as ``generate`` does. Not here:
sampling, rewards, advantages, LR schedules, distributed reductions (one process; under FSDP the
caller sums ``count_items`` over ranks first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, get_args

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from posttrain.algo import (
    AGG_MODES,
    KL_KINDS,
    POLICY_LOSSES,
    AggMode,
    KLKind,
    PackedBatch,
    PolicyLossName,
    aggregate,
    block_causal_mask,
    count_items,
    kl_penalty,
    loss_stats,
    truncated_is_weights,
)
from posttrain.config import PositiveFloat, PositiveInt, Range
from posttrain.errors import ConfigError

LOGITS_CHUNK_BYTES = 256 * 2**20
"""Upper bound on the fp32 logits materialized at once by ``token_logprobs`` (per chunk)."""

_UNSUPPORTED_HEAD_SCALING = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier")


def _backbone(model: nn.Module) -> nn.Module | None:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft wrapper
    prefix = getattr(base, "base_model_prefix", None)
    body = getattr(base, prefix, None) if prefix else None
    config = getattr(base, "config", None)
    text_config = (
        config.get_text_config() if config is not None and hasattr(config, "get_text_config") else config
    )
    if body is None or any(
        getattr(text_config, k, None) not in (None, 1.0) for k in _UNSUPPORTED_HEAD_SCALING
    ):
        return None  # unknown layout or a head with extra scaling: use the model's own forward
    return body


class _LogProbHead(torch.autograd.Function):
    """Fused LM head + log-softmax + gather (+ entropy, no gradient) for K scored positions.

    Saves the softmax p (K, V) instead of the logits and writes the backward by hand:
    ``d logp / d logits = (onehot(target) - p) / temperature``. Same math as autograd through
    ``logsumexp`` and ``gather``, without the zero-filled (K, V) gather gradient and the second exp.
    """

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, temperature: float):
        # hidden (K, H), weight (V, H), target (K,) -> logp (K,), entropy (K,)
        logits = nn.functional.linear(hidden, weight, bias)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16 -> fp32, fp64 stays
        if temperature != 1.0:
            logits = logits / temperature
        top = logits.amax(-1, keepdim=True)
        p = (logits - top).exp_()
        z = p.sum(-1, keepdim=True)
        p.div_(z)
        lse = (top + z.log()).squeeze(-1)
        logp = logits.gather(-1, target.unsqueeze(-1)).squeeze(-1) - lse
        ent = lse - (p * logits).sum(-1)
        ctx.save_for_backward(hidden, weight, p, target)
        ctx.has_bias = bias is not None
        ctx.temperature = temperature
        ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp: Tensor, g_ent: Tensor):
        hidden, weight, p, target = ctx.saved_tensors
        g = g_logp.unsqueeze(-1)  # (K, 1)
        d = p * -g  # (K, V): d loss / d logits = g * (onehot - p)
        d.scatter_add_(-1, target.unsqueeze(-1), g)
        if ctx.temperature != 1.0:
            d = d / ctx.temperature
        d = d.to(weight.dtype)
        grad_hidden = d @ weight if ctx.needs_input_grad[0] else None
        grad_weight = d.t() @ hidden if ctx.needs_input_grad[1] else None
        grad_bias = d.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_hidden, grad_weight, grad_bias, None, None


def _chunk_logprobs(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    target: Tensor,
    temperature: float,
    entropy_grad: bool,
) -> tuple[Tensor, Tensor]:
    # hidden (K, H), target (K,) -> logp (K,), entropy (K,)
    if not (entropy_grad and torch.is_grad_enabled()):
        return _LogProbHead.apply(hidden, weight, bias, target, temperature)
    logits = nn.functional.linear(hidden, weight, bias)  # entropy bonus: plain autograd
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    if temperature != 1.0:
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, target.unsqueeze(-1)).squeeze(-1) - lse
    ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return logp, ent


def _head_logprobs(
    hidden: Tensor,  # (K, H) hidden states that predict the targets (or (K, V) logits when weight is None)
    weight: Tensor | None,  # (V, H) LM head
    bias: Tensor | None,
    target: Tensor,  # (K,)
    temperature: float,
    entropy_grad: bool,
) -> tuple[Tensor, Tensor]:  # logp (K,), entropy (K,)
    k = target.shape[0]
    vocab = weight.shape[0] if weight is not None else hidden.shape[-1]
    step = max(1, LOGITS_CHUNK_BYTES // (4 * vocab))
    parts_lp, parts_ent = [], []
    for s in range(0, max(k, 1), step):
        h, t = hidden[s : s + step], target[s : s + step]
        if weight is None:
            lg = h.to(torch.promote_types(h.dtype, torch.float32)) / temperature
            lse = torch.logsumexp(lg, -1)
            lp, ent = lg.gather(-1, t.unsqueeze(-1)).squeeze(-1) - lse, lse - (lg.softmax(-1) * lg).sum(-1)
        elif k > step and torch.is_grad_enabled():  # recompute each chunk's logits in backward
            lp, ent = checkpoint(
                _chunk_logprobs, h, weight, bias, t, temperature, entropy_grad, use_reentrant=False
            )
        else:
            lp, ent = _chunk_logprobs(h, weight, bias, t, temperature, entropy_grad)
        parts_lp.append(lp)
        parts_ent.append(ent)
    return torch.cat(parts_lp), torch.cat(parts_ent)


def _forward_hidden(
    model: nn.Module, input_ids: Tensor, model_mask: Tensor, positions: Tensor
) -> tuple[Tensor, Tensor | None, Tensor | None]:  # hidden (B, T, H) or logits (B, T, V); head weight, bias
    body = _backbone(model)
    head = model.get_output_embeddings()
    if body is not None and isinstance(head, nn.Linear):
        out = body(input_ids=input_ids, attention_mask=model_mask, position_ids=positions, use_cache=False)
        return out.last_hidden_state, head.weight, head.bias
    # full logits (B, T, V): only for models whose head we do not reproduce exactly
    out = model(input_ids=input_ids, attention_mask=model_mask, position_ids=positions, use_cache=False)
    return out.logits, None, None


def _scored_logprobs(
    model: nn.Module,
    input_ids: Tensor,  # (B, T) long
    model_mask: Tensor,  # (B, T) padding mask, or (B, 1, T, T) bool attention mask (packed rows)
    positions: Tensor,  # (B, T) long position ids
    sel: Tensor,  # (B, T-1) bool: score token t+1 from hidden state t
    temperature: float,
    entropy_grad: bool,
) -> tuple[Tensor, Tensor]:  # logp (B, T), entropy (B, T); 0 where not scored
    hidden, weight, bias = _forward_hidden(model, input_ids, model_mask, positions)
    lp, ent = _head_logprobs(
        hidden[:, :-1][sel], weight, bias, input_ids[:, 1:][sel], temperature, entropy_grad
    )
    zeros = lp.new_zeros(input_ids.shape[0], input_ids.shape[1] - 1)
    logp = torch.cat([zeros[:, :1], zeros.masked_scatter(sel, lp)], dim=1)
    ent = torch.cat([zeros[:, :1], zeros.masked_scatter(sel, ent)], dim=1)
    return logp, (ent if entropy_grad else ent.detach())


SHARED_ROW_MAX_TOKENS = 2048
"""Longest packed row ``[prompt, c_1, ..., c_k]`` of the shared-prefix path (its attention mask is dense)."""


def _shared_groups(
    input_ids: Tensor, attention_mask: Tensor, loss_mask: Tensor, groups: Tensor
) -> list[tuple[int, list[int]]] | None:
    """The carried groups (``groups[i]``: row i's group, e.g. a GRPO group from
    ``Trajectory.group_id``) as [(prefix_len, rows)]: rows of a group share the tokens before
    their first scored one (the prompt), each packed row at most SHARED_ROW_MAX_TOKENS long. None
    when sharing would not save >= 20% of the padded tokens, or does not apply (a row that is not
    right-padded). Groups are never guessed from tokens; a carried group whose rows do not all
    start with the same prompt (an environment that renders each episode's start its own way) is
    not shared: each of its rows is scored alone (same values either way)."""
    real = attention_mask > 0
    n = real.sum(-1)  # (B,)
    if not bool((real == (torch.arange(real.shape[1], device=real.device) < n[:, None])).all()):
        return None  # left padding or holes: keep the plain path
    scored = loss_mask > 0
    has = scored.any(-1)
    first = scored.float().argmax(-1).tolist()
    last = (scored * torch.arange(1, scored.shape[1] + 1, device=scored.device)).amax(-1).tolist()
    by_group: dict[int, list[int]] = {}  # in order of first appearance
    for i, (g, p, ok) in enumerate(zip(groups.tolist(), first, has.tolist(), strict=True)):
        if ok and p >= 1:
            by_group.setdefault(g, []).append(i)
    ids = input_ids.tolist()
    out: list[tuple[int, list[int]]] = []
    widths: list[int] = []
    split = []
    for rows in by_group.values():
        p = min(first[i] for i in rows)
        same = all(ids[i][:p] == ids[rows[0]][:p] for i in rows)
        split += [(p, rows)] if same else [(first[i], [i]) for i in rows]
    for p, rows in split:
        chunk, width = [], p
        for i in rows:
            length = last[i] - p
            if chunk and width + length > SHARED_ROW_MAX_TOKENS:
                out.append((p, chunk))
                widths.append(width)
                chunk, width = [], p
            chunk.append(i)
            width += length
        out.append((p, chunk))
        widths.append(width)
    plain_cost = int(has.sum()) * max(last[i] for i in range(len(last)) if has[i]) if bool(has.any()) else 0
    shared_cost = len(out) * max(widths, default=0)
    if not any(len(rows) > 1 for _, rows in out):
        return None
    return out if shared_cost <= 0.8 * plain_cost else None


def _shared_prefix_logprobs(
    model: nn.Module,
    input_ids: Tensor,  # (B, T) right-padded
    loss_mask: Tensor,  # (B, T)
    groups: list[tuple[int, list[int]]],
    temperature: float,
    entropy_grad: bool,
) -> tuple[Tensor, Tensor]:  # logp (B, T), entropy (B, T); 0 where not scored
    """Score G completions of one prompt in one row ``[prompt, c_1, ..., c_G]``: c_i attends to the
    prompt and to itself, with positions continuing after the prompt. The prompt is computed once
    per group instead of G times; every scored log-prob (and its gradient) is the one the plain
    path computes, because each completion sees exactly its own context."""
    dev = input_ids.device
    ids = input_ids.tolist()
    scored = (loss_mask > 0).tolist()
    # keep each row's tokens up to its last scored one (later tokens influence nothing scored)
    last = [max((t for t, m in enumerate(row) if m), default=-1) + 1 for row in scored]
    width = max(p + sum(last[i] - p for i in rows) for p, rows in groups)
    n_rows = len(groups)
    packed_ids = [[0] * width for _ in range(n_rows)]
    positions = [[0] * width for _ in range(n_rows)]
    seg_ids = [[-1] * width for _ in range(n_rows)]
    src_flat: list[int] = []
    tgt_row: list[int] = []
    tgt_col: list[int] = []
    for g, (p, rows) in enumerate(groups):
        packed_ids[g][:p], positions[g][:p], seg_ids[g][:p] = ids[rows[0]][:p], range(p), [0] * p
        offset = p
        for k, i in enumerate(rows):
            end = last[i]
            n = end - p
            packed_ids[g][offset : offset + n] = ids[i][p:end]
            positions[g][offset : offset + n] = range(p, end)
            seg_ids[g][offset : offset + n] = [k + 1] * n
            for t in range(1, end):
                if scored[i][t]:  # the hidden state at t-1 predicts token t
                    src = t - 1
                    src_flat.append(g * width + (src if src < p else offset + src - p))
                    tgt_row.append(i)
                    tgt_col.append(t)
            offset += n
    packed_ids = torch.tensor(packed_ids, dtype=torch.long, device=dev)
    positions = torch.tensor(positions, dtype=torch.long, device=dev)
    seg_ids = torch.tensor(seg_ids, dtype=torch.long, device=dev)
    causal = torch.ones(width, width, dtype=torch.bool, device=dev).tril()
    a, b = seg_ids.unsqueeze(-1), seg_ids.unsqueeze(-2)  # query, key segment
    allowed = causal & (b >= 0) & (a >= 0) & ((b == 0) | (b == a))
    allowed = allowed | ((a < 0) & torch.eye(width, dtype=torch.bool, device=dev))  # padding sees itself
    hidden, weight, bias = _forward_hidden(
        model, packed_ids, _additive_mask(model, allowed.unsqueeze(1)), positions
    )
    rows_k = torch.tensor(tgt_row, dtype=torch.long, device=dev)
    cols_k = torch.tensor(tgt_col, dtype=torch.long, device=dev)
    h = hidden.reshape(-1, hidden.shape[-1])[torch.tensor(src_flat, dtype=torch.long, device=dev)]
    lp, ent = _head_logprobs(h, weight, bias, input_ids[rows_k, cols_k], temperature, entropy_grad)
    zeros = lp.new_zeros(input_ids.shape)
    logp = zeros.index_put((rows_k, cols_k), lp)
    ent = zeros.index_put((rows_k, cols_k), ent)
    return logp, (ent if entropy_grad else ent.detach())


def token_logprobs_and_entropy(
    model: nn.Module,
    input_ids: Tensor,  # (B, T) long
    attention_mask: Tensor,  # (B, T) 1 on real tokens
    *,
    loss_mask: Tensor | None = None,  # (B, T) positions to score; default every real token but the first
    temperature: float = 1.0,
    entropy_grad: bool = False,
    groups: Tensor | None = None,  # (B,) long: rows with one value share their prompt (a GRPO group)
) -> tuple[Tensor, Tensor]:  # logp (B, T), entropy (B, T); fp32 (fp64 for fp64 models); 0 where not scored
    """``token_logprobs`` plus the entropy of each scored position's next-token distribution.

    The entropy has a gradient only with ``entropy_grad=True`` (an entropy bonus).

    ``groups``: rows of one group (carried by the caller, e.g. from ``Trajectory.group_id``; never
    guessed from tokens) are scored in one packed row whose prompt is computed once
    (``_shared_prefix_logprobs``; same values and gradients), when a ``loss_mask`` is given, the
    model's attention takes dense masks (sdpa/eager), and it saves >= 20% of the padded tokens;
    otherwise (and with ``groups=None``) the plain batched forward runs.
    """
    if input_ids.dim() != 2 or input_ids.shape != attention_mask.shape:
        raise ValueError(
            f"input_ids and attention_mask must share one (B, T) shape, got {tuple(input_ids.shape)}, "
            f"{tuple(attention_mask.shape)}"
        )
    want = attention_mask if loss_mask is None else loss_mask
    sel = (want[:, 1:] > 0) & (attention_mask[:, 1:] > 0)  # (B, T-1): hidden t-1 predicts token t
    # positions count real tokens only, as generate() does for left-padded prompts; for right-padded
    # rows this is plain arange over the real tokens
    if groups is not None and loss_mask is not None and _takes_dense_masks(model):
        if groups.shape != input_ids.shape[:1]:
            raise ValueError(f"groups has shape {tuple(groups.shape)}, expected ({input_ids.shape[0]},)")
        shared = _shared_groups(input_ids, attention_mask, loss_mask, groups)
        if shared is not None:
            return _shared_prefix_logprobs(model, input_ids, loss_mask, shared, temperature, entropy_grad)
    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    return _scored_logprobs(model, input_ids, attention_mask, positions, sel, temperature, entropy_grad)


def _additive_mask(model: nn.Module, allowed: Tensor) -> Tensor:  # (R, 1, L, L) bool -> float, 0 or -max
    # eager attention adds a 4-D mask to the scores as-is, so a bool mask must become additive (SDPA
    # takes both); finfo.min and not -inf, so that no softmax row can be all -inf
    dtype = model.get_input_embeddings().weight.dtype
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
        ~allowed, torch.finfo(dtype).min
    )


def _takes_dense_masks(model: nn.Module) -> bool:
    config = getattr(model, "config", None)
    return getattr(config, "_attn_implementation", None) in ("sdpa", "eager")


def packed_token_logprobs(
    model: nn.Module, packed: PackedBatch, *, temperature: float = 1.0
) -> Tensor:  # (R, L): log p of each loss-masked token given the earlier tokens of *its own* example
    """``token_logprobs`` for rows packed by ``posttrain.algo.pack_sequences`` (SFT packing).

    Each example attends only to itself (``block_causal_mask``) and its positions restart at 0,
    so the result equals scoring every example alone, without the padding.
    """
    same = packed.seq_ids[:, 1:] == packed.seq_ids[:, :-1]
    sel = (packed.loss_mask[:, 1:] > 0) & same & (packed.seq_ids[:, 1:] >= 0)
    mask4 = _additive_mask(model, block_causal_mask(packed.seq_ids))
    return _scored_logprobs(model, packed.input_ids, mask4, packed.position_ids, sel, temperature, False)[0]


def token_logprobs(
    model: nn.Module,
    input_ids: Tensor,  # (B, T) long
    attention_mask: Tensor,  # (B, T)
    *,
    loss_mask: Tensor | None = None,  # (B, T) only these positions are scored (others get 0)
    temperature: float = 1.0,
    groups: Tensor | None = None,  # (B,) long: rows sharing a prompt, see token_logprobs_and_entropy
) -> Tensor:  # (B, T) fp32: position t holds log p(input_ids[t] | input_ids[<t]); position 0 holds 0
    """Log-prob of each token given its prefix, at ``temperature`` (softmax(logits / temperature)).

    Memory: hidden states of the scored positions only, projected through the LM head in chunks
    of at most ``LOGITS_CHUNK_BYTES`` (recomputed in backward when there is more than one chunk).
    """
    return token_logprobs_and_entropy(
        model,
        input_ids,
        attention_mask,
        loss_mask=loss_mask,
        temperature=temperature,
        groups=groups,
    )[0]


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
        if self.group is not None and tuple(self.group.shape) != shape[:1]:
            raise ValueError(f"PolicyBatch.group has shape {tuple(self.group.shape)}, expected ({shape[0]},)")
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
    dual_clip: float | None = None
    """Dual-clip constant c (> 1) for negative advantages; None = off."""
    agg: AggMode = "token_mean"
    """Aggregation mode, see ``posttrain.algo.aggregate``."""
    norm_const: float | None = None
    """Constant of ``seq_mean_token_sum_norm`` (Dr.GRPO: the max completion length)."""
    kl_coef: float = 0.0
    """Weight of the per-token KL to the reference policy added to the loss (0 = no reference)."""
    kl_kind: KLKind = "k3"
    """KL estimator: k1, k2 or k3."""
    kl_clamp: float | None = 10.0
    """Clamp of the KL estimate (see ``posttrain.algo.kl``); None = no clamp (TRL)."""
    kl_ratio_weighted: bool = False
    """Multiply the per-token KL by the ratio exp(logp - old_logp) (TRL ``use_bias_correction_kl``)."""
    entropy_coef: float = 0.0
    """Entropy bonus: loss -= entropy_coef * token-mean entropy."""
    temperature: float = 1.0
    """Sampling temperature: log-probs are computed from logits / temperature, like the sampler's."""
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
        if self.dual_clip is not None and (self.policy_loss == "cispo" or self.dual_clip <= 1.0):
            raise ConfigError(
                f"loss.dual_clip: must be None for cispo and > 1 otherwise, got {self.dual_clip}"
            )
        if self.clip_low < 0 or self.clip_high < 0 or self.kl_coef < 0 or self.temperature <= 0:
            raise ConfigError("loss: clip_low, clip_high, kl_coef must be >= 0 and temperature > 0")


def policy_loss(
    model: nn.Module,
    batch: PolicyBatch,
    spec: LossSpec,
    *,
    rows: slice | Tensor | None = None,  # a slice or a (b,) index tensor of rows
    num_items: float | None = None,
    num_tokens: float | None = None,
) -> tuple[Tensor, dict[str, float]]:  # scalar loss with gradient, detached metrics
    """The loss of ``batch[rows]`` (default: all rows) as ``spec`` defines it, with its metrics.

    ``num_items`` / ``num_tokens`` are the global normalizers (``count_items`` of the whole
    accumulated batch for ``spec.agg``, and its token count for the entropy bonus); default: these
    rows' own counts. ``policy_update`` calls this once per micro-batch.
    """
    sl = rows if rows is not None else slice(0, batch.input_ids.shape[0])
    mask = batch.loss_mask[sl]
    n_items = count_items(mask, spec.agg) if num_items is None else num_items
    n_tok = float(mask.sum()) if num_tokens is None else num_tokens
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
        temperature=spec.temperature,
        entropy_grad=spec.entropy_coef != 0.0,
        groups=None if batch.group is None else batch.group[sl],
    )
    old_logp = batch.old_logp[sl, cols]
    adv = batch.adv[sl] if batch.adv.dim() == 1 else batch.adv[sl, cols]
    loss_mat = POLICY_LOSSES[spec.policy_loss](
        logp, old_logp, adv, mask, clip_low=spec.clip_low, clip_high=spec.clip_high, dual_clip=spec.dual_clip
    )
    if spec.tis_cap is not None and batch.sampling_logp is not None:
        loss_mat = loss_mat * truncated_is_weights(
            old_logp, batch.sampling_logp[sl, cols], mask, cap=spec.tis_cap
        )
    kl = None
    if spec.kl_coef > 0.0:
        if batch.ref_logp is None:
            raise ValueError("LossSpec.kl_coef > 0 needs PolicyBatch.ref_logp")
        kl = kl_penalty(logp, batch.ref_logp[sl, cols], spec.kl_kind, clamp=spec.kl_clamp)
        if spec.kl_ratio_weighted:
            kl = kl * torch.exp(logp - old_logp)
        loss_mat = loss_mat + spec.kl_coef * torch.where(mask > 0, kl, torch.zeros_like(kl))
    loss = aggregate(loss_mat, mask, spec.agg, norm_const=spec.norm_const, num_items=n_items)
    if spec.entropy_coef != 0.0:
        loss = loss - spec.entropy_coef * aggregate(ent, mask, "token_mean", num_items=n_tok)
    stats = loss_stats(
        logp, old_logp, mask, adv=adv, clip_low=spec.clip_low, clip_high=spec.clip_high, entropy=ent
    )
    if kl is not None:
        kl_sum = float(torch.where(mask > 0, kl.detach(), torch.zeros_like(kl)).sum())
        stats["kl"] = kl_sum / max(float(mask.sum()), 1.0)
    return loss, stats


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


def policy_update(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: PolicyBatch,
    spec: LossSpec,
    *,
    micro_batch_size: int,
    max_grad_norm: float,
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
    n_rows = batch.input_ids.shape[0]
    order = _row_order(batch)
    for start in range(0, n_rows, micro_batch_size):
        sl = order[start : start + micro_batch_size]
        w = float(batch.loss_mask[sl].sum())
        if w == 0.0:
            continue  # contributes nothing to the loss nor to any normalizer
        loss, stats = policy_loss(model, batch, spec, rows=sl, num_items=n_items, num_tokens=n_tok)
        loss.backward()
        loss_sum += float(loss.detach())
        ratio_max = max(ratio_max, stats.pop("ratio_max"))
        for k, v in stats.items():
            totals[k] = totals.get(k, 0.0) + v * w  # token-weighted means
    params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    out = {k: v / n_tok for k, v in totals.items()} if n_tok else {}
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


@dataclass(frozen=True)
class LoraSpec:
    """LoRA adapters (peft) instead of full fine-tuning; the frozen base doubles as the reference."""

    r: PositiveInt = 8
    """Rank of the adapter matrices."""
    alpha: PositiveFloat = 16.0
    """Scaling: the update is (alpha / r) * B A."""
    dropout: Annotated[float, Range(ge=0, lt=1)] = 0.0
    """Dropout on the adapter input."""
    target_modules: tuple[str, ...] | None = None
    """Names of the Linear modules that get adapters; null = the architecture's default (the
    attention projections q/k/v/o_proj where the model has them, else peft's table: GPT-2 c_attn)."""

    def __post_init__(self) -> None:
        if self.target_modules == ():
            raise ConfigError("target_modules: expected at least one module name, or null for the architecture's default")
        if self.r < 1 or self.alpha <= 0 or not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"lora: need r >= 1, alpha > 0, 0 <= dropout < 1; got {self}")


ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


def lora_target_modules(model: nn.Module, spec: LoraSpec, *, key: str = "lora.target_modules") -> list[str]:
    """The module names LoRA wraps in ``model``: ``spec.target_modules``, or the architecture's default.

    The default is the attention projections where the model has them (Llama, Qwen, Mistral), else
    peft's table for ``model.config.model_type`` (GPT-2: ``c_attn``). A name the model lacks is a
    ``ConfigError`` naming ``key`` and the module names it has (peft would match nothing, or fail
    with a message about regexes). Names match as peft matches them: a module's name or a suffix
    of its dotted path (``self_attn.q_proj``).
    """
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_DEFAULTS
    from transformers.pytorch_utils import Conv1D

    paths = [n for n, m in model.named_modules() if isinstance(m, nn.Linear | nn.Embedding | Conv1D)]
    have = sorted({p.rsplit(".", 1)[-1] for p in paths})
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if spec.target_modules is None:
        wanted = [m for m in ATTENTION_PROJECTIONS if m in have] or list(PEFT_DEFAULTS.get(model_type) or [])
        if not wanted or not set(wanted) <= set(have):
            raise ConfigError(f"{key}: no default for model type {model_type!r}; "
                              f"name some of the modules LoRA can wrap: {', '.join(have)}")
        return wanted
    for name in spec.target_modules:
        if not any(p == name or p.endswith("." + name) for p in paths):
            raise ConfigError(f"{key}: {type(model).__name__} ({model_type}) has no module {name!r}; "
                              f"the modules LoRA can wrap are {', '.join(have)}")
    return list(spec.target_modules)


def apply_lora(model: nn.Module, spec: LoraSpec, *, task_type: str = "CAUSAL_LM") -> nn.Module:
    """Wrap ``model`` with peft LoRA adapters; only the adapters (and, for SEQ_CLS, the head) train.

    ``model.disable_adapter()`` (a context manager) then gives the base model: the reference policy
    of DPO/GRPO without a second copy of the weights.
    """
    from peft import LoraConfig, get_peft_model
    from transformers.pytorch_utils import Conv1D

    targets = lora_target_modules(model, spec)
    config = LoraConfig(
        r=spec.r,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=targets,
        task_type=task_type,
        # GPT-2's Conv1D stores its weight transposed (peft would otherwise warn and set it itself)
        fan_in_fan_out=any(isinstance(m, Conv1D) and n.rsplit(".", 1)[-1] in targets for n, m in model.named_modules()),
    )
    try:
        return get_peft_model(model, config)
    except ValueError as e:
        raise ConfigError(f"lora.target_modules {targets}: {e}") from e
