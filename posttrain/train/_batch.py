"""Token batches for training: right-padded rows and their loss mask, built from ids as sampled.

- ``collate(prompts, completions)``: (prompt + completion) rows, loss on the completion.
- ``trajectory_rows(trajectories)``: one row per episode (``Trajectory.ids``: the prompt, then
  every action and observation in order), loss on the model's actions only (``loss_mask``), the
  sampling logprobs as values. A one-turn trajectory gives exactly ``collate``'s row.

Rows are built from token ids exactly as sampled (or as tokenized once for a demonstration);
text is never re-tokenized here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from posttrain.types import Trajectory


@dataclass(frozen=True)
class TokenRows:
    input_ids: Tensor  # (B, T) long, right-padded with pad_id
    attention_mask: Tensor  # (B, T) long, 1 on real tokens
    loss_mask: Tensor  # (B, T) float, 1.0 on the targets that get gradient (completion / action tokens)
    values: Tensor  # (B, T) float, per-token values aligned with loss_mask (e.g. sampling logprobs), 0 elsewhere


def collate_rows(
    rows: Sequence[Sequence[int]],
    masks: Sequence[Sequence[float]],
    *,
    pad_id: int,
    values: Sequence[Sequence[float]] | None = None,
) -> TokenRows:
    """Stack rows with their own per-token loss masks (and values, one per token, 0 where unmasked).

    >>> rows = collate_rows([[1, 5, 6, 9, 7]], [[0, 0, 1, 0, 1]], pad_id=0)
    >>> rows.loss_mask.tolist()
    [[0.0, 0.0, 1.0, 0.0, 1.0]]
    """
    width = max(len(r) for r in rows)
    n = len(rows)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    loss_mask = torch.zeros((n, width), dtype=torch.float32)
    vals = torch.zeros((n, width), dtype=torch.float32)
    for i, (row, m) in enumerate(zip(rows, masks, strict=True)):
        if len(m) != len(row):
            raise ValueError(f"row {i}: {len(m)} loss-mask entries for {len(row)} tokens")
        input_ids[i, : len(row)] = torch.tensor(list(row), dtype=torch.long)
        attention[i, : len(row)] = 1
        loss_mask[i, : len(row)] = torch.tensor(list(m), dtype=torch.float32)
        if values is not None:
            if len(values[i]) != len(row):
                raise ValueError(f"row {i}: {len(values[i])} values for {len(row)} tokens")
            vals[i, : len(row)] = torch.tensor(list(values[i]), dtype=torch.float32)
    return TokenRows(input_ids, attention, loss_mask, vals)


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
    if values is not None:
        for i, (v, c) in enumerate(zip(values, completions, strict=True)):
            if len(v) != len(c):
                raise ValueError(f"row {i}: {len(v)} values for {len(c)} completion tokens")
    return collate_rows(
        [[*p, *c] for p, c in zip(prompts, completions, strict=True)],
        [[0.0] * len(p) + [1.0] * len(c) for p, c in zip(prompts, completions, strict=True)],
        pad_id=pad_id,
        values=None if values is None else [[0.0] * len(p) + list(v) for p, v in zip(prompts, values, strict=True)],
    )


def trajectory_rows(trajectories: Sequence[Trajectory], *, pad_id: int) -> TokenRows:
    """One row per episode: all its ids, loss on its action tokens, values = the sampling logprobs.

    >>> from posttrain.types import Turn, Verdict
    >>> t = Trajectory("m1", "0/m1", 0, (Turn((1, 5), (7,), (-0.5,), "stop", Verdict("fail", 0.0)),
    ...                                  Turn((9,), (8, 2), (-0.1, -0.2), "eos", Verdict("pass", 1.0))), 1.0)
    >>> rows = trajectory_rows([t], pad_id=0)
    >>> rows.input_ids.tolist(), rows.loss_mask.tolist(), rows.values.tolist()[0][2:4]
    ([[1, 5, 7, 9, 8, 2]], [[0.0, 0.0, 1.0, 0.0, 1.0, 1.0]], [-0.5, 0.0])
    """
    return collate_rows([t.ids for t in trajectories], [t.loss_mask for t in trajectories], pad_id=pad_id,
                        values=[t.logprobs for t in trajectories])
