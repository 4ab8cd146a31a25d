"""Answer priors of the rg pool: no answer given without solving passes more than ``MAX_SHARE`` of a
generator's tasks.

A policy that answers one constant passes the share of tasks whose answer it is, and RL pays it for
that (mode collapse): before ``_generate.balanced``, "1" was the answer of 56% of gcd's tasks at
level 3, 46% of letter_counting's at level 1, "0.125" 40% of coin_flip's, "son" 29-31% of
family_relationships', and number_sequence's last term copied passed 40% at level 1. The pool is
the rg generators that the 22-domain mix trains on (configs/multi-domain.yaml, bench/curriculum.py).
Each is generated at its default configuration and every level it has, 200 tasks of seed 0, and its
most common stored answer (as ``answer_key`` reads it) must be at most ``MAX_SHARE`` of them; then
the three most common, and a number of the question copied, are played through the generator's own
scorer (which may accept more than the stored string: "1.0" for "1") on 100 tasks of seed 1 at the
default configuration and the lowest and highest level. ~40 s on 2 busy cores, most of it
number_sequence's.
"""

from __future__ import annotations

import collections
import functools
import json
import re
from pathlib import Path

import pytest

from posttrain.envs.rg._check import score
from posttrain.envs.rg._generate import MAX_SHARE, answer_key, generate
from posttrain.envs.rg._names import GENERATORS, LOWEST_LEVEL

ROOT = Path(__file__).resolve().parents[2]
POOL = ("aiw", "basic_arithmetic", "calendar_arithmetic", "chain_sum", "coin_flip", "complex_arithmetic", "count_bits",
        "count_primes", "decimal_arithmetic", "decimal_chain_sum", "family_relationships", "fraction_simplification",
        "gcd", "lcm", "letter_counting", "number_sequence", "prime_factorization", "products", "simple_equations",
        "spell_backward")
"""The rg generators of configs/multi-domain.yaml and bench/curriculum.py (``test_the_pool_is_the_mix_s``)."""
N_TASKS = 200
SLOW_LEVELS = {"number_sequence": 2}
"""From this level on, a few of the generator's own entries take minutes (a rule that squares its
terms): only the levels below are generated here."""


def _specs(name: str) -> list[dict]:
    """The default configuration (what configs/multi-domain.yaml trains on) and every level."""
    top = max(GENERATORS[name][1] - 1, 0)
    levels = range(LOWEST_LEVEL.get(name, 0), min(top + 1, SLOW_LEVELS.get(name, top + 1)))
    return [{}, *({"level": level} for level in levels)]


def test_the_pool_is_the_mix_s() -> None:
    mix = set(re.findall(r"generator: rg/(\w+)", (ROOT / "configs" / "multi-domain.yaml").read_text()))
    bench = (ROOT / "bench" / "curriculum.py").read_text()
    listed = re.search(r"^RG = \((.*?)\)$", bench, re.S | re.M)
    assert listed is not None
    assert mix | set(re.findall(r'"(\w+)"', listed.group(1))) == set(POOL)


@pytest.mark.slow
@pytest.mark.parametrize("name", POOL)
def test_no_answer_is_more_than_its_share(name: str) -> None:
    """Each configuration's most common answer is at most ``MAX_SHARE`` of its tasks. 0.1-30 s a
    generator (number_sequence: a few of its entries take seconds)."""
    over = {}
    for spec in _specs(name):
        answers = collections.Counter(answer_key(e["answer"]) for e in _generated(name, spec, N_TASKS, 0))
        top, count = answers.most_common(1)[0]
        if count > MAX_SHARE * N_TASKS:
            over[spec.get("level", "default")] = (top, count / N_TASKS)
    assert over == {}


@pytest.mark.slow
@pytest.mark.parametrize("name", POOL)
def test_no_unsolved_answer_passes_more_than_the_share(name: str) -> None:
    """Played on 100 tasks of seed 1 through the scorer (with the hardened rules, ``_check.score``), at
    the default configuration and the lowest and highest level: the three most common answers of
    seed 0's 200 tasks, and the question's first, last, least and greatest number copied as the answer."""
    specs = _specs(name)
    for spec in [specs[0], specs[1], *specs[2:][-1:]]:
        level = spec.get("level", "default")
        seen = collections.Counter(str(e["answer"]).strip() for e in _generated(name, spec, N_TASKS, 0))
        tasks = _generated(name, spec, 100, 1)
        plays = {f"constant {a!r}": (lambda e, a=a: a) for a, _ in seen.most_common(3)}
        plays.update({f"copy the {how} number": pick for how, pick in _COPIES.items()})
        for play, answer in plays.items():
            rate = sum(_passes(name, spec, answer(e), e) for e in tasks) / len(tasks)
            assert rate <= MAX_SHARE, (level, play, rate)


def _generated(name: str, spec: dict, n: int, seed: int) -> list[dict]:
    """``generate``, once per arguments for both tests (number_sequence's level 1 takes ~17 s)."""
    return _generate_once(name, json.dumps(spec, sort_keys=True), n, seed)


@functools.cache
def _generate_once(name: str, spec: str, n: int, seed: int) -> list[dict]:
    return generate(name, json.loads(spec), n=n, seed=seed)


def _numbers(entry: dict) -> list[str]:
    return re.findall(r"-?\d+(?:\.\d+)?", entry["question"]) or ["0"]


_COPIES = {
    "first": lambda e: _numbers(e)[0],
    "last": lambda e: _numbers(e)[-1],
    "least": lambda e: min(_numbers(e), key=float),
    "greatest": lambda e: max(_numbers(e), key=float),
}


def _passes(name: str, spec: dict, answer: str, entry: dict) -> bool:
    try:
        value, refused = score(name, spec, answer, entry)
    except Exception:  # noqa: BLE001 - a scorer that raises on the answer fails it (_check.py)
        return False
    return value >= 1.0 and refused is None


def test_balancing_examples() -> None:
    import doctest

    import posttrain.envs.rg._generate as module

    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted >= 4
