"""The third ``Sampler`` backend: rollout workers on Ray, actors that sample from the policy version the trainer sent them.

    >>> # rollout = RayRollout(policy, workers=2, seed=0)        # ray.init(...) done by the caller
    >>> # rollout.load(0, rollout.capture(policy.model))          # broadcast version 0
    >>> # gens = rollout.sampler(step=0).generate(prompt_ids, SamplingParams(max_new_tokens=24))

- ``RolloutActor``: one per worker, holding its own copy of the model (shipped once, at start) and
  one policy version at a time. ``load(version, weights)`` replaces the weights; ``generate(version,
  ...)`` refuses (``VersionMismatch``) a request for a version it does not hold, so a batch is never
  sampled by weights other than the ones the trainer's schedule names.
- ``RayRollout``: the driver's handle (the ``Weights`` of ``posttrain.train._overlap``): ``capture``
  puts a copy of the trainer's weights in the object store (one ``ray.put``, read by every actor),
  ``load`` broadcasts it with its version and waits until every actor holds it.
- ``RaySampler``: a ``Sampler`` (``generate(prompt_ids, params) -> list[Generation]``) over the
  actors: the prompts are split into contiguous shards, one per actor, each sampled with its own
  seed (``params.seed``, or the sampler's own seed and call count when ``params.seed`` is None), so
  a run is reproducible for a given number of workers. Each actor runs ``LocalSampler``: the same
  distribution and logprobs as the local backend (tests/sched/test_ray_rollout.py runs the sampler
  conformance test over it).

Actors ask Ray for no CPU (``num_cpus=0``; the sandbox-pool actors do the same): on 2 cores they
share the machine with the trainer and the sandbox, and a reservation would only deadlock a small
cluster. They are spread over the nodes (``SPREAD``). A rollout actor that dies is not restarted
(its weights would be gone): the trainer gets a one-line error. Actors sample on their node's CPU:
a GPU per actor (``num_gpus``, the weights moved to it) is not wired yet.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from posttrain.errors import UserError

if TYPE_CHECKING:  # torch and the model load in the actors and the trainer, not with posttrain.policy
    import torch

    from posttrain.policy._policy import Policy
    from posttrain.policy._sampler import SamplingParams
    from posttrain.types import Generation


class VersionMismatch(RuntimeError):
    """A generate request named a policy version the rollout worker does not hold."""


class RolloutActor:
    """One rollout worker (module docstring). ``threads``: torch CPU threads of this actor."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, threads: int = 1) -> None:
        import torch

        from posttrain.policy._sampler import LocalSampler

        torch.set_num_threads(threads)
        self.model = model.eval()  # requires_grad as the trainer's: the same CPU kernels, the same logprobs
        self.sampler = LocalSampler(self.model, tokenizer)
        self.version: int | None = None

    def load(self, version: int, weights: Mapping[str, torch.Tensor]) -> int:
        self.model.load_state_dict(weights)
        self.version = version
        return version

    def generate(self, version: int, prompt_ids: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        if version != self.version:
            raise VersionMismatch(f"rollout worker holds policy version {self.version}, asked to sample with {version}")
        return self.sampler.generate(prompt_ids, params)

    def pid(self) -> int:
        import os

        return os.getpid()


class RaySampler:
    """A ``Sampler`` over rollout actors that all hold ``version`` (module docstring)."""

    def __init__(self, actors: Sequence[Any], version: int, *, seed: int) -> None:
        self.actors, self.version, self.seed = list(actors), version, seed
        self._calls = 0

    def generate(self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        import ray
        from ray.exceptions import RayActorError

        base = params.seed if params.seed is not None else _mix(self.seed, self._calls)
        self._calls += 1
        n = min(len(self.actors), len(prompt_ids)) or 1
        bounds = [len(prompt_ids) * i // n for i in range(n + 1)]
        refs = [
            actor.generate.remote(self.version, [list(p) for p in prompt_ids[lo:hi]],
                                  _with_seed(params, _mix(base, i)))
            for i, (actor, lo, hi) in enumerate(zip(self.actors, bounds, bounds[1:], strict=False))
        ]
        try:
            shards = ray.get(refs)
        except RayActorError as e:
            raise UserError(f"a Ray rollout worker died while sampling ({type(e).__name__}); rerun with --resume") from None
        return [g for shard in shards for g in shard]


class RayRollout:
    """Rollout actors on the connected Ray cluster, and their weights (module docstring)."""

    def __init__(self, policy: Policy, *, workers: int, seed: int, threads: int = 1) -> None:
        import ray

        if not ray.is_initialized():
            raise RuntimeError("RayRollout: connect to a cluster first (ray.init, or posttrain.sched.local_cluster)")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        on_cpu = next(policy.model.parameters()).device.type == "cpu"
        model = ray.put(policy.model if on_cpu else copy.deepcopy(policy.model).cpu())
        remote = ray.remote(RolloutActor).options(num_cpus=0, max_restarts=0, scheduling_strategy="SPREAD")
        self.actors = [remote.remote(model, policy.tokenizer, threads) for _ in range(workers)]
        self.seed = seed
        self.version: int | None = None

    def capture(self, model: torch.nn.Module) -> Any:
        import ray

        return ray.put({k: v.detach().to("cpu") for k, v in model.state_dict().items()})

    def load(self, version: int, payload: Any) -> None:
        import ray
        from ray.exceptions import RayActorError

        try:
            held = ray.get([a.load.remote(version, payload) for a in self.actors])
        except RayActorError as e:
            raise UserError(f"a Ray rollout worker died while loading policy version {version} "
                            f"({type(e).__name__}); rerun with --resume") from None
        if set(held) != {version}:
            raise RuntimeError(f"rollout workers hold versions {sorted(set(held))} after loading {version}")
        self.version = version

    def sampler(self, step: int) -> RaySampler:
        if self.version is None:
            raise RuntimeError("RayRollout.sampler before any version was loaded")
        return RaySampler(self.actors, self.version, seed=_mix(self.seed, step))

    def pids(self) -> list[int]:
        import ray

        return ray.get([a.pid.remote() for a in self.actors])

    def close(self) -> None:
        import ray

        for a in self.actors:
            with contextlib.suppress(Exception):
                ray.kill(a)
        self.actors = []


def _mix(a: int, b: int) -> int:
    """A seed from two integers (distinct pairs give distinct seeds for the small values used here)."""
    return (a * 1_000_003 + b) % (2**63 - 1)


def _with_seed(params: SamplingParams, seed: int) -> SamplingParams:
    return dataclasses.replace(params, seed=seed)
