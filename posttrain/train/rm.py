"""Reward model: a value head on a transformers model, trained with the Bradley–Terry pairwise loss.

    rm = make_reward_model("path/to/causal_lm")      # AutoModelForSequenceClassification, 1 label
    metrics = train_rm(rm, tokenizer, pairs, RMConfig())
    scores = score_rows(rm, prompt_ids, completion_ids, pad_id=...)   # (B,) for RLHF rewards

The head is the sequence-classification head transformers puts on the backbone (``score``, a
Linear(hidden, 1)); ``token_values`` applies it at every position (a PPO critic), ``sequence_scores``
reads it at the last real token of each right-padded row. The loop (``_pairwise.train_pairs``, shared
with DPO): tokenize pairs once, per step score chosen and rejected rows, ``bradley_terry_loss``
normalized by the step's pair count over micro-batches, clip, AdamW. Saved with ``save_pretrained`` like any transformers model, so
``posttrain.train.checkpoint`` handles it unchanged.

Not here: the RLHF reward combination (a verifier-side component calls ``score_rows``), ensembles,
reward normalization across batches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from posttrain.algo import bradley_terry_loss
from posttrain.errors import UserError
from posttrain.train._batch import collate
from posttrain.train._lora import apply_lora
from posttrain.train._pairwise import PairTraining, train_pairs
from posttrain.train.dpo import EncodedPair, PreferencePair, PromptEncoder, encode_pairs


@dataclass(frozen=True)
class RMConfig(PairTraining):
    """The rm stage: a value head trained on preference pairs with the Bradley-Terry loss (the pass over the
    pairs is DPO's too: ``PairTraining``)."""


def make_reward_model(name_or_path: str | Path, *, dtype: torch.dtype = torch.float32) -> nn.Module:
    """Load a backbone with a fresh scalar head (``AutoModelForSequenceClassification``, num_labels=1)."""
    from transformers import AutoModelForSequenceClassification

    try:
        model = AutoModelForSequenceClassification.from_pretrained(
            str(name_or_path), num_labels=1, dtype=dtype
        )
    except (OSError, ValueError) as e:
        raise UserError(f"cannot load reward model {str(name_or_path)!r}: {str(e).splitlines()[0]}") from e
    _head(model)
    return model


def _head(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = getattr(base, "score", None)
    if head is None:
        raise UserError(f"{type(base).__name__} has no 'score' head; load the model with make_reward_model")
    return base.base_model, head


def token_values(
    model: nn.Module,
    input_ids: Tensor,  # (B, T) long, right-padded
    attention_mask: Tensor,  # (B, T)
) -> Tensor:  # (B, T) head output at every position (0 on padding)
    """The value head applied to every position's last hidden state (a PPO critic's V(s_t))."""
    backbone, head = _head(model)
    hidden = backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    values = head(hidden).squeeze(-1).float()
    return values * attention_mask.to(values.dtype)


def sequence_scores(model: nn.Module, input_ids: Tensor, attention_mask: Tensor) -> Tensor:  # (B,)
    """The head's output at the last real token of each right-padded row."""
    last = attention_mask.sum(-1).long() - 1  # (B,)
    if (last < 0).any():
        raise ValueError("sequence_scores: a row has no real token")
    values = token_values(model, input_ids, attention_mask)
    return values.gather(-1, last.unsqueeze(-1)).squeeze(-1)


def score_rows(
    model: nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    *,
    pad_id: int,
) -> Tensor:  # (B,) detached scores of exactly these token ids
    """Reward-model scores of sampled (prompt, completion) token ids, for RLHF reward components."""
    rows = collate(prompt_ids, completion_ids, pad_id=pad_id)
    with torch.no_grad():
        return sequence_scores(model, rows.input_ids, rows.attention_mask)


def _pair_scores(model: nn.Module, pairs: Sequence[EncodedPair], pad_id: int) -> tuple[Tensor, Tensor]:
    prompts = [p.prompt_ids for p in pairs] * 2
    completions = [p.chosen_ids for p in pairs] + [p.rejected_ids for p in pairs]
    rows = collate(prompts, completions, pad_id=pad_id)
    s = sequence_scores(model, rows.input_ids, rows.attention_mask)
    return s[: len(pairs)], s[len(pairs) :]


def train_rm(
    model: nn.Module,
    tokenizer,
    pairs: Sequence[PreferencePair],
    cfg: RMConfig,
    *,
    encode_prompt: PromptEncoder | None = None,
    log: Callable[[dict[str, float]], None] | None = None,
) -> dict[str, float]:
    """Train the reward model in place on preference pairs; returns last-epoch means of loss,
    accuracy (chosen scored above rejected) and margin. ``encode_prompt``: how the policy encodes a
    prompt (``Policy.encode_prompt``; see ``encode_pairs``), so that the model is trained on the prompt
    ids RL later scores (``score_rows`` of sampled rollouts); plain text with BOS when None."""
    if not pairs:
        raise UserError("train_rm: no preference pairs")
    merge = cfg.lora is not None and not hasattr(model, "peft_config")
    if merge:
        model = apply_lora(model, cfg.lora, task_type="SEQ_CLS")
    encoded = encode_pairs(tokenizer, pairs, max_len=cfg.max_len, encode_prompt=encode_prompt, key=f"{cfg.section}.max_len")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def pair_losses(mi: Sequence[int]) -> tuple[Tensor, dict[str, Tensor]]:
        sc, sr = _pair_scores(model, [encoded[i] for i in mi], pad)
        return bradley_terry_loss(sc, sr), {"accuracy": (sc > sr).float(), "margin": sc - sr}

    metrics = train_pairs(model, len(encoded), cfg, pair_losses, log=log)
    if merge:
        model.merge_and_unload()
    return metrics
