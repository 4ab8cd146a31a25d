"""The GRPO generator's weights on each sampler backend: what ``train_grpo(..., rollout=)`` takes.

    rollout = rollout_weights(policy, "fast", max_staleness=0, speculation=SpecConfig(), reuse=True)
    train_grpo(policy, tasks, service, cfg, ..., rollout=rollout)

- ``local``: ``LocalSampler`` (transformers' ``generate``): the trainer's own model with
  ``max_staleness`` 0, else a copy (``_overlap.local_weights``, as without this module);
- ``fast``: ``FastSampler`` (prefix sharing, rows leave the batch, the lean forward, optional
  speculation) on the same weights -- the trainer's own model at K = 0, a copy at K > 0;
- ``vllm``: ``VllmWeights`` (the engine in its own process, every version pushed and checked).

``reuse``: the previous rollouts of each prompt are the drafts of the next (``ReuseSampler``, one
memory for the whole run; ``fast`` only). Samples differ from ``local``'s for one seed (another
sampling loop), the distribution does not; a run's backend is part of its recipe (``rl.sampler``).
"""

from __future__ import annotations

from typing import Literal

from posttrain.policy import FastSampler, Policy, ReuseSampler, Sampler, SpecConfig
from posttrain.train._overlap import CopiedWeights, SharedWeights, Weights, local_weights

Backend = Literal["local", "fast", "vllm"]
BACKENDS: tuple[Backend, ...] = ("local", "fast", "vllm")


class _FastOwn(SharedWeights):
    """The trainer's own model behind a ``FastSampler`` (K = 0)."""

    def __init__(self, policy: Policy, speculation: SpecConfig | None, reuse: bool) -> None:
        super().__init__(policy)
        fast = FastSampler(policy.model, policy.tokenizer, speculation=speculation)
        self._sampler: Sampler = ReuseSampler(fast) if reuse else fast

    def sampler(self, step: int) -> Sampler:
        return self._sampler


class _FastCopy(CopiedWeights):
    """A copy of the policy, loaded with each version, behind a ``FastSampler`` (K > 0)."""

    def __init__(self, policy: Policy, speculation: SpecConfig | None, reuse: bool) -> None:
        super().__init__(policy)
        fast = FastSampler(self.policy.model, self.policy.tokenizer, speculation=speculation)
        self._sampler: Sampler = ReuseSampler(fast) if reuse else fast

    def sampler(self, step: int) -> Sampler:
        return self._sampler


def rollout_weights(policy: Policy, backend: Backend, *, max_staleness: int = 0,
                    speculation: SpecConfig | None = None, reuse: bool = False, copy: bool = False) -> Weights:
    """The generator's weights for ``backend`` (module docstring). ``copy``: a copy even at
    ``max_staleness`` 0 (data-parallel ranks generate from whole weights while the trainer's are
    sharded, ``train._dist``). An unknown backend, or speculation/reuse on a backend that has none,
    is a ``ValueError`` naming it."""
    if backend not in BACKENDS:
        raise ValueError(f"sampler backend {backend!r}: expected one of {list(BACKENDS)}")
    if backend != "fast" and (speculation is not None or reuse):
        raise ValueError(f"sampler backend {backend!r}: speculation and rollout reuse need the fast backend")
    if backend == "local":
        return CopiedWeights(policy) if copy else local_weights(policy, max_staleness)
    if backend == "vllm":
        from posttrain.policy._vllm import VllmWeights

        return VllmWeights(policy)
    return (_FastOwn if max_staleness == 0 and not copy else _FastCopy)(policy, speculation, reuse)
