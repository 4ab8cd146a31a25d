"""FastSampler: a lean decoding loop over a transformers causal LM, with prefix sharing, rows that
leave the batch when they finish, and exact speculative sampling in the tail.

Why not ``model.generate`` (``LocalSampler``) or transformers' continuous batching: measured on
this machine (2 cores, the embedded default, 16 prompts x 8 samples x 64 tokens), ``generate``
gives 17.8k tokens/s and ``generate_batch`` (paged attention, return_logprobs) 3.4k-5.3k: its
scheduler's per-step overhead dominates on a CPU. This loop keeps what pays:

- **prefix sharing**: the KV of each distinct prompt is computed once (a GRPO group's G rows share
  it) and copied to its rows (``DynamicCache.batch_select_indices``);
- **rows leave the batch**: a finished row is dropped from the KV cache, so the tail of a batch
  costs what its running rows cost (``generate`` keeps computing finished rows until the last one);
- **speculative sampling** (``_spec.py``): drafts fed in one forward pass per step and accepted by
  the exact rule -- prompt-lookup drafts once at most ``SpecConfig.tail_rows`` rows still run, and
  a previous rollout of the prompt as the draft (rollout reuse, ``previous=``) at any batch size.
  Rejected draft positions stay in the cache as holes masked out of attention (position ids are
  explicit), so rows of one batch may accept different numbers of drafts. A sliding window counts
  cache slots, holes included: on such a model drafts are fed only while the cache, every token
  still to come included, stays inside the window (``attention_window``).

What it returns is what ``LocalSampler`` returns (``Generation``: ids, logprobs under the sampling
distribution ``softmax(top_p(top_k(logits / T)))``, text, stop reason; tests/policy's conformance
test runs on it). Logits are computed for the fed positions only (``logits_to_keep=1`` at the
prompt): never a (batch, length, vocab) tensor of a whole sequence. The weights are the trainer's
own module in the same process (no copy); bf16 on a GPU works as is (scores are cast to fp32).

Randomness: ``seed`` seeds torch's global generator once per call, as ``LocalSampler``; the samples
differ from ``LocalSampler``'s for one seed (another loop draws in another order), the distribution
does not.

The forward passes are ``_lean.py``'s: for the Llama family (Llama, Qwen2, Mistral) a lean forward
on the module's own parameters with a preallocated KV cache (1.70x ``LocalSampler`` per CPU-second
on the embedded default, 8 x 8 x 64), else transformers' own with a ``DynamicCache``.
``ReuseSampler`` remembers each prompt's completions and drafts the next sampling of it with them.

On a GPU, a batch with nothing to draft decodes with fixed shapes and replays one CUDA graph per
step (``_lean.StaticStep``): there a decode step of the eager loop is mostly kernel launches. Not
here: paged attention (a GPU engine is vLLM, ``_vllm.py``), a draft model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from posttrain.errors import UserError
from posttrain.policy._lean import HFForward, make_forward
from posttrain.policy._sampler import Generation, SamplingParams, StopCache, process_logits
from posttrain.policy._spec import SpecConfig, ngram_draft, reuse_draft, verify
from posttrain.types import StopReason

STATIC_RESERVE = 1024
"""Completion positions a static decode reserves in its KV cache up front (doubled as needed)."""

REUSE_START = 8
"""Rollout reuse verifies this many tokens of a previous rollout first, then twice as many after each
step that accepted them all (up to ``SpecConfig.reuse_len``): a policy that moved away from its old
rollouts costs a few wasted positions per row, not a whole rollout's."""


@dataclass
class SpecStats:
    """Counters of the speculative path, summed over calls (``FastSampler.stats``)."""

    steps: int = 0
    """Forward passes of the decoding loop (prefill excluded)."""
    drafted: int = 0
    """Draft tokens proposed (n-gram and reuse)."""
    accepted: int = 0
    """Draft tokens accepted."""
    reuse_drafted: int = 0
    reuse_accepted: int = 0
    tokens: int = 0
    """Completion tokens returned."""

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else float("nan")


@dataclass
class _Row:
    index: int  # position in the call's output
    slot: int  # position in its batch (its row of each step's uniforms)
    prompt: list[int]
    previous: list[int] | None  # a previous completion of this prompt (rollout reuse), or None
    ids: list[int] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    reason: StopReason | None = None
    reuse_k: int = REUSE_START  # previous-rollout tokens verified next: doubles while all are accepted


class FastSampler:
    """A transformers causal LM as a fast ``Sampler`` (module docstring).

    ``speculation``: a ``SpecConfig`` to draft with (None: no n-gram drafting; rollout reuse still
    verifies the ``previous`` completions given to ``generate``). ``lean``: the Llama family's lean
    forward where it applies (``_lean.make_forward``), else transformers' forward. ``static``: decode
    with every shape fixed (``_lean.StaticStep``: a CUDA graph replayed each step on a GPU) where the
    lean forward applies and nothing is drafted; None (the default): on CUDA only; False: never.

    >>> # sampler = FastSampler(policy.model, policy.tokenizer, speculation=SpecConfig())
    >>> # gens = sampler.generate(prompt_ids, SamplingParams(max_new_tokens=64, seed=0))
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, batch_size: int = 256,
                 speculation: SpecConfig | None = None, lean: bool = True, static: bool | None = None) -> None:
        self.model, self.tokenizer, self.batch_size, self.spec = model, tokenizer, batch_size, speculation
        self.lean, self.static = lean, static
        if tokenizer.eos_token_id is None:
            raise UserError("sampling: the tokenizer has no eos token; completions could never stop")
        self.eos_token_id = int(tokenizer.eos_token_id)
        pad = tokenizer.pad_token_id
        self.pad_token_id = self.eos_token_id if pad is None else int(pad)
        self.stats = SpecStats()
        self._stops = StopCache(tokenizer)
        self.reuse_cap = speculation.reuse_len if speculation else 64
        """Most previous-rollout tokens verified per row and step (``SpecConfig.reuse_len``)."""
        self.window = attention_window(model)
        """The model's smallest attention window (None: every layer sees every earlier token)."""

    @torch.no_grad()
    def generate(self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams, *,
                 previous: Sequence[Sequence[int] | None] | None = None) -> list[Generation]:
        """One ``Generation`` per prompt, in order. ``previous[i]``: an earlier completion of prompt i
        (its ids) to verify as a draft (rollout reuse), or None."""
        if any(len(p) == 0 for p in prompt_ids):
            raise UserError("sampling: every prompt needs at least one token, got an empty one")
        if previous is not None and len(previous) != len(prompt_ids):
            raise UserError(f"sampling: {len(previous)} previous completions for {len(prompt_ids)} prompts")
        if params.seed is not None:
            torch.manual_seed(params.seed)
        rows = [_Row(i, i % self.batch_size, list(p), None if previous is None or previous[i] is None else list(previous[i]))
                for i, p in enumerate(prompt_ids)]
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(rows), self.batch_size):
                self._batch(rows[start : start + self.batch_size], params)
        finally:
            self.model.train(was_training)
        return [self._generation(r) for r in rows]

    # --- the loop

    def _batch(self, rows: list[_Row], params: SamplingParams) -> None:
        device = next(self.model.parameters()).device
        greedy = params.temperature == 0
        # prefill: each distinct prompt once, left-padded
        distinct: dict[tuple[int, ...], int] = {}
        which = [distinct.setdefault(tuple(r.prompt), len(distinct)) for r in rows]
        prompts = list(distinct)
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for u, p in enumerate(prompts):
            ids[u, width - len(p) :] = torch.tensor(p)
            mask[u, width - len(p) :] = 1
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        fwd = make_forward(self.model) if self.lean else HFForward(self.model)
        last = fwd.prefill(ids, mask, positions)  # (U, V)
        for r in rows:  # a token the model cannot emit is never accepted: a previous rollout ends before it
            if r.previous:
                r.previous = r.previous[: next((j for j, t in enumerate(r.previous) if not 0 <= t < last.shape[-1]),
                                               len(r.previous))]
        sel = torch.tensor(which, dtype=torch.long, device=device)
        fwd.select(sel)
        mask = mask[sel]  # (B, T) 1 where the cache holds a real token
        pos = torch.tensor([len(r.prompt) for r in rows], dtype=torch.long, device=device)  # next position id
        logp = self._logp(last[sel], params)  # (B, V)
        # the first token: the prefill's distribution, with the first reuse draft token verified
        active = list(rows)
        first = [self._drafts(r, 1, reuse_only=True) for r in active]
        n1 = torch.tensor([len(d) for d in first], dtype=torch.long, device=device)
        d1 = torch.tensor([d or [self.pad_token_id] for d in first], dtype=torch.long, device=device)  # (B, 1)
        acc, nxt = verify(torch.stack([logp, logp], 1), d1, n1, self._uniforms(len(rows), device)[:, :2],
                          greedy=greedy)
        tok = torch.where(acc > 0, d1[:, 0], nxt)
        self._count(first, acc.tolist(), reuse=[True] * len(active))
        self._emit(active, [[t] for t in tok.tolist()], [[v] for v in logp.gather(-1, tok[:, None])[:, 0].tolist()],
                   params)
        pending = tok
        static = self._static(fwd, rows, device)
        if static:
            reserve = width + min(params.max_new_tokens, STATIC_RESERVE)
            self._static_loop(fwd.static_step(reserve, mask, graph=device.type == "cuda"),
                              active, pending, pos, params)
            return
        while True:
            keep = [k for k, r in enumerate(active) if r.reason is None]
            if not keep:
                return
            # finished rows leave the batch once they are an eighth of it (each leave copies the cache)
            if len(active) - len(keep) >= max(1, len(active) // 8):
                idx = torch.tensor(keep, dtype=torch.long, device=device)
                fwd.select(idx)
                mask, pos, pending = mask[idx], pos[idx], pending[idx]
                active = [active[k] for k in keep]
            drafts, is_reuse = [], []
            tail = self.spec is not None and self.spec.ngram and len(active) <= self.spec.tail_rows
            slack = self._window_slack(mask.shape[1], active, params)
            for r in active:
                room = params.max_new_tokens - len(r.ids) - 1  # the step also samples one token of its own
                room = room if slack is None else min(room, slack)
                d = self._drafts(r, room, reuse_only=not tail) if room > 0 and r.reason is None else []
                drafts.append(d)
                is_reuse.append(bool(r.previous) and reuse_draft(r.ids, r.previous, 1) != [])
            k = max(len(d) for d in drafts)
            if k == 0:
                fed = pending[:, None]
            else:
                fed = torch.tensor([[self.pad_token_id] + d + [self.pad_token_id] * (k - len(d)) for d in drafts],
                                   dtype=torch.long, device=device)
                fed[:, 0] = pending
            step_pos = pos[:, None] + torch.arange(k + 1, device=device)[None, :]
            mask = torch.cat([mask, torch.ones_like(fed)], 1)
            logp = self._logp(fwd.step(fed, mask, step_pos), params)  # (B, K+1, V)
            n_draft = torch.tensor([len(d) for d in drafts], dtype=torch.long, device=device)
            u = self._uniforms(len(rows), device)[[r.slot for r in active]]  # each row its own draws
            assert k < u.shape[1], "a draft's uniform would also sample the next token"
            acc, nxt = verify(logp, fed[:, 1:], n_draft, torch.cat([u[:, :k], u[:, -1:]], 1), greedy=greedy)
            self.stats.steps += 1
            acc_l = acc.tolist()
            self._count(drafts, acc_l, reuse=is_reuse)
            # positions after the accepted drafts (rejected drafts, padding) become holes
            valid = torch.arange(k + 1, device=device)[None, :] <= acc[:, None]
            mask[:, -(k + 1) :] = valid.long()
            pos = pos + 1 + acc
            lp_fed = logp[:, :k].gather(-1, fed[:, 1:, None]).squeeze(-1) if k else None  # (B, K)
            lp_next = logp[torch.arange(len(active), device=device), acc].gather(-1, nxt[:, None])[:, 0]
            new_ids, new_lp = [], []
            nxt_l, lp_next_l = nxt.tolist(), lp_next.tolist()
            lp_fed_l = lp_fed.tolist() if lp_fed is not None else None
            for i, (d, a) in enumerate(zip(drafts, acc_l, strict=True)):
                if is_reuse[i] and d and a == len(d):
                    active[i].reuse_k = min(2 * active[i].reuse_k, self.reuse_cap)
                new_ids.append([*d[:a], nxt_l[i]])
                new_lp.append([*(lp_fed_l[i][:a] if a else []), lp_next_l[i]])
            self._emit(active, new_ids, new_lp, params)
            pending = nxt

    def _window_slack(self, slots: int, rows: Sequence[_Row], params: SamplingParams) -> int | None:
        """Most drafts a row may be fed this step on a windowed model (None: any). A rejected draft
        leaves a hole in the cache and transformers masks a window by cache slot, so a hole inside
        the window would push an earlier token out of it: drafts are fed only while the cache,
        holes and every token still to come included, stays shorter than the window."""
        if self.window is None:
            return None
        to_come = max((params.max_new_tokens - len(r.ids) for r in rows if r.reason is None), default=0)
        return self.window - 1 - slots - to_come

    def _static(self, fwd: Any, rows: Sequence[_Row], device: torch.device) -> bool:
        """Whether this batch decodes with fixed shapes: the lean forward, nothing to draft (no
        speculation, no previous rollouts), and ``static`` asked for (None: on CUDA)."""
        wanted = device.type == "cuda" if self.static is None else self.static
        return wanted and not isinstance(fwd, HFForward) and self.spec is None and all(not r.previous for r in rows)

    def _static_loop(self, step: Any, rows: list[_Row], pending: Tensor, pos: Tensor, params: SamplingParams) -> None:
        """The decode loop on a ``StaticStep``: one token per row a step, every row kept in the batch
        (a finished row is computed and ignored), each row's uniforms drawn as the dynamic loop draws
        them (``_uniforms``: by step, never by which rows still run)."""
        greedy = params.temperature == 0
        no_draft = torch.zeros(len(rows), dtype=torch.long, device=pos.device)
        empty = pending.new_zeros(len(rows), 0)
        while any(r.reason is None for r in rows):
            logp = self._logp(step(pending, pos), params)[:, None]  # (B, 1, V)
            u = self._uniforms(len(rows), pos.device)
            _, nxt = verify(logp, empty, no_draft, u[:, -1:], greedy=greedy)
            self.stats.steps += 1
            lp_next = logp[:, 0].gather(-1, nxt[:, None])[:, 0]
            pos = pos + 1
            self._emit(rows, [[t] for t in nxt.tolist()], [[v] for v in lp_next.tolist()], params)
            pending = nxt

    def _uniforms(self, n: int, device: torch.device) -> Tensor:  # (n, R)
        """One step's uniforms for every row the batch started with, whether it still runs or not: a
        row's draws depend on its own step count only, never on which other rows have finished."""
        most = 1 + max(self.spec.draft_len if self.spec else 0, self.reuse_cap)
        return torch.rand(n, most + 1).to(device)

    def _logp(self, logits: Tensor, params: SamplingParams) -> Tensor:  # (..., V) -> (..., V) fp32
        shape = logits.shape
        scores = process_logits(logits.reshape(-1, shape[-1]).float(), params)
        return torch.log_softmax(scores, dim=-1).reshape(shape)

    def _drafts(self, r: _Row, room: int, *, reuse_only: bool) -> list[int]:
        """Reuse first (while the row agrees with its previous rollout), else n-gram drafting."""
        if r.previous:
            # never past reuse_len (REUSE_START may exceed it): a draft j needs its own uniform, apart
            # from the one that samples the next token (_uniforms has 1 + reuse_len + 1 a row)
            d = reuse_draft(r.ids, r.previous, min(room, r.reuse_k, self.reuse_cap))
            if d or reuse_only:
                return d
        if reuse_only or self.spec is None or not r.ids:
            return []
        return ngram_draft([*r.prompt, *r.ids], min(room, self.spec.draft_len), max_ngram=self.spec.max_ngram)

    def _count(self, drafts: Sequence[Sequence[int]], accepted: Sequence[int], *, reuse: Sequence[bool]) -> None:
        for d, a, re in zip(drafts, accepted, reuse, strict=True):
            self.stats.drafted += len(d)
            self.stats.accepted += a
            if re:
                self.stats.reuse_drafted += len(d)
                self.stats.reuse_accepted += a

    def _emit(self, rows: Sequence[_Row], ids: Sequence[Sequence[int]], logp: Sequence[Sequence[float]],
              params: SamplingParams) -> None:
        """Append each row's new tokens one by one, stopping it at EOS, a stop string (``StopStrings``:
        the rule and the checks ``LocalSampler`` has) or the length cap."""
        stop = self._stops.get(params.stop)
        for r, new, lps in zip(rows, ids, logp, strict=True):
            if r.reason is not None:  # finished, still in the batch until enough others finish
                continue
            for t, lp in zip(new, lps, strict=True):
                r.ids.append(t)
                r.logp.append(lp)
                if t == self.eos_token_id:
                    r.reason = "eos"
                elif stop is not None and stop.hit(r.ids):
                    r.reason = "stop"
                elif len(r.ids) >= params.max_new_tokens:
                    r.reason = "length"
                if r.reason is not None:
                    self.stats.tokens += len(r.ids)
                    break

    def _generation(self, r: _Row) -> Generation:
        assert r.reason is not None
        return Generation(prompt_ids=tuple(r.prompt), completion_ids=tuple(r.ids), logprobs=tuple(r.logp),
                          text=self.tokenizer.decode(r.ids, skip_special_tokens=True), stop_reason=r.reason)


def attention_window(model: torch.nn.Module) -> int | None:
    """The smallest number of recent cache slots some attention layer of ``model`` sees (a sliding
    window: Mistral, Gemma 2/3, Qwen2 with use_sliding_window; a chunk: Llama 4), None where every
    layer sees every earlier token. transformers masks such a window by cache slot, not by position:
    a rejected draft's hole inside it shifted tokens out (window 4, n-gram drafts: logprobs 2.2
    away from a teacher-forced forward pass)."""
    cfg = getattr(model, "config", None)
    if cfg is not None and hasattr(cfg, "get_text_config"):
        cfg = cfg.get_text_config()
    if cfg is None:
        return None
    windows = [w for w in (getattr(cfg, "sliding_window", None), getattr(cfg, "attention_chunk_size", None))
               if isinstance(w, int) and w > 0]
    if not windows:
        return None
    layer_types = getattr(cfg, "layer_types", None)
    if getattr(cfg, "attention_chunk_size", None) is None and (
        (layer_types and all(t == "full_attention" for t in layer_types))
        or (not layer_types and getattr(cfg, "use_sliding_window", True) is False)
    ):
        return None  # a window named, used by no layer (Qwen2's sliding_window without use_sliding_window)
    return min(windows)


class ReuseSampler:
    """Rollout reuse as a ``Sampler`` (SPEC-RL): a ``FastSampler`` that remembers the completions of each
    prompt it sampled and, when the same prompt ids come again (a later epoch, a restarted episode),
    hands them in as drafts (``previous``): the k-th copy of a prompt in a call gets the k-th completion
    remembered for it. Exact (``_spec.py``); only what was accepted is reused. At most ``capacity``
    prompts are remembered (the least recently sampled are forgotten).

    >>> # sampler = ReuseSampler(FastSampler(policy.model, policy.tokenizer)); sampler.generate(ids, params)
    """

    def __init__(self, sampler: FastSampler, *, capacity: int = 100_000) -> None:
        from collections import OrderedDict

        self.sampler, self.capacity = sampler, capacity
        self.memory: OrderedDict[tuple[int, ...], list[tuple[int, ...]]] = OrderedDict()

    @property
    def stats(self) -> SpecStats:
        return self.sampler.stats

    def generate(self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        seen: dict[tuple[int, ...], int] = {}
        previous: list[tuple[int, ...] | None] = []
        for p in prompt_ids:
            key = tuple(p)
            k = seen.get(key, 0)
            seen[key] = k + 1
            old = self.memory.get(key, [])
            previous.append(old[k] if k < len(old) else None)
        out = self.sampler.generate(prompt_ids, params, previous=previous)
        fresh: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        for g in out:
            fresh.setdefault(g.prompt_ids, []).append(g.completion_ids)
        for key, completions in fresh.items():
            self.memory[key] = completions
            self.memory.move_to_end(key)
        while len(self.memory) > self.capacity:
            self.memory.popitem(last=False)
        return out
