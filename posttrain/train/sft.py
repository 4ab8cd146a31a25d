"""Supervised fine-tuning on demonstrations: completion-only loss, read top to bottom.

    for step: sample a batch of demonstrations -> token log-probs -> masked NLL -> AdamW step -> log

A demonstration is a (prompt, response) text pair, tokenized once here (prompt ids exactly as the
policy encodes prompts for generation, response ids + EOS), or a demonstration episode: a
``Trajectory`` whose actions are the demonstrator's turns, taken as ids (never re-tokenized). The
loss covers the model's tokens only: the response (TRL ``completion_only_loss``), or every action
of the episode and none of its observations; a one-turn episode is exactly its (prompt, response)
pair. The learning rate warms up linearly then decays with a cosine.

Launch: part of ``posttrain run RECIPE --out DIR`` (stage ``sft``); the loop is ``train_sft``.
With ``sft.pack_len`` the examples of a batch are packed into rows without padding (each attends
only to itself); the loss is identical to the padded path (tests/core/test_sft.py). An example is
never split across rows: one longer than ``pack_len`` is a ``UserError`` before the first step
(``check_pack_len``), not at whichever step first draws it.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from posttrain.algo.sft import pack_sequences, sft_loss
from posttrain.errors import UserError
from posttrain.policy import Policy
from posttrain.train._batch import collate_rows
from posttrain.train._logprobs import packed_token_logprobs, token_logprobs
from posttrain.train._optim import adamw
from posttrain.types import Trajectory, Turn

Demonstration = tuple[str, str] | Trajectory
"""A (prompt, response) text pair, or a demonstration episode (only its turns' ids are read)."""


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


def example_logprobs(
    model: torch.nn.Module,
    rows: Sequence[Sequence[int]],
    masks: Sequence[Sequence[float]],
    *,
    pad_id: int,
    pack_len: int | None,
    prompt_lens: Sequence[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # logp (R, L), loss mask (R, L) on the model's device
    """Token log-probs of demonstration rows (ids + a loss mask each), padded or packed.

    ``prompt_lens``: each row's prompt length; padded rows with one prompt are then scored with
    the prompt computed once (``token_logprobs(groups=...)``; same values)."""
    device = next(model.parameters()).device
    if pack_len is None:
        batch = collate_rows(rows, masks, pad_id=pad_id)
        mask = batch.loss_mask.to(device)
        groups = None
        if prompt_lens is not None:
            index: dict[tuple[int, ...], int] = {}
            groups = torch.tensor([index.setdefault(tuple(r[:n]), len(index)) for r, n in zip(rows, prompt_lens,
                                                                                                strict=True)])
            groups = groups.to(device)
        logp = token_logprobs(model, batch.input_ids.to(device), batch.attention_mask.to(device), loss_mask=mask,
                              groups=groups)
        return logp, mask
    packed = pack_sequences(rows, masks, max_len=pack_len, pad_id=pad_id)
    packed = dataclasses.replace(packed, **{f: getattr(packed, f).to(device)
                                            for f in ("input_ids", "position_ids", "loss_mask", "seq_ids")})
    return packed_token_logprobs(model, packed), packed.loss_mask


def demonstration_episode(task_id: str, turns: Sequence[tuple[Sequence[int], Sequence[int]]]) -> Trajectory:
    """A demonstration episode from (observation ids, action ids) turns, ids exactly as given.

    >>> demonstration_episode("t", [([1, 5], [7, 2]), ([9], [8, 2])]).loss_mask
    (0, 0, 1, 1, 0, 1, 1)
    """
    return Trajectory(task_id, f"demo/{task_id}", 0,
                      tuple(Turn(tuple(o), tuple(a), (0.0,) * len(a), "eos") for o, a in turns), reward=0.0)


def encode_demonstrations(policy: Policy, demos: Sequence[Demonstration]
                          ) -> tuple[list[list[int]], list[list[float]], list[int]]:
    """Each demonstration as (ids, loss mask, prompt length): a pair is tokenized once, an episode
    is taken as it is (``Trajectory.ids`` / ``loss_mask``: its actions only). One whose first token
    is trained (nothing before it to predict it from), or that trains no token, is a ``UserError``
    naming it."""
    rows, masks, prompt_lens = [], [], []
    for i, d in enumerate(demos):
        if isinstance(d, Trajectory):
            ids, mask, n = list(d.ids), [float(m) for m in d.loss_mask], len(d.prompt_ids)
        else:
            prompt, response = policy.encode_prompt(d[0]), policy.encode_completion(d[1])
            ids, mask, n = [*prompt, *response], [0.0] * len(prompt) + [1.0] * len(response), len(prompt)
        what = f"episode {d.task_id!r}" if isinstance(d, Trajectory) else f"prompt {d[0]!r:.40}"
        if mask and mask[0]:  # token 0 has nothing to be predicted from: it would count in the loss unscored
            raise UserError(f"demonstration {i} ({what}): no prompt token before its first trained token (an empty "
                            f"prompt and a tokenizer without BOS); the first token could not be learned")
        if not any(mask):  # a batch of only such rows reported loss 0.0, a perfect fit of nothing
            raise UserError(f"demonstration {i} ({what}): no token to learn (an episode without actions)")
        rows.append(ids)
        masks.append(mask)
        prompt_lens.append(n)
    return rows, masks, prompt_lens


def check_pack_len(rows: Sequence[Sequence[int]], demos: Sequence[Demonstration], pack_len: int | None) -> None:
    """``UserError`` naming the longest demonstration when it does not fit one packed row of
    ``pack_len`` tokens (every step draws its batch at random, so a late draw would stop the run
    midway)."""
    if pack_len is None or not rows:
        return
    at = max(range(len(rows)), key=lambda i: len(rows[i]))
    if len(rows[at]) > pack_len:
        d = demos[at]
        what = f"episode {d.task_id!r}" if isinstance(d, Trajectory) else f"prompt {d[0]!r:.40}"
        raise UserError(f"sft.pack_len: demonstration {at} ({what}) is {len(rows[at])} tokens with EOS, more than "
                        f"pack_len={pack_len} (an example is never split across rows); raise sft.pack_len to at "
                        f"least {len(rows[at])} or shorten it")


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
    demos: Sequence[Demonstration],
    params: SFTParams,
    *,
    log: Callable[[dict[str, float]], None] = lambda m: None,
    progress: Callable[[int], None] = lambda step: None,
) -> dict[str, float]:
    """Fine-tune ``policy`` in place on demonstrations (pairs or episodes). Returns the last step's metrics."""
    if not demos:
        raise ValueError("SFT needs at least one demonstration")
    rows, masks, prompt_lens = encode_demonstrations(policy, demos)
    check_pack_len(rows, demos, params.pack_len)
    model = policy.model
    model.train()
    optimizer = adamw(model.parameters(), lr=params.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine_with_warmup(params.steps, params.warmup_frac))
    gen = torch.Generator().manual_seed(params.seed)
    metrics: dict[str, float] = {}
    start = time.perf_counter()
    tokens_seen = 0
    for step in range(params.steps):
        idx = torch.randint(len(demos), (params.batch_size,), generator=gen).tolist()
        logp, mask = example_logprobs(model, [rows[i] for i in idx], [masks[i] for i in idx],
                                      pad_id=policy.tokenizer.pad_token_id, pack_len=params.pack_len,
                                      prompt_lens=[prompt_lens[i] for i in idx])  # (R, L)
        loss = sft_loss(logp, mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        tokens_seen += sum(len(rows[i]) for i in idx)
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
