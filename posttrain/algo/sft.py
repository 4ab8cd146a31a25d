"""Supervised fine-tuning loss (completion-only masked cross-entropy) and sequence packing.

The loss takes token log-probs (``posttrain.train.token_logprobs``), not logits, so it shares the
memory-efficient gather with the RL losses. Packing concatenates several (prompt, completion)
examples into rows of a fixed length, restarting ``position_ids`` at each example and recording
which example every token belongs to; ``block_causal_mask`` turns that into a 4-D attention mask
so that no example attends to another one (needed for exactness with eager/SDPA attention; flash
attention varlen kernels use the restarting ``position_ids`` instead).

Not here: tokenization and chat templates (``posttrain.policy``), the training loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .aggregate import aggregate


def sft_loss(
    logp: Tensor,  # (B, T) log p(token_t | < t); position 0 unused
    mask: Tensor,  # (B, T) 1.0 on completion tokens (and eos) to learn
    *,
    num_items: float | None = None,
) -> Tensor:  # () mean negative log-likelihood per completion token
    """Completion-only SFT: ``-sum(logp m) / num_items`` (token mean; TRL ``completion_only_loss``).

    Pass ``num_items`` = completion tokens of the whole accumulated batch for micro-batch invariance.

    >>> sft_loss(torch.log(torch.tensor([[1.0, 0.5, 0.25]])), torch.tensor([[0.0, 1.0, 1.0]])).item()
    1.0397207736968994
    """
    return aggregate(-logp, mask, "token_mean", num_items=num_items)


@dataclass(frozen=True)
class PackedBatch:
    """Rows of concatenated examples; every tensor is (R, L)."""

    input_ids: Tensor  # (R, L) long, pad_id after the last example of a row
    position_ids: Tensor  # (R, L) long, restarts at 0 at each example
    loss_mask: Tensor  # (R, L) float, the examples' loss masks (0 on padding)
    seq_ids: Tensor  # (R, L) long, index of the example within its row, -1 on padding
    example_index: tuple[tuple[int, ...], ...]  # examples (input order) packed in each row


def pack_sequences(
    sequences: Sequence[Sequence[int]],
    loss_masks: Sequence[Sequence[float]],
    *,
    max_len: int,
    pad_id: int = 0,
) -> PackedBatch:
    """Pack examples into rows of ``max_len`` tokens, first-fit by decreasing length.

    Each example keeps its own loss mask, so position 0 of an example (nothing before it in the
    example) must already be 0 there; packing never lets one example predict the next one's tokens.

    >>> p = pack_sequences([[1, 2, 3], [4, 5], [6, 7, 8, 9]], [[0, 1, 1], [0, 1], [0, 0, 1, 1]], max_len=5)
    >>> p.input_ids.tolist(), p.position_ids.tolist()
    ([[6, 7, 8, 9, 0], [1, 2, 3, 4, 5]], [[0, 1, 2, 3, 0], [0, 1, 2, 0, 1]])
    """
    if len(sequences) != len(loss_masks):
        raise ValueError(f"{len(sequences)} sequences but {len(loss_masks)} loss masks")
    order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
    rows: list[list[int]] = []
    room: list[int] = []
    for i in order:
        n = len(sequences[i])
        if len(loss_masks[i]) != n:
            raise ValueError(f"example {i}: {n} tokens but {len(loss_masks[i])} loss-mask entries")
        if n > max_len or n == 0:
            raise ValueError(f"example {i} has {n} tokens; packing needs 1..max_len={max_len}")
        if loss_masks[i][0]:
            raise ValueError(f"example {i}: loss mask at position 0 must be 0 (no context to predict it)")
        for r, left in enumerate(room):
            if left >= n:
                rows[r].append(i)
                room[r] -= n
                break
        else:
            rows.append([i])
            room.append(max_len - n)
    shape = (len(rows), max_len)
    input_ids = torch.full(shape, pad_id, dtype=torch.long)
    position_ids = torch.zeros(shape, dtype=torch.long)
    loss_mask = torch.zeros(shape, dtype=torch.float32)
    seq_ids = torch.full(shape, -1, dtype=torch.long)
    for r, members in enumerate(rows):
        at = 0
        for k, i in enumerate(members):
            n = len(sequences[i])
            input_ids[r, at : at + n] = torch.tensor(list(sequences[i]), dtype=torch.long)
            position_ids[r, at : at + n] = torch.arange(n)
            loss_mask[r, at : at + n] = torch.tensor(list(loss_masks[i]), dtype=torch.float32)
            seq_ids[r, at : at + n] = k
            at += n
    return PackedBatch(input_ids, position_ids, loss_mask, seq_ids, tuple(tuple(m) for m in rows))


def block_causal_mask(seq_ids: Tensor) -> Tensor:  # (R, L) -> (R, 1, L, L) bool, True = may attend
    """Causal attention restricted to tokens of the same example (padding attends only to itself).

    >>> block_causal_mask(torch.tensor([[0, 0, 1]]))[0, 0].int().tolist()
    [[1, 0, 0], [1, 1, 0], [0, 0, 1]]
    """
    length = seq_ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=seq_ids.device).tril()
    same = seq_ids.unsqueeze(-1) == seq_ids.unsqueeze(-2)  # (R, L, L)
    eye = torch.eye(length, dtype=torch.bool, device=seq_ids.device)
    pad = (seq_ids < 0).unsqueeze(-1) & eye  # padding rows see themselves, never a softmax over nothing
    return ((same & causal & (seq_ids >= 0).unsqueeze(-1)) | pad).unsqueeze(1)
