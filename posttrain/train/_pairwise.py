"""What DPO and the reward model share: the optimizer settings of a pass over preference pairs, and
the loop that makes it.

    metrics = train_pairs(model, encoded, cfg, pair_losses, log=log)

- ``PairTraining``: lr, epochs, batch and micro-batch size, clipping, max length, seed, LoRA; the
  recipe's ``dpo`` and ``rm`` sections are this plus their own keys (``DPOConfig``, ``RMConfig``).
- ``train_pairs``: in train mode, each module's own mode restored after; per epoch, the pairs in a
  seeded random order; per optimizer step, ``batch_size`` pairs in micro-batches of
  ``micro_batch_size``, each micro-batch's per-pair losses summed and
  divided by the step's pair count (so the gradient does not depend on the micro-batch size), the
  gradient clipped, an AdamW step (skipped when the gradient norm is not finite). The loss itself
  is the caller's (``PairLosses``): DPO's against its reference, the reward model's Bradley-Terry.

Not here: tokenizing pairs (``dpo.encode_pairs``), reference log-probs, LoRA wrapping and merging.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated

import torch
from torch import Tensor, nn

from posttrain.config import MAX_EPOCHS, LearningRate, PositiveFloat, PositiveInt, Range, Seed
from posttrain.errors import ConfigError
from posttrain.train._lora import LoraSpec
from posttrain.train._optim import adamw


@dataclass(frozen=True)
class PairTraining:
    """The optimizer settings of a pass over preference pairs (``train_pairs``)."""

    lr: LearningRate = 1e-5
    """AdamW learning rate (constant)."""
    epochs: Annotated[int, Range(ge=1, le=MAX_EPOCHS)] = 1
    """Passes over the pairs."""
    batch_size: PositiveInt = 8
    """Pairs per optimizer step."""
    micro_batch_size: PositiveInt = 8
    """Pairs per forward/backward (gradients accumulate to batch_size)."""
    max_grad_norm: PositiveFloat = 1.0
    """Gradient clipping."""
    max_len: PositiveInt = 1024
    """Pairs whose prompt + longer completion exceed this many tokens are rejected."""
    seed: Seed = 0
    """Shuffling seed."""
    lora: LoraSpec | None = None
    """Train LoRA adapters (peft; a reward model's head too) instead of all weights; merged back at the end."""

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.epochs < 1 or self.batch_size < 1 or self.micro_batch_size < 1:
            raise ConfigError(f"{self.section}: lr must be > 0 and epochs, batch_size, micro_batch_size >= 1")

    @property
    def section(self) -> str:
        """The recipe section these settings come from (``dpo``, ``rm``), for error messages."""
        return type(self).__name__.removesuffix("Config").lower()


PairLosses = Callable[[Sequence[int]], tuple[Tensor, dict[str, Tensor]]]
"""``pair_losses(indices)`` -> the loss of each of those pairs (P,) with gradient, and named per-pair
metrics (P,) each (float); ``train_pairs`` reports each metric's mean (``loss`` first)."""


def train_pairs(
    model: nn.Module,
    n_pairs: int,
    cfg: PairTraining,
    pair_losses: PairLosses,
    *,
    log: Callable[[dict[str, float]], None] | None = None,
) -> dict[str, float]:
    """Train ``model`` in place on ``n_pairs`` pairs (module docstring), in train mode; returns the last
    epoch's means over its steps (``loss`` and each metric of ``pair_losses``) and ``steps``. ``log``
    gets each step's values and its ``grad_norm``. Each module is handed back in the mode it came in
    (per module: a peft wrapper is a new module in train mode around a caller's model in eval mode);
    left in train mode, a reward model loaded in eval mode then scored with dropout on (``score_rows``
    after ``train_rm``: the same rows 0.05 apart at attention dropout 0.5)."""
    modes = [(m, m.training) for m in model.modules()]
    model.train()
    try:
        return _train_pairs(model, n_pairs, cfg, pair_losses, log=log)
    finally:
        for m, training in modes:
            m.train(training)


def _train_pairs(model: nn.Module, n_pairs: int, cfg: PairTraining, pair_losses: PairLosses, *,
                 log: Callable[[dict[str, float]], None] | None) -> dict[str, float]:
    params = [p for p in model.parameters() if p.requires_grad]
    opt = adamw(params, lr=cfg.lr, weight_decay=0.01)  # torch's AdamW default
    gen = torch.Generator().manual_seed(cfg.seed)
    metrics: dict[str, float] = {}
    for _epoch in range(cfg.epochs):
        order = torch.randperm(n_pairs, generator=gen).tolist()
        sums: dict[str, float] = {}
        n_steps = 0
        for b in range(0, len(order), cfg.batch_size):
            idx = order[b : b + cfg.batch_size]
            opt.zero_grad(set_to_none=True)
            step: dict[str, float] = {}
            for m in range(0, len(idx), cfg.micro_batch_size):
                losses, named = pair_losses(idx[m : m + cfg.micro_batch_size])
                (losses.sum() / len(idx)).backward()  # normalized by the step's pair count
                for k, v in {"loss": losses, **named}.items():
                    step[k] = step.get(k, 0.0) + float(v.detach().sum()) / len(idx)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
            if math.isfinite(grad_norm):
                opt.step()
            n_steps += 1
            for k, v in step.items():
                sums[k] = sums.get(k, 0.0) + v
            if log is not None:
                log({**step, "grad_norm": grad_norm})
        metrics = {k: v / n_steps for k, v in sums.items()} | {"steps": float(n_steps)}
    opt.zero_grad(set_to_none=True)
    return metrics
