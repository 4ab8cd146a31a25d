"""Sampler: token ids in, sampled token ids + their logprobs + why sampling stopped out.

``Sampler`` is the one seam between posttrain and whatever produces tokens (DESIGN.md "The next
shape"). Prompts go in as token ids and completions come back as the ids actually sampled, so
nothing is ever re-tokenized between sampling and training (../shared/reference/episodes.md §2).
Two backends pass one conformance test (tests/policy/test_sampler_conformance.py):

- ``LocalSampler`` (this module): a transformers causal LM, batched, left-padded, with the KV cache
  of ``model.generate``. The distribution sampled is ``softmax(top_p(top_k(logits / temperature)))``
  and ``Generation.logprobs`` are log-probs under exactly that distribution, gathered per step for
  the sampled token only: one ``(B, V)`` row of scores lives at a time, never a ``(B, L, V)`` tensor
  (150 GB at a 150k vocabulary, 256 x 1024).
- ``EndpointSampler`` (``_endpoint.py``): an OpenAI-compatible ``/v1/completions`` server.

Greedy (``temperature == 0``) takes the argmax; its logprobs are those of ``softmax(logits)``.
With top-k/top-p the logprobs are those of the truncated, renormalized distribution; a trainer that
scores the full ``softmax(logits / temperature)`` would then see a biased ratio — GRPO today samples
with ``top_p=1, top_k=0`` only.

How sampling stops, per row (``Generation.stop_reason``): ``"eos"`` (the EOS token, kept as the last
completion id), ``"stop"`` (a stop string appeared in the decoded completion, ``SamplingParams.stop``
and ``StopStrings`` give the exact rule; ids are kept through the token that completed it, and
``text`` is the decoding of those ids, so it contains the stop string) or ``"length"``
(``max_new_tokens``).

Randomness: ``seed`` seeds torch's global generator once per call (as ``Policy.generate`` always
did, so a run's samples are unchanged); ``seed=None`` continues the global stream.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from posttrain.errors import UserError
from posttrain.policy._sampling import Sampler, SamplingParams
from posttrain.types import Generation

__all__ = ["LocalSampler", "Sampler", "SamplingParams", "StopCache", "StopStrings", "process_logits"]


def process_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:  # (B, V) -> (B, V)
    """The scores sampled from: ``logits / temperature``, then top-k, then top-p (removed tokens -inf).

    The same order and tie rules as transformers' Temperature/TopK/TopP warpers. Greedy
    (temperature 0) returns the logits unchanged.

    >>> process_logits(torch.tensor([[0.0, 1.0, 2.0]]), SamplingParams(temperature=2.0, top_k=2)).tolist()
    [[-inf, 0.5, 1.0]]
    """
    if params.temperature == 0:
        return logits
    scores = logits / params.temperature
    if params.top_k:
        kth = torch.topk(scores, min(params.top_k, scores.shape[-1])).values[..., -1:]  # (B, 1)
        scores = scores.masked_fill(scores < kth, -math.inf)
    if params.top_p < 1.0:
        ascending, order = torch.sort(scores, dim=-1)
        cum = ascending.softmax(dim=-1).cumsum(dim=-1)
        drop = cum <= 1 - params.top_p
        drop[..., -1] = False  # the most likely token always stays
        scores = scores.masked_fill(drop.scatter(-1, order, drop), -math.inf)
    return scores


class StopStrings:
    """The stop-string rule of ``SamplingParams.stop`` for one tokenizer: ``hit(ids)`` is whether
    ``tokenizer.decode(ids, skip_special_tokens=True)`` -- the completion's ``Generation.text`` --
    contains a stop string. Called after each token, so the first hit is the token that completed it.

    Decoding the whole completion at every token would cost its length squared; ``hit`` decodes the
    last ``4 * len(longest stop) + 8`` tokens that the decoding keeps (``skipped``: the ids it drops,
    special tokens, are passed over however many there are), and confirms a hit on the whole
    decoding. A stop string of c characters is at most 4c bytes, each kept token gives at least
    one, and a string a token completes ends in that token: the window holds it. Not covered: a
    tokenizer whose kept tokens decode to nothing, or whose decoding of a token depends on text
    more than the window before it.
    """

    def __init__(self, tokenizer: Any, stop: tuple[str, ...], skipped: frozenset[int]) -> None:
        self.tokenizer, self.stop, self.skipped = tokenizer, stop, skipped
        self.window = 4 * max(len(s) for s in stop) + 8

    def hit(self, ids: Sequence[int]) -> bool:
        tail: list[int] = []
        for t in reversed(ids):
            if t not in self.skipped:
                tail.append(t)
                if len(tail) == self.window:
                    break
        if not any(s in self.tokenizer.decode(tail[::-1], skip_special_tokens=True) for s in self.stop):
            return False
        if len(tail) < self.window:
            return True  # the window was the whole completion
        text = self.tokenizer.decode(list(ids), skip_special_tokens=True)
        return any(s in text for s in self.stop)


class StopCache:
    """A sampler's ``StopStrings`` per stop tuple, over the ids its tokenizer's decoding skips (found
    once: the special and added tokens that decode to nothing with ``skip_special_tokens=True``)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.skipped: frozenset[int] | None = None
        self.last: StopStrings | None = None

    def get(self, stop: tuple[str, ...]) -> StopStrings | None:
        """None where there are no stop strings."""
        if not stop:
            return None
        if self.skipped is None:
            tok = self.tokenizer
            found = set(getattr(tok, "all_special_ids", None) or ()) | set(getattr(tok, "added_tokens_decoder", None) or ())
            self.skipped = frozenset(i for i in found if tok.decode([i], skip_special_tokens=True) == "")
        if self.last is None or self.last.stop != stop:
            self.last = StopStrings(self.tokenizer, stop, self.skipped)
        return self.last


class _StepLog:
    """Shared state of one ``model.generate`` call: the processed scores of the current step, the
    logprob of each sampled token, and the step at which a row's completion hit a stop string."""

    def __init__(self, params: SamplingParams, width: int, eos: int, stop: StopStrings | None) -> None:
        self.params, self.width, self.eos, self.stop = params, width, eos, stop
        self.logp: torch.Tensor | None = None  # (B, V) log-softmax of the current step's scores
        self.picked: list[torch.Tensor] = []  # one (B,) per step
        self.stopped_at: dict[int, int] = {}  # row -> index of the token that completed a stop string
        self.rows: list[list[int]] = []  # each row's completion ids so far (stop strings only)
        self.ended: set[int] = set()  # rows that sampled EOS (generate pads them from then on)


class _Process:
    """Logits processor: the only one in the list (generate is asked for no warpers of its own)."""

    def __init__(self, log: _StepLog) -> None:
        self.log = log

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores = process_logits(scores, self.log.params)
        self.log.logp = torch.log_softmax(scores, dim=-1)
        return scores


class _Record:
    """Stopping criterion, called right after a token is sampled: gather its logprob, check stop strings."""

    def __init__(self, log: _StepLog) -> None:
        self.log = log

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        log = self.log
        log.picked.append(log.logp.gather(-1, input_ids[:, -1:]).squeeze(-1))  # (B,)
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        if log.stop is not None:
            step = input_ids.shape[1] - log.width - 1
            if not log.rows:
                log.rows = [[] for _ in range(input_ids.shape[0])]
            for row, t in enumerate(input_ids[:, -1].tolist()):
                if row in log.stopped_at:
                    done[row] = True
                    continue
                if row in log.ended:
                    continue
                if t == log.eos:
                    log.ended.add(row)
                    continue
                log.rows[row].append(t)
                if log.stop.hit(log.rows[row]):
                    log.stopped_at[row] = step
                    done[row] = True
        return done


@contextmanager
def _own_generation_config(model: torch.nn.Module, config: Any) -> Iterator[None]:
    """``config`` as the generation config of every transformers model in ``model`` (a peft model's
    base too) for the duration: ``generate`` fills each field that the config it is given leaves None
    from the model's own ``generation_config`` (transformers >= 5: a checkpoint's repetition_penalty,
    min_p, suppress_tokens, stop_strings, ...). A repetition penalty or suppressed tokens would change
    the logprobs recorded; a min_p or top_h, applied after our processor, would change the tokens
    sampled and not the logprobs recorded for them (an off-policy sample)."""
    from transformers import GenerationMixin

    owners = [m for m in model.modules() if isinstance(m, GenerationMixin)]
    saved = [m.generation_config for m in owners]
    for m in owners:
        m.generation_config = config
    try:
        yield
    finally:
        for m, own in zip(owners, saved, strict=True):
            m.generation_config = own


class LocalSampler:
    """A transformers causal LM as a ``Sampler``.

    >>> # sampler = LocalSampler(policy.model, policy.tokenizer)
    >>> # [g] = sampler.generate([[1, 17, 18]], SamplingParams(temperature=0.7, max_new_tokens=8, seed=0))
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, batch_size: int = 256) -> None:
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        if tokenizer.eos_token_id is None:
            raise UserError("sampling: the tokenizer has no eos token; completions could never stop")
        self.eos_token_id = int(tokenizer.eos_token_id)
        pad = tokenizer.pad_token_id
        self.pad_token_id = self.eos_token_id if pad is None else int(pad)
        self._stops = StopCache(tokenizer)

    @torch.no_grad()
    def generate(self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        if any(len(p) == 0 for p in prompt_ids):
            raise UserError("sampling: every prompt needs at least one token, got an empty one")
        if params.seed is not None:
            torch.manual_seed(params.seed)
        out: list[Generation] = []
        for start in range(0, len(prompt_ids), self.batch_size):
            out += self._batch([list(p) for p in prompt_ids[start : start + self.batch_size]], params)
        return out

    def _batch(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)  # (B, P) left-padded
        attention = torch.zeros_like(input_ids)
        for i, ids in enumerate(prompts):
            input_ids[i, width - len(ids) :] = torch.tensor(ids)
            attention[i, width - len(ids) :] = 1
        device = next(self.model.parameters()).device
        log = _StepLog(params, width, self.eos_token_id, self._stops.get(params.stop))
        greedy = params.temperature == 0
        # Our processor is the whole distribution: no top_k of 50, and (_own_generation_config) no
        # repetition penalty or min_p of the checkpoint's generation_config.json.
        config = GenerationConfig(
            do_sample=not greedy, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=params.max_new_tokens,
            eos_token_id=self.eos_token_id, pad_token_id=self.pad_token_id,
        )
        was_training = self.model.training
        self.model.eval()
        try:
            with _own_generation_config(self.model, config):
                sequences = self.model.generate(
                    input_ids=input_ids.to(device), attention_mask=attention.to(device), generation_config=config,
                    logits_processor=LogitsProcessorList([_Process(log)]),
                    stopping_criteria=StoppingCriteriaList([_Record(log)]),
                )
        finally:
            self.model.train(was_training)
        new = sequences[:, width:].cpu()  # (B, L)
        logp = torch.stack(log.picked, dim=1)[:, : new.shape[1]].float().cpu()  # (B, L); extra undone steps cut
        return [self._one(prompts[i], new[i].tolist(), logp[i], log.stopped_at.get(i)) for i in range(len(prompts))]

    def _one(self, prompt: list[int], row: list[int], logp: torch.Tensor, stop_step: int | None) -> Generation:
        eos = row.index(self.eos_token_id) if self.eos_token_id in row else None
        if stop_step is not None and (eos is None or stop_step < eos):
            cut, reason = stop_step + 1, "stop"
        elif eos is not None:
            cut, reason = eos + 1, "eos"
        else:
            cut, reason = len(row), "length"
        ids = tuple(row[:cut])
        return Generation(
            prompt_ids=tuple(prompt),
            completion_ids=ids,
            logprobs=tuple(logp[:cut].tolist()),
            text=self.tokenizer.decode(list(ids), skip_special_tokens=True),
            stop_reason=reason,
        )
