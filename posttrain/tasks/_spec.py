"""The task pool's settings: which sampler, its pools and filter, the curriculum, domain weights, canaries.

One frozen dataclass per part, a docstring per field, checked when built (``ConfigError`` naming
the field); the recipe's ``tasks.sampler`` section maps onto ``SamplerSpec``. ``kind: uniform`` is
today's sampler, bit for bit (``posttrain.tasks.TaskSampler``), and takes no other key;
``kind: pool`` is ``posttrain.tasks.TaskPool``::

    tasks:
      sampler:
        kind: pool
        stratify: {easy_above: 0.9, hard_below: 0.1, easy_fraction: 0.1, hard_fraction: 0.1}
        filter: {after: 2, revisit_every: 20}
        curriculum: {window: 8, raise_above: 0.7, lower_below: 0.1}
        weights: {rg/countdown: 2, math: 1}        # or schedule: [{step: 0, weights: {...}}, ...]
        canary_rate: 0.02
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Literal

from posttrain.config import Fraction, NonNegativeInt, PositiveInt, Range
from posttrain.errors import ConfigError


@dataclass(frozen=True)
class StratifySpec:
    """Easy / normal / hard pools by estimated pass rate, across the whole mix, and each batch's
    share of easy and hard tasks (prime-rl's buffer: the shortfall of an empty pool comes from normal)."""

    easy_above: Fraction = 0.9
    """A task whose estimated pass rate is at least this is easy."""
    hard_below: Fraction = 0.1
    """A task whose estimated pass rate is at most this is hard."""
    easy_fraction: Fraction = 0.0
    """The share of each batch taken from the easy pool (a little keeps what is learnt)."""
    hard_fraction: Fraction = 0.0
    """The share taken from the hard pool (what may come within reach)."""

    def __post_init__(self) -> None:
        if self.hard_below >= self.easy_above:
            raise ConfigError(f"stratify: hard_below ({self.hard_below}) must be below easy_above ({self.easy_above})")
        if self.easy_fraction + self.hard_fraction > 1.0:
            raise ConfigError(f"stratify: easy_fraction + hard_fraction is {self.easy_fraction + self.hard_fraction}, "
                              f"at most 1")


@dataclass(frozen=True)
class FilterSpec:
    """Saturated and impossible tasks leave the RL mix, and come back now and then."""

    after: PositiveInt = 2
    """A task whose last ``after`` groups all passed entirely (saturated) or all failed entirely
    (impossible) is filtered: its groups would carry no gradient."""
    revisit_every: PositiveInt = 25
    """Steps after which a filtered task comes back for one more group (the policy may have changed)."""


@dataclass(frozen=True)
class CurriculumSpec:
    """The level controller of every curriculum source (``{generator: D, curriculum: true}``)."""

    window: PositiveInt = 8
    """Groups at the current level that are averaged before a level change."""
    raise_above: Fraction = 0.7
    """The level goes up when the window's pass rate is at least this."""
    lower_below: Fraction = 0.05
    """The level goes down when the window's pass rate is at most this (the signal collapsed)."""
    chunk: Annotated[int, Range(ge=1, le=4096)] = 32
    """Tasks generated at a time for a source, at its current level."""

    def __post_init__(self) -> None:
        if self.lower_below >= self.raise_above:
            raise ConfigError(f"curriculum: lower_below ({self.lower_below}) must be below raise_above "
                              f"({self.raise_above})")


@dataclass(frozen=True)
class MixPoint:
    """Domain weights from a step on (linearly interpolated to the next point)."""

    step: NonNegativeInt
    weights: Mapping[str, Annotated[float, Range(ge=0)]] = field(default_factory=dict)


@dataclass(frozen=True)
class SamplerSpec:
    """How RL draws its tasks (module docstring)."""

    kind: Literal["uniform", "pool"] = "uniform"
    """uniform: shuffled epochs over every task, as before (no other key); pool: difficulty pools,
    filtering, curricula, domain weights and canaries as set below (``posttrain.tasks.TaskPool``)."""
    stratify: StratifySpec | None = None
    """Easy/normal/hard pools and their shares (None: one pool of every task)."""
    filter: FilterSpec | None = None
    """Leave saturated and impossible tasks out (None: keep every task)."""
    curriculum: CurriculumSpec = field(default_factory=CurriculumSpec)
    """The level controller of the curriculum sources."""
    weights: Mapping[str, Annotated[float, Range(ge=0)]] | None = None
    """Each domain's share of the draws (normalized; a domain not named gets 1, 0 leaves it out);
    with ``stratify``, its share of each pool among the domains that have tasks in it. None: every
    domain alike."""
    schedule: tuple[MixPoint, ...] = ()
    """Weights that change with the step (points in increasing step order), instead of ``weights``."""
    canary_rate: Annotated[float, Range(ge=0, le=0.5)] = 0.0
    """The share of draws that are canaries (tasks no honest response passes; any pass is a hack alarm)."""
    canaries_per_domain: Annotated[int, Range(ge=1, le=4096)] = 8
    """Canary tasks built per domain that can have them (``HasCanaries``); at most 4,096 (all are built
    when the recipe is read: 10**30 hung there)."""
    ema: Annotated[float, Range(gt=0, le=1)] = 0.3
    """Weight of the newest group in the pass-rate estimates (``posttrain.tasks._difficulty``)."""

    def __post_init__(self) -> None:
        if self.kind == "uniform":
            extra = [k for k in ("stratify", "filter", "weights") if getattr(self, k) is not None]
            extra += ["schedule"] * bool(self.schedule) + ["canary_rate"] * bool(self.canary_rate)
            if extra:
                raise ConfigError(f"{extra[0]}: the uniform sampler takes no {extra[0]}; set kind: pool")
        if self.weights is not None and self.schedule:
            raise ConfigError("schedule: give weights or a schedule of weights, not both")
        steps = [p.step for p in self.schedule]
        if steps != sorted(set(steps)):
            raise ConfigError(f"schedule: steps must increase, got {steps}")
        for where, w in [("weights", self.weights or {})] + [(f"schedule[{i}].weights", p.weights)
                                                             for i, p in enumerate(self.schedule)]:
            if w and not any(v > 0 for v in w.values()):
                raise ConfigError(f"{where}: at least one domain needs a weight above 0")
            bad = next((k for k, v in w.items() if not math.isfinite(v)), None)
            if bad is not None:
                raise ConfigError(f"{where}.{bad}: expected a finite weight")
            if not math.isfinite(sum(w.values())):  # the pool's round-robin adds them up: inf - inf drew one domain
                raise ConfigError(f"{where}: the weights add up to more than a float holds (inf); expected weights "
                                  f"whose sum is finite (only their ratios count)")

    def weights_at(self, step: int) -> Mapping[str, float] | None:
        """The domain weights in force at ``step`` (the schedule interpolated), or None."""
        if not self.schedule:
            return self.weights
        points = self.schedule
        if step <= points[0].step:
            return dict(points[0].weights)
        for a, b in zip(points, points[1:], strict=False):
            if a.step <= step < b.step:
                t = (step - a.step) / (b.step - a.step)
                names = set(a.weights) | set(b.weights)
                return {d: (1 - t) * a.weights.get(d, 1.0) + t * b.weights.get(d, 1.0) for d in sorted(names)}
        return dict(points[-1].weights)


def uniform() -> SamplerSpec:
    """The default: today's uniform sampler."""
    return SamplerSpec()


__all__ = ["CurriculumSpec", "FilterSpec", "MixPoint", "NonNegativeInt", "SamplerSpec", "StratifySpec", "uniform"]
