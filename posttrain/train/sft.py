"""Supervised fine-tuning on demonstrations: completion-only loss, read top to bottom.

    for step: sample a batch of demonstrations -> token log-probs -> masked NLL -> AdamW step -> log

Demonstrations are (prompt, response) text pairs tokenized once here (prompt ids exactly as the
policy encodes prompts for generation, response ids + EOS); the loss covers response tokens only
(TRL ``completion_only_loss``). The learning rate warms up linearly then decays with a cosine.

Launch: part of ``posttrain run RECIPE --out DIR`` (stage ``sft``); the loop is ``train_sft``.
With ``sft.pack_len`` the examples of a batch are packed into rows without padding (each attends
only to itself); the loss is identical to the padded path (tests/core/test_sft.py).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from posttrain.algo.sft import pack_sequences, sft_loss
from posttrain.policy import Policy
from posttrain.train._batch import collate
from posttrain.train._step import packed_token_logprobs, token_logprobs


@dataclass(frozen=True)
class SFTParams:
    steps: int
    batch_size: int
    lr: float
    warmup_frac: float = 0.05
    seed: int = 0
    pack_len: int | None = None
    """Pack each batch's examples into rows of this many tokens (no padding, no cross-attention
    between examples); None = one right-padded row per example. The loss is the same either way."""


def batch_logprobs(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    pad_id: int,
    pack_len: int | None,
) -> tuple[torch.Tensor, torch.Tensor]:  # logp (R, L), loss mask (R, L) on the model's device
    """Token log-probs of demonstration rows, padded or packed; the masks mark completion tokens."""
    device = next(model.parameters()).device
    if pack_len is None:
        rows = collate(prompts, completions, pad_id=pad_id)
        mask = rows.loss_mask.to(device)
        return token_logprobs(model, rows.input_ids.to(device), rows.attention_mask.to(device), loss_mask=mask), mask
    packed = pack_sequences([[*p, *c] for p, c in zip(prompts, completions, strict=True)],
                            [[0.0] * len(p) + [1.0] * len(c) for p, c in zip(prompts, completions, strict=True)],
                            max_len=pack_len, pad_id=pad_id)
    packed = dataclasses.replace(packed, **{f: getattr(packed, f).to(device)
                                            for f in ("input_ids", "position_ids", "loss_mask", "seq_ids")})
    return packed_token_logprobs(model, packed), packed.loss_mask


def cosine_with_warmup(steps: int, warmup_frac: float) -> Callable[[int], float]:
    """LR multiplier: linear warmup over ``warmup_frac`` of the steps, then cosine to 0."""
    warmup = max(1, int(warmup_frac * steps))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    return factor


def train_sft(
    policy: Policy,
    demos: Sequence[tuple[str, str]],
    params: SFTParams,
    *,
    log: Callable[[dict[str, float]], None] = lambda m: None,
    progress: Callable[[int], None] = lambda step: None,
) -> dict[str, float]:
    """Fine-tune ``policy`` in place on (prompt, response) pairs. Returns the last step's metrics."""
    if not demos:
        raise ValueError("SFT needs at least one demonstration")
    prompts = [policy.encode_prompt(p) for p, _ in demos]
    completions = [policy.encode_completion(r) for _, r in demos]
    model = policy.model
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=params.lr, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine_with_warmup(params.steps, params.warmup_frac))
    gen = torch.Generator().manual_seed(params.seed)
    metrics: dict[str, float] = {}
    start = time.perf_counter()
    tokens_seen = 0
    for step in range(params.steps):
        idx = torch.randint(len(demos), (params.batch_size,), generator=gen).tolist()
        logp, mask = batch_logprobs(model, [prompts[i] for i in idx], [completions[i] for i in idx],
                                    pad_id=policy.tokenizer.pad_token_id, pack_len=params.pack_len)  # (R, L)
        loss = sft_loss(logp, mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        tokens_seen += sum(len(prompts[i]) + len(completions[i]) for i in idx)
        wall = time.perf_counter() - start
        metrics = {
            "step": step,
            "loss": float(loss.detach()),
            "grad_norm": float(grad_norm),
            "lr": scheduler.get_last_lr()[0],
            "tokens_per_s": tokens_seen / max(wall, 1e-9),
            "wall_s": wall,
        }
        log(metrics)
        progress(step + 1)
    model.eval()
    return metrics
