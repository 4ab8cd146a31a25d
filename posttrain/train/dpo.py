"""Direct preference optimization: one readable loop over (prompt, chosen, rejected) pairs.

    metrics = train_dpo(model, ref_model, tokenizer, pairs, DPOConfig(beta=0.1))

1. tokenize each pair once, never again: the prompt as the policy encodes it for sampling
   (``encode_prompt``: ``Policy.encode_prompt``, chat template included; by default plain text with
   BOS, as TRL), completions end with EOS;
2. reference sequence log-probs, once, without gradient and in eval mode (``reference_logps``:
   ``ref_model``; with LoRA and no ``ref_model``, the same model with its adapters disabled);
3. per optimizer step (``_pairwise.train_pairs``, the loop the reward model shares): policy
   sequence log-probs of chosen and rejected rows, the preference loss
   (``posttrain.algo.PREFERENCE_LOSSES``: sigmoid DPO or IPO), backward over micro-batches
   normalized by the step's pair count (micro-batch invariant), clip, AdamW step;
4. metrics: loss, implicit-reward accuracy and margin.

Sequence log-prob = sum over completion tokens (IPO: mean, as TRL). Matches TRL's DPOTrainer
sigmoid loss to 1e-6 (tests/algo/test_trl_golden.py). The policy is scored in train mode, so a
model's own dropout applies to it, as in SFT and RL (TRL's ``DPOConfig.disable_dropout`` turns it
off; the Qwen2/Llama configs used here have none). Not here: multi-GPU, reference-free
variants (SimPO/ORPO), padding-free packing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Annotated

import torch
from torch import Tensor, nn

from posttrain.algo import PREFERENCE_LOSSES, PreferenceLossName, dpo_rewards
from posttrain.config import LearningRate, PositiveFloat, Range
from posttrain.errors import ConfigError, UserError
from posttrain.train._batch import collate
from posttrain.train._logprobs import token_logprobs
from posttrain.train._lora import apply_lora
from posttrain.train._pairwise import PairTraining, train_pairs


@dataclass(frozen=True)
class PreferencePair:
    """One preference: the same prompt, a preferred and a dispreferred completion (text)."""

    prompt: str
    chosen: str
    rejected: str


@dataclass(frozen=True)
class DPOConfig(PairTraining):
    """The dpo stage: preference optimization against a frozen reference (the pass over the pairs is the
    reward model's too: ``PairTraining``), and its loss."""

    lr: LearningRate = 5e-6
    """AdamW learning rate (constant)."""
    beta: PositiveFloat = 0.1
    """Strength of the implicit KL to the reference (DPO beta)."""
    loss: PreferenceLossName = "sigmoid"
    """sigmoid (DPO) or ipo."""
    label_smoothing: Annotated[float, Range(ge=0, lt=0.5)] = 0.0
    """cDPO: assumed probability that a preference label is flipped (sigmoid only)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss not in PREFERENCE_LOSSES:
            raise ConfigError(
                f"dpo.loss: unknown value {self.loss!r}; expected one of {list(PREFERENCE_LOSSES)}"
            )
        if self.beta <= 0:
            raise ConfigError(f"dpo.beta: must be > 0, got {self.beta}")
        if not 0.0 <= self.label_smoothing < 0.5:
            raise ConfigError(f"dpo.label_smoothing: expected [0, 0.5), got {self.label_smoothing}")
        if self.label_smoothing and self.loss != "sigmoid":  # the loss itself raises, after the reference pass
            raise ConfigError(f"dpo.label_smoothing: cDPO is defined for loss sigmoid only, not {self.loss!r}; set it to 0")


@dataclass(frozen=True)
class EncodedPair:
    prompt_ids: tuple[int, ...]
    chosen_ids: tuple[int, ...]
    rejected_ids: tuple[int, ...]


PromptEncoder = Callable[[str], Sequence[int]]
"""Prompt text -> the ids the policy samples after (``Policy.encode_prompt``)."""


def encode_pairs(tokenizer, pairs: Sequence[PreferencePair], *, max_len: int,
                 encode_prompt: PromptEncoder | None = None, key: str = "max_len") -> list[EncodedPair]:
    """Tokenize once: the prompt with ``encode_prompt`` (None: plain text, + BOS when the tokenizer
    has one), completions + EOS. A pair whose chosen and rejected are the same tokens is a
    ``UserError`` naming it: it carries no preference (DPO and Bradley-Terry losses log 2 with zero
    gradient) yet counts in its step's normalization and as a miss in the accuracy; so is one whose
    prompt encodes to no tokens (its first completion token could not be scored). ``key``: the
    recipe key of ``max_len`` that a too-long pair's error names (``dpo.max_len``).

    Pass the sampling policy's ``encode_prompt`` so that a pair is scored after the very ids its
    completions were sampled from (a chat run's prompts are the chat template's rendering).

    >>> from posttrain.policy import Policy, build_char_tokenizer
    >>> tok = build_char_tokenizer()
    >>> [e] = encode_pairs(tok, [PreferencePair("1+1=", "2", "3")], max_len=16,
    ...                    encode_prompt=Policy(None, tok).encode_prompt)
    >>> tok.decode(e.prompt_ids), tok.decode(e.chosen_ids), tok.decode(e.rejected_ids)
    ('<bos>1+1=', '2<eos>', '3<eos>')
    """
    out = []
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    if eos is None:
        raise UserError("the tokenizer has no eos token; completions must end with one")
    for i, p in enumerate(pairs):
        if encode_prompt is not None:
            prompt = list(encode_prompt(p.prompt))
        else:
            prompt = list(tokenizer(p.prompt, add_special_tokens=False)["input_ids"])
            if bos is not None:
                prompt = [bos, *prompt]
        if not prompt:  # token 0 has nothing to be predicted from: the first completion token would go unscored
            raise UserError(f"pair {i}: the prompt {p.prompt!r:.40} encodes to no tokens and the tokenizer has no "
                            f"BOS; the first completion token could not be scored")
        chosen = [*tokenizer(p.chosen, add_special_tokens=False)["input_ids"], eos]
        rejected = [*tokenizer(p.rejected, add_special_tokens=False)["input_ids"], eos]
        if chosen == rejected:  # log 2 and no gradient: it only dilutes its step and reads as a wrong guess
            raise UserError(f"pair {i} (prompt {p.prompt!r:.40}): chosen and rejected are the same {len(chosen)} "
                            f"tokens; a pair must prefer one completion over a different one")
        if len(prompt) + max(len(chosen), len(rejected)) > max_len:
            raise UserError(f"pair {i} (prompt {p.prompt!r:.40}): {len(prompt)} prompt + {max(len(chosen), len(rejected))} "
                            f"completion tokens > {key}={max_len}; raise {key} or shorten the pair")
        out.append(EncodedPair(tuple(prompt), tuple(chosen), tuple(rejected)))
    return out


def sequence_logps(
    model: nn.Module, pairs: Sequence[EncodedPair], pad_id: int, *, average: bool = False
) -> tuple[Tensor, Tensor]:  # chosen (P,), rejected (P,)
    """Sum (``average``: mean) of completion-token log-probs of each pair's chosen and rejected rows."""
    prompts = [p.prompt_ids for p in pairs] * 2
    completions = [p.chosen_ids for p in pairs] + [p.rejected_ids for p in pairs]
    rows = collate(prompts, completions, pad_id=pad_id)
    pair = torch.arange(len(pairs), device=rows.input_ids.device).repeat(2)  # chosen and rejected share a prompt
    logp = token_logprobs(model, rows.input_ids, rows.attention_mask, loss_mask=rows.loss_mask, groups=pair)
    seq = (logp * rows.loss_mask).sum(-1)
    if average:
        seq = seq / rows.loss_mask.sum(-1)
    n = len(pairs)
    return seq[:n], seq[n:]


def _reference(model: nn.Module, ref_model: nn.Module | None) -> Callable[[], AbstractContextManager]:
    if ref_model is not None:
        return nullcontext
    return model.disable_adapter  # LoRA: the base weights are the reference


def reference_logps(
    model: nn.Module,
    ref_model: nn.Module | None,
    pairs: Sequence[EncodedPair],
    pad_id: int,
    *,
    micro_batch_size: int,
    average: bool = False,
) -> tuple[Tensor, Tensor]:  # chosen (P,), rejected (P,), no gradient
    """The reference's sequence log-probs (``sequence_logps``): ``ref_model``, or with None (LoRA)
    ``model`` with its adapters disabled. Always in eval mode, whatever mode the network came in
    (restored after): a reference scored with dropout on is noise the loss then chases
    (``model.train()`` left a LoRA run's reference off by up to 0.08 nats a pair at dropout 0.5)."""
    net = ref_model if ref_model is not None else model
    was_training = net.training
    net.eval()
    chosen, rejected = [], []
    try:
        with torch.no_grad(), _reference(model, ref_model)():
            for s in range(0, len(pairs), micro_batch_size):
                c, r = sequence_logps(net, pairs[s : s + micro_batch_size], pad_id, average=average)
                chosen.append(c)
                rejected.append(r)
    finally:
        net.train(was_training)
    return torch.cat(chosen), torch.cat(rejected)


def train_dpo(
    model: nn.Module,
    ref_model: nn.Module | None,
    tokenizer,
    pairs: Sequence[PreferencePair],
    cfg: DPOConfig,
    *,
    encode_prompt: PromptEncoder | None = None,
    log: Callable[[dict[str, float]], None] | None = None,
) -> dict[str, float]:
    """Train ``model`` in place with DPO/IPO; returns the metrics of the last epoch (means over steps).

    ``encode_prompt``: how the pairs' prompts were encoded when their completions were sampled
    (``Policy.encode_prompt``; ``encode_pairs``), plain text with BOS when None.

    ``ref_model`` None: a frozen copy of ``model`` (or, with LoRA, the adapter-free base). With
    ``cfg.lora`` and a plain model, adapters are added, trained, then merged back into ``model``'s
    weights (``merge_and_unload``), so the caller keeps an ordinary model. Pass a model already
    wrapped by ``apply_lora`` to keep the adapters separate instead.
    """
    if not pairs:
        raise UserError("train_dpo: no preference pairs")
    merge = cfg.lora is not None and not hasattr(model, "peft_config")
    if merge:
        model = apply_lora(model, cfg.lora)
    if ref_model is None and not hasattr(model, "peft_config"):
        ref_model = copy.deepcopy(model)
    if ref_model is not None:
        ref_model.eval().requires_grad_(False)
    encoded = encode_pairs(tokenizer, pairs, max_len=cfg.max_len, encode_prompt=encode_prompt, key=f"{cfg.section}.max_len")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    average = cfg.loss == "ipo"
    ref_chosen, ref_rejected = reference_logps(model, ref_model, encoded, pad, micro_batch_size=cfg.micro_batch_size,
                                               average=average)
    loss_fn = PREFERENCE_LOSSES[cfg.loss]

    def pair_losses(mi: Sequence[int]) -> tuple[Tensor, dict[str, Tensor]]:
        pc, pr = sequence_logps(model, [encoded[i] for i in mi], pad, average=average)
        rc, rr = ref_chosen[mi], ref_rejected[mi]
        losses = loss_fn(pc, pr, rc, rr, beta=cfg.beta, label_smoothing=cfg.label_smoothing)
        wc, wr = dpo_rewards(pc, pr, rc, rr, beta=cfg.beta)
        return losses, {"reward_accuracy": (wc > wr).float(), "reward_margin": wc - wr}

    epoch_metrics = train_pairs(model, len(encoded), cfg, pair_losses, log=log)
    if merge:
        model.merge_and_unload()  # writes W + (alpha/r) B A into the caller's modules
    return epoch_metrics
