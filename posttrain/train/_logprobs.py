"""The log-prob engine: ``log p(token | prefix)`` of the scored positions of a batch, for every trainer.

- ``token_logprobs(model, input_ids, attention_mask, *, loss_mask, temperature, groups)``: ``log
  p(input_ids[t] | input_ids[<t])`` for every position, computed from the backbone's hidden states
  and the LM head on *only* the positions that are needed, in chunks, so the (B, T, V) logits
  tensor never exists (``_LogProbHead``: a fused head + log-softmax + gather with a hand-written
  backward).
- ``temperature``: one number for every row, or a ``(B,)`` tensor, each row scored at its own (rows
  sampled at different temperatures: ``rl.adaptive_temperature``).
- ``token_logprobs_and_entropy``: the same plus each scored position's entropy (for metrics).
- Shared-prefix packing: rows of one carried group (a GRPO group) are scored in one packed row
  ``[prompt, c_1, ..., c_G]`` whose prompt is computed once (``_shared_groups``,
  ``_shared_prefix_logprobs``); the same values and gradients as scoring each row alone.
- ``packed_token_logprobs(model, packed)``: the same for rows packed by ``pack_sequences`` (SFT).

Rows are right-padded (``posttrain.train._batch.collate``); position ids are computed from the
attention mask (the count of real tokens before each one), as ``generate`` does. Not here: losses,
the optimizer step (``_step.py``), LoRA (``_lora.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from posttrain.algo import PackedBatch, block_causal_mask

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
    ``temperature``: a number, or a (K, 1) tensor (each scored position its own).
    """

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, temperature: float | Tensor):
        # hidden (K, H), weight (V, H), target (K,) -> logp (K,), entropy (K,)
        logits = nn.functional.linear(hidden, weight, bias)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16 -> fp32, fp64 stays
        if isinstance(temperature, Tensor) or temperature != 1.0:
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
        if isinstance(ctx.temperature, Tensor) or ctx.temperature != 1.0:
            d = d / ctx.temperature
        d = d.to(weight.dtype)
        grad_hidden = d @ weight if ctx.needs_input_grad[0] else None
        grad_weight = d.t() @ hidden if ctx.needs_input_grad[1] else None
        grad_bias = d.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_hidden, grad_weight, grad_bias, None, None


def _head_logprobs(
    hidden: Tensor,  # (K, H) hidden states that predict the targets (or (K, V) logits when weight is None)
    weight: Tensor | None,  # (V, H) LM head
    bias: Tensor | None,
    target: Tensor,  # (K,)
    temperature: float | Tensor,  # a number, or (K,): each position's own
) -> tuple[Tensor, Tensor]:  # logp (K,), entropy (K,)
    k = target.shape[0]
    vocab = weight.shape[0] if weight is not None else hidden.shape[-1]
    step = max(1, LOGITS_CHUNK_BYTES // (4 * vocab))
    parts_lp, parts_ent = [], []
    for s in range(0, max(k, 1), step):
        h, t = hidden[s : s + step], target[s : s + step]
        temp = temperature[s : s + step, None] if isinstance(temperature, Tensor) else temperature  # (k, 1)
        if weight is None:
            lg = h.to(torch.promote_types(h.dtype, torch.float32)) / temp
            lse = torch.logsumexp(lg, -1)
            lp, ent = lg.gather(-1, t.unsqueeze(-1)).squeeze(-1) - lse, lse - (lg.softmax(-1) * lg).sum(-1)
        elif k > step and torch.is_grad_enabled():  # recompute each chunk's logits in backward
            lp, ent = checkpoint(_LogProbHead.apply, h, weight, bias, t, temp, use_reentrant=False)
        else:
            lp, ent = _LogProbHead.apply(h, weight, bias, t, temp)
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
    temperature: float | Tensor,  # a number, or (B,): each row's own
) -> tuple[Tensor, Tensor]:  # logp (B, T), entropy (B, T) without gradient; 0 where not scored
    hidden, weight, bias = _forward_hidden(model, input_ids, model_mask, positions)
    if isinstance(temperature, Tensor):  # (B,) -> (K,): the row of each scored position
        temperature = temperature[:, None].expand(sel.shape)[sel]
    lp, ent = _head_logprobs(hidden[:, :-1][sel], weight, bias, input_ids[:, 1:][sel], temperature)
    zeros = lp.new_zeros(input_ids.shape[0], input_ids.shape[1] - 1)
    logp = torch.cat([zeros[:, :1], zeros.masked_scatter(sel, lp)], dim=1)
    ent = torch.cat([zeros[:, :1], zeros.masked_scatter(sel, ent)], dim=1)
    return logp, ent.detach()


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
    temperature: float | Tensor,  # a number, or (B,): each row's own
) -> tuple[Tensor, Tensor]:  # logp (B, T), entropy (B, T) without gradient; 0 where not scored
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
    temp = temperature[rows_k] if isinstance(temperature, Tensor) else temperature  # (K,): each target's row
    lp, ent = _head_logprobs(h, weight, bias, input_ids[rows_k, cols_k], temp)
    zeros = lp.new_zeros(input_ids.shape)
    logp = zeros.index_put((rows_k, cols_k), lp)
    ent = zeros.index_put((rows_k, cols_k), ent)
    return logp, ent.detach()


def token_logprobs_and_entropy(
    model: nn.Module,
    input_ids: Tensor,  # (B, T) long
    attention_mask: Tensor,  # (B, T) 1 on real tokens
    *,
    loss_mask: Tensor | None = None,  # (B, T) positions to score; default every real token but the first
    temperature: float | Tensor = 1.0,  # a number, or (B,): each row scored at its own
    groups: Tensor | None = None,  # (B,) long: rows with one value share their prompt (a GRPO group)
) -> tuple[Tensor, Tensor]:  # logp (B, T), entropy (B, T); fp32 (fp64 for fp64 models); 0 where not scored
    """``token_logprobs`` plus the entropy of each scored position's next-token distribution.

    The entropy is a metric: it has no gradient.

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
    if isinstance(temperature, Tensor) and tuple(temperature.shape) != tuple(input_ids.shape[:1]):
        raise ValueError(f"temperature has shape {tuple(temperature.shape)}, expected ({input_ids.shape[0]},) or a number")
    want = attention_mask if loss_mask is None else loss_mask
    sel = (want[:, 1:] > 0) & (attention_mask[:, 1:] > 0)  # (B, T-1): hidden t-1 predicts token t
    # positions count real tokens only, as generate() does for left-padded prompts; for right-padded
    # rows this is plain arange over the real tokens
    if groups is not None and loss_mask is not None and _takes_dense_masks(model):
        if groups.shape != input_ids.shape[:1]:
            raise ValueError(f"groups has shape {tuple(groups.shape)}, expected ({input_ids.shape[0]},)")
        shared = _shared_groups(input_ids, attention_mask, loss_mask, groups)
        if shared is not None:
            return _shared_prefix_logprobs(model, input_ids, loss_mask, shared, temperature)
    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    return _scored_logprobs(model, input_ids, attention_mask, positions, sel, temperature)


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
    return _scored_logprobs(model, packed.input_ids, mask4, packed.position_ids, sel, temperature)[0]


def token_logprobs(
    model: nn.Module,
    input_ids: Tensor,  # (B, T) long
    attention_mask: Tensor,  # (B, T)
    *,
    loss_mask: Tensor | None = None,  # (B, T) only these positions are scored (others get 0)
    temperature: float | Tensor = 1.0,  # a number, or (B,): each row scored at its own
    groups: Tensor | None = None,  # (B,) long: rows sharing a prompt, see token_logprobs_and_entropy
) -> Tensor:  # (B, T) fp32: position t holds log p(input_ids[t] | input_ids[<t]); position 0 holds 0
    """Log-prob of each token given its prefix, at ``temperature`` (softmax(logits / temperature));
    a (B,) ``temperature`` scores each row at its own (the temperature it was sampled at).

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
