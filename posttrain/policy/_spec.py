"""Speculative sampling that leaves the target distribution unchanged: the acceptance rule, and the
two draft sources (n-gram / prompt lookup, and rollout reuse).

A draft here is always a *deterministic* function of the row's context (the prompt and the tokens
emitted so far): the continuation of the longest recent n-gram found earlier in the context
(prompt lookup, Saxena 2023), or the remaining tokens of a previous rollout of the same prompt while
the new completion still agrees with it (rollout reuse, SPEC-RL arXiv 2509.23232). For a draft
token ``d`` that is a function of the context, the proposal is the point mass at ``d``, and the
rejection rule of speculative sampling (Leviathan et al. 2023, Chen et al. 2023) becomes:

    accept d with probability p(d);  on rejection sample from p with d removed, renormalized.

Then P(next = y) = p(d)[y = d] + (1 - p(d)) p(y)[y != d] / (1 - p(d)) = p(y) for every y: exact,
at every position, because a later draft token is only looked at once every earlier one was
accepted (its context is then the true one). The proposal may also depend on what happened before
(how many tokens of a previous rollout to verify next): it is fixed before the uniforms that decide
it are drawn. ``p`` is the sampling distribution (temperature,
top-k, top-p: ``process_logits``); greedy accepts exactly the drafts equal to the argmax.

Departure from SPEC-RL, stated: its lenient rule accepts with ``min(1, l * p_new / p_old)`` and
resumes plain sampling at the first rejection, which is not exact (it would need the old policy's
whole distribution at that position for the residual). We keep the exact rule above: acceptance is
``p_new(d)``, high where the current policy is confident about the old rollout's token.

Not here: the decoding loop (``_fast.FastSampler`` feeds the drafts to the model in one forward
pass per step and calls ``verify``), a draft *model* (a second network; prompt lookup needs none).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from posttrain.errors import UserError


@dataclass(frozen=True)
class SpecConfig:
    """When and how far to draft. Checked on construction: a bad value is a ``UserError``.

    >>> SpecConfig(ngram=True, tail_rows=4).draft_len
    6
    """

    ngram: bool = True
    """Prompt-lookup drafting (``ngram_draft``) for the rows still running in the tail of a batch."""
    draft_len: int = 6
    """Tokens proposed per row and step by n-gram drafting."""
    max_ngram: int = 3
    """Longest suffix n-gram searched for in the context (then shorter ones, down to 1)."""
    tail_rows: int = 8
    """N-gram drafting runs only while at most this many rows are still sampling: with the batch full
    the step is compute-bound and drafts cost more than they save (FastGRPO, arXiv 2509.21792)."""
    reuse_len: int = 64
    """Most tokens of a previous rollout verified per row and step (rollout reuse; any batch size):
    8 first, doubling while all are accepted (``_fast.REUSE_START``)."""

    def __post_init__(self) -> None:
        for name in ("draft_len", "max_ngram", "tail_rows", "reuse_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"speculation: {name} must be an integer >= 1, got {value!r}")


def ngram_draft(context: Sequence[int], k: int, *, max_ngram: int = 3, min_start: int = 0) -> list[int]:
    """Up to ``k`` tokens that followed the most recent earlier occurrence of the context's last
    n tokens (n from ``max_ngram`` down to 1); [] when none occurs. Only occurrences that start at
    ``min_start`` or later are used.

    >>> ngram_draft([5, 6, 7, 9, 5, 6], 3)
    [7, 9, 5]
    >>> ngram_draft([1, 2, 3], 2)
    []
    """
    n_ctx = len(context)
    for n in range(min(max_ngram, n_ctx - 1), 0, -1):
        tail = list(context[n_ctx - n :])
        for start in range(n_ctx - n - 1, min_start - 1, -1):  # most recent first
            if list(context[start : start + n]) == tail:
                return list(context[start + n : start + n + k])
    return []


def reuse_draft(emitted: Sequence[int], previous: Sequence[int], k: int) -> list[int]:
    """The next ``k`` tokens of a ``previous`` completion of the same prompt, while the new
    completion (``emitted``) is still a prefix of it; [] once they differ.

    >>> reuse_draft([4, 5], [4, 5, 6, 7, 8], 2), reuse_draft([4, 9], [4, 5, 6], 2)
    ([6, 7], [])
    """
    n = len(emitted)
    if n >= len(previous) or list(previous[:n]) != list(emitted):
        return []
    return list(previous[n : n + k])


def sample_from(probs: Tensor, u: Tensor) -> Tensor:  # (B, V) unnormalized, (B,) in [0, 1) -> (B,) long
    """Inverse-CDF sampling: token i with probability ``probs[i] / probs.sum()``, from one uniform per
    row (so a row's draw does not depend on which other rows are in the batch).

    >>> sample_from(torch.tensor([[0.0, 1.0, 3.0]]), torch.tensor([0.3])).tolist()
    [2]
    """
    cdf = probs.double().cumsum(-1)  # (B, V); fp64: a 150k vocabulary sums without drift
    idx = torch.searchsorted(cdf, (u.double() * cdf[:, -1]).unsqueeze(-1), right=True).squeeze(-1)
    return idx.clamp(max=probs.shape[-1] - 1)


def verify(
    logp: Tensor,  # (B, K+1, V) log-probs of the sampling distribution after the fed token and each draft token
    drafts: Tensor,  # (B, K) long; entries at or past n_draft[i] are padding
    n_draft: Tensor,  # (B,) long, drafts proposed per row (0..K)
    u: Tensor,  # (B, >= K+1) uniforms in [0, 1): u[:, j] decides draft j+1, u[:, -1] samples the next token
    *,
    greedy: bool,
) -> tuple[Tensor, Tensor]:  # accepted (B,) long in 0..n_draft, next token (B,) long
    """The exact acceptance rule (module docstring) for a batch of rows in one go.

    Row i accepts its first ``accepted[i]`` drafts; ``logp[i, j]`` is the distribution of the token
    after draft j (j = 0: after the fed token, predicting draft 1). ``next[i]`` is sampled from
    ``logp[i, accepted[i]]`` with the first rejected draft removed (the residual), or from it as is
    when every draft was accepted (the bonus token); greedy: the argmax there.

    >>> lp = torch.log(torch.tensor([[[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]]))
    >>> verify(lp, torch.tensor([[1]]), torch.tensor([1]), torch.tensor([[0.5, 0.5]]), greedy=False)
    (tensor([1]), tensor([2]))
    """
    b, k1, _ = logp.shape
    k = k1 - 1
    if k == 0:
        accepted = torch.zeros(b, dtype=torch.long, device=logp.device)
    else:
        within = torch.arange(k, device=logp.device)[None, :] < n_draft[:, None]  # (B, K)
        if greedy:
            ok = logp[:, :k].argmax(-1) == drafts
        else:
            p_draft = logp[:, :k].gather(-1, drafts.unsqueeze(-1)).squeeze(-1).exp()  # (B, K)
            ok = u[:, :k] < p_draft
        accepted = (ok & within).long().cumprod(-1).sum(-1)  # (B,)
    rows = torch.arange(b, device=logp.device)
    at = logp[rows, accepted]  # (B, V)
    if greedy:
        return accepted, at.argmax(-1)
    probs = at.exp()
    if k:
        rejected = accepted < n_draft
        first_rejected = drafts[rows, accepted.clamp(max=k - 1)]  # (B,)
        probs[rows[rejected], first_rejected[rejected]] = 0.0  # the residual: p without the rejected draft
    return accepted, sample_from(probs, u[:, -1])
