"""A reward is a weighted sum of named components, each logged on its own.

Verifiers put raw components in ``Verdict.components`` (``outcome`` 1/0, ``format`` 1/0 when the
answer had the required shape, optionally ``process`` in [0, 1]). The recipe sets the weights in
a frozen ``RewardWeights``; ``combine`` applies them and adds a length penalty computed from the
completion's token count (DAPO's soft overlong punishment, arXiv 2503.14476 §3.4).

An ``infra_error`` verdict combines to NaN with every component NaN: it is dropped from the update,
never scored (DESIGN.md, "three outcomes, never two"). ``failure_floor`` is the least any verdict
combines to under given weights: what an episode scores that ends without a verdict (cut by the
runner's limits, or ended by its environment with none), so that no way of failing scores above
answering wrong (docs/contracts.md, "Reward accounting").

>>> from posttrain.types import Verdict
>>> v = Verdict(outcome="fail", reward=0.0, components={"outcome": 0.0, "format": 1.0})
>>> combine(v, RewardWeights(outcome=1.0, format=0.1)).total
0.1

Not here: advantages or normalisation across a group (``posttrain.algo``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from posttrain.config import NonNegativeFloat, NonNegativeInt, PositiveInt
from posttrain.strict_json import finite_number
from posttrain.types import Verdict

COMPONENTS = ("outcome", "format", "process", "length")


@dataclass(frozen=True)
class RewardWeights:
    """Weights of the named reward components (set in the recipe)."""

    outcome: NonNegativeFloat = 1.0
    """Weight of the verifier's pass (1) / fail (0)."""
    format: NonNegativeFloat = 0.0
    """Weight of "the answer had the required shape" (1/0), a shaping term for early training."""
    process: NonNegativeFloat = 0.0
    """Weight of a process signal in [0, 1] the verifier may report (e.g. fraction of tests)."""
    length: NonNegativeFloat = 0.0
    """Weight of the length penalty in [-1, 0] (0 = off)."""
    max_tokens: PositiveInt | None = None
    """The completion budget the length penalty is measured against (single-turn RL: at most the completion
    cap, ``rl.max_new_tokens``, so that a completion cut there gets the whole penalty)."""
    overlong_buffer: NonNegativeInt = 0
    """Tokens before ``max_tokens`` where the penalty ramps linearly from 0 to -1."""

    def __post_init__(self) -> None:
        for name in ("outcome", "format", "process", "length"):
            value = getattr(self, name)
            if not finite_number(value):
                raise ValueError(f"RewardWeights.{name} must be a finite number, got {value!r}")
        if self.length and (self.max_tokens is None or self.overlong_buffer <= 0):
            raise ValueError("RewardWeights.length needs max_tokens and a positive overlong_buffer")
        if self.max_tokens is not None and self.overlong_buffer > self.max_tokens:
            raise ValueError("RewardWeights.overlong_buffer must not exceed max_tokens")


@dataclass(frozen=True)
class RewardBreakdown:
    """The combined reward and each weighted component (``reward/<name>`` in the metrics)."""

    total: float
    components: Mapping[str, float] = field(default_factory=dict)


def length_penalty(n_tokens: int, max_tokens: int, buffer: int) -> float:
    """DAPO soft overlong punishment: 0 up to ``max_tokens - buffer``, then linear down to -1.

    >>> length_penalty(90, 100, 20)
    -0.5
    """
    start = max_tokens - buffer
    if n_tokens <= start or buffer <= 0:
        return 0.0
    return -min(1.0, (n_tokens - start) / buffer)


def failure_floor(weights: RewardWeights) -> RewardBreakdown:
    """The least any verdict combines to under ``weights``: outcome, format and process 0 and, with
    the length penalty on, the full penalty (``-weights.length``). Every failure scores at least this.

    >>> failure_floor(RewardWeights(format=0.2)).total
    0.0
    >>> failure_floor(RewardWeights(length=0.5, max_tokens=100, overlong_buffer=20)).total
    -0.5
    """
    length = -weights.length if weights.length and weights.max_tokens is not None else 0.0
    return RewardBreakdown(length, {"outcome": 0.0, "format": 0.0, "process": 0.0, "length": length})


def combine(verdict: Verdict, weights: RewardWeights, *, completion_tokens: int | None = None) -> RewardBreakdown:
    """Weighted sum of the verdict's components plus the length penalty; NaN for infra errors.

    A component a verifier reports outside [0, 1] is its bug, a ``ValueError`` naming it: a negative
    one would let a failure score below ``failure_floor``, so that being cut paid."""
    if verdict.is_infra_error:
        nan = float("nan")
        return RewardBreakdown(nan, {name: nan for name in COMPONENTS})
    raw = dict(verdict.components)
    raw.setdefault("outcome", 1.0 if verdict.passed else 0.0)
    raw.setdefault("format", raw["outcome"])
    raw.setdefault("process", raw["outcome"])
    for name in ("outcome", "format", "process"):
        if not 0.0 <= float(raw[name]) <= 1.0:  # NaN fails too
            raise ValueError(f"verdict component {name!r} = {raw[name]!r} is outside [0, 1] ({verdict.error_class}: "
                             f"{verdict.feedback[:80]!r})")
    if weights.length and completion_tokens is not None and weights.max_tokens is not None:
        raw["length"] = length_penalty(completion_tokens, weights.max_tokens, weights.overlong_buffer)
    else:
        raw["length"] = 0.0
    weighted = {name: getattr(weights, name) * float(raw[name]) for name in COMPONENTS}
    return RewardBreakdown(sum(weighted.values()), weighted)
