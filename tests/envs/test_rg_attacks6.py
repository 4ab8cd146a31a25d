"""A sixth adversarial read of the rg domains: number_format's candidates picked blind, by place or by
how they are written, played through the check as the worker runs it (``_check.handle_check``).

Hole found (each test failed before its fix):

- number_format's answer was predictable from where and how it was written. The generator lists its
  base first and each other candidate as base + delta, and draws 2 to 5 candidates: the second
  candidate (the last of two) passed 45 and 38 of 100 default tasks (seeds 1, 2; 106-125 of 300 at
  seeds 1-3), the second-last 114-125 of 300, against 31% for a blind pick; at level 2 (three values
  among hundreds of candidates) the generator's float noise (``12,345.679000000001``) marks a
  candidate that is not the base, which the answer never is, and the one with the most decimals
  passed 29 of 60 (71 of 200, seed 2). Now the
  candidates are shown in an order drawn from the entry, written from their 3 decimals, and a task
  shows at least 4 (``_hardened._shuffled_candidates``, ``MIN_CANDIDATES``): every such pick passes
  at most 80 of 300 default tasks and 53 of 200 at level 2 (a blind pick's share: 22.5%, ~25%).

Left as it is: the greatest (or least) of the candidates, with the task's largest/smallest word
ignored, passes half: that is the comparison done, the task's work.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from test_rg_attacks5 import _candidates, _rg

from posttrain.envs.rg._domain import rg_domain
from posttrain.envs.rg._hardened import MIN_CANDIDATES


def _decimals(written: str) -> int:
    return max(-Decimal(written.replace(",", "")).normalize().as_tuple().exponent, 0)


PICKS: dict[str, Callable[[list[str]], str]] = {
    "first": lambda c: c[0],
    "second": lambda c: c[1],
    "third": lambda c: c[2],
    "second-last": lambda c: c[-2],
    "last": lambda c: c[-1],
    "the most characters": lambda c: max(c, key=len),
    "the fewest characters": lambda c: min(c, key=len),
    "the most decimals": lambda c: max(c, key=_decimals),
    "the first with commas": lambda c: next((x for x in c if "," in x), c[0]),
    "the first with an exponent": lambda c: next((x for x in c if "e" in x), c[0]),
}
"""Blind picks: a place in the list, or a way of writing the number."""


def _tasks(level: int | None, seed: int, n: int) -> list[Any]:
    domain = rg_domain("number_format")
    return domain.generate_tasks(n, seed=seed) if level is None else domain.generate_level(n, level=level, seed=seed)


@pytest.mark.parametrize(("level", "seed", "n"), [(None, 1, 300), (None, 2, 300), (2, 2, 200)])
def test_number_format_s_answer_is_not_picked_blind(level: int | None, seed: int, n: int) -> None:
    tasks = _tasks(level, seed, n)
    assert all(_rg(t, t.fields["answer"]) for t in tasks)
    passes = {how: sum(_rg(t, pick(_candidates(t.prompt))) for t in tasks) for how, pick in PICKS.items()}
    # before: the second 123 and 106 of 300, the second-last 114 and 122; level 2: the most decimals 71 of 200
    # after: at most 80 of 300 and 53 of 200 (a blind pick's share: 22.5% default, ~25% at level 2)
    assert max(passes.values()) <= 0.3 * n, passes


def test_number_format_writes_its_candidates_without_float_noise() -> None:
    for level in (None, 2):
        for task in _tasks(level, 3, 20):
            shown = _candidates(task.prompt)
            assert len(shown) >= MIN_CANDIDATES
            assert all(_decimals(x) <= 3 for x in shown), shown  # before: 12,345.679000000001
            meta = task.fields["rg_metadata"]
            assert shown == meta["formatted_candidates"]
            assert [Decimal(x.replace(",", "")) for x in shown] == [Decimal(f"{v:.3f}") for v in meta["candidates"]]


def test_number_format_s_order_is_drawn_from_the_entry() -> None:
    """The same tasks again, and the answer's place spread over the list (before: never first at level 2)."""
    tasks = _tasks(2, 1, 40)
    assert [t.prompt for t in tasks] == [t.prompt for t in _tasks(2, 1, 40)]
    assert 0 < sum(_rg(t, _candidates(t.prompt)[0]) for t in tasks) <= 0.3 * len(tasks)
