"""Reward combination: weighted named components, length penalty, NaN for infra errors."""

from __future__ import annotations

import math

import pytest

from posttrain.types import Verdict
from posttrain.verify.rewards import RewardWeights, combine, length_penalty

PASS = Verdict(outcome="pass", reward=1.0, components={"outcome": 1.0, "format": 1.0})
WRONG = Verdict(outcome="fail", reward=0.0, components={"outcome": 0.0, "format": 1.0})
UNFORMATTED = Verdict(outcome="fail", reward=0.0, components={"outcome": 0.0, "format": 0.0})


def test_default_weights_are_the_outcome() -> None:
    w = RewardWeights()
    assert combine(PASS, w).total == 1.0 and combine(WRONG, w).total == 0.0


def test_weighted_sum_and_each_component_logged() -> None:
    w = RewardWeights(outcome=1.0, format=0.2)
    r = combine(WRONG, w)
    assert r.total == pytest.approx(0.2)
    assert r.components == {"outcome": 0.0, "format": 0.2, "process": 0.0, "length": 0.0}
    assert combine(UNFORMATTED, w).total == 0.0
    assert combine(PASS, w).total == pytest.approx(1.2)


def test_length_penalty_dapo_soft_overlong() -> None:
    assert length_penalty(80, 100, 20) == 0.0
    assert length_penalty(90, 100, 20) == -0.5
    assert length_penalty(150, 100, 20) == -1.0
    w = RewardWeights(length=1.0, max_tokens=100, overlong_buffer=20)
    r = combine(PASS, w, completion_tokens=95)
    assert r.components["length"] == pytest.approx(-0.75) and r.total == pytest.approx(0.25)


def test_infra_error_is_nan_never_zero() -> None:
    r = combine(Verdict.infra("sandbox died"), RewardWeights(format=0.5))
    assert math.isnan(r.total) and all(math.isnan(v) for v in r.components.values())


@pytest.mark.parametrize(
    "kwargs",
    [{"outcome": float("nan")}, {"format": True}, {"length": 1.0}, {"max_tokens": 10, "overlong_buffer": 20}],
)
def test_invalid_weights_rejected(kwargs) -> None:
    with pytest.raises(ValueError):
        RewardWeights(**kwargs)
