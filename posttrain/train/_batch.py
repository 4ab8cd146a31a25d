"""Token batches for training: right-padded (prompt + completion) rows and their loss mask.

Rows are built from token ids exactly as sampled (or as tokenized once for a demonstration);
text is never re-tokenized here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class TokenRows:
    input_ids: Tensor  # (B, T) long, right-padded with pad_id
    attention_mask: Tensor  # (B, T) long, 1 on real tokens
    loss_mask: Tensor  # (B, T) float, 1.0 on completion tokens (the targets that get gradient)
    values: Tensor  # (B, T) float, per-token values aligned with loss_mask (e.g. sampling logprobs), 0 elsewhere


def collate(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    pad_id: int,
    values: Sequence[Sequence[float]] | None = None,
) -> TokenRows:
    """Stack prompt+completion rows. ``values[i]`` has one entry per completion token of row i.

    >>> rows = collate([[1, 5]], [[6, 2]], pad_id=0, values=[[-0.1, -0.2]])
    >>> rows.input_ids.tolist(), rows.loss_mask.tolist()
    ([[1, 5, 6, 2]], [[0.0, 0.0, 1.0, 1.0]])
    """
    width = max(len(p) + len(c) for p, c in zip(prompts, completions, strict=True))
    n = len(prompts)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    loss_mask = torch.zeros((n, width), dtype=torch.float32)
    vals = torch.zeros((n, width), dtype=torch.float32)
    for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        row = [*p, *c]
        input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        attention[i, : len(row)] = 1
        loss_mask[i, len(p) : len(row)] = 1.0
        if values is not None:
            if len(values[i]) != len(c):
                raise ValueError(f"row {i}: {len(values[i])} values for {len(c)} completion tokens")
            vals[i, len(p) : len(row)] = torch.tensor(values[i], dtype=torch.float32)
    return TokenRows(input_ids, attention, loss_mask, vals)
