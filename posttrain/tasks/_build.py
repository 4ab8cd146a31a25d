"""``make_sampler``: the RL sampler a recipe asks for, from its training tasks and sources.

``kind: uniform`` is ``TaskSampler(train, seed=seed)``, exactly as before. ``kind: pool`` builds a
``TaskPool``: a task set per domain of ``train``; a ``Stream`` per curriculum source, whose chunks
leave out tasks that overlap an evaluation task (the pool's decontamination, applied as they are
made); canaries from every domain of the mix that can make them (``HasCanaries``) when
``canary_rate`` is above 0; each domain's levels as the difficulty priors' scale.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from posttrain.envs import HasLevels, get_domain, is_registered
from posttrain.errors import ConfigError
from posttrain.tasks._canary import make_canaries
from posttrain.tasks._curriculum import Stream
from posttrain.tasks._decontaminate import find_contamination
from posttrain.tasks._pool import TaskPool
from posttrain.tasks._sampler import TaskSampler
from posttrain.tasks._sources import TaskSource
from posttrain.tasks._spec import SamplerSpec
from posttrain.types import Task


def make_sampler(spec: SamplerSpec, train: Sequence[Task], *, seed: int, sources: Sequence[TaskSource] = (),
                 eval_tasks: Sequence[Task] = (), key: str = "tasks",
                 fits: Callable[[Task], bool] = lambda task: True) -> TaskSampler | TaskPool:
    """The sampler of ``spec`` over ``train`` (and the curriculum ones among ``sources``); a curriculum
    leaves out what overlaps ``eval_tasks`` and what does not ``fit`` (the policy's positions)."""
    curricula = [(i, s) for i, s in enumerate(sources) if s.curriculum]
    if spec.kind == "uniform":
        if curricula:
            raise ConfigError(f"{key}.train[{curricula[0][0]}]: curriculum: needs {key}.sampler.kind: pool "
                              f"(the uniform sampler draws fixed tasks only)")
        return TaskSampler(train, seed=seed)
    held = list(eval_tasks)

    def exclude(tasks: Sequence[Task]) -> set[str]:
        overlap = {c.train_id for c in find_contamination(tasks, held)} if held else set()
        return overlap | {t.id for t in tasks if not fits(t)}

    streams = []
    for i, source in curricula:
        name = str(source.generator)
        env = get_domain(name)
        if not isinstance(env, HasLevels):  # TaskSource checked it; a plugin may have changed since
            raise ConfigError(f"{key}.train[{i}]: curriculum: the {name} generator has no levels")
        stream_seed = seed if source.seed is None else source.seed
        streams.append(Stream(name, env, seed=stream_seed, level=source.level, spec=spec.curriculum, exclude=exclude))
    domains = sorted({t.domain for t in train} | {s.domain for s in streams})
    canaries: list[Task] = []
    if spec.canary_rate > 0:
        canaries = make_canaries(domains, spec.canaries_per_domain, seed=seed)
        if not canaries:
            raise ConfigError(f"{key}.sampler.canary_rate: none of the training domains can make canaries "
                              f"({', '.join(domains)})")
    try:
        return TaskPool(train, seed=seed, spec=spec, streams=streams, canaries=canaries, levels=_levels)
    except ValueError as e:
        raise ConfigError(f"{key}.sampler: {e}") from None


def _levels(domain: str) -> tuple[int, int] | None:
    env = get_domain(domain) if is_registered(domain) else None
    return env.level_range() if isinstance(env, HasLevels) else None
