"""Procedural cad tasks, CAD-Recode's recipe: a base solid plus features with templated dimensions
(``_parts.py``) -> the gold OpenSCAD script -> a text description that fixes every dimension and
position. The difficulty level is the number of features, 1-6 (the L bracket has at most 4).

The gold renders with ``$fn = 48``; the prompt asks for 48 to 128; a coarser faceting still
passes (its slivers are far thinner than 1 mm, and a hole's vertices lie on its circle at any
faceting: every round hole and slot is a stated ``hole``, held to its diameter along its span,
``_holes.py``); a hub or boss passes its round check down to 10 segments (``rounds``) and a disc's
outline down to 14 drawn on its circle (``round_bodies``: at 16 its flats are 1.9 % of its radius deep; a 95 mm disc drawn as
a 12-gon, flats 1.6 mm deep, passed before).

>>> [t.difficulty for t in generate_level(2, level=3, seed=0)]
[3.0, 3.0]
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

from posttrain.envs.cad._parts import Part, block, bracket, disc, plate
from posttrain.types import Task

LEVELS = (1, 6)
"""(easiest, hardest): the number of features on the part."""
_TRIES = 60


# ---------------------------------------------------------------- feature sets and tasks

_FEATURES: dict[str, tuple[tuple[str, ...], dict[str, str], Callable[[random.Random, tuple[str, ...]], Part | None]]] = {
    "plate": (("edges", "corners", "centre", "bore", "band+", "band-"), {"bore": "centre"}, plate),
    "disc": (("chamfer", "bore", "hub", "keyway", "bolts", "counterbores"), {"keyway": "bore",
                                                                               "counterbores": "bolts"}, disc),
    "block": (("edges", "crossX", "crossY", "centre", "step", "vertical"), {}, block),
    "bracket": (("base", "wall", "gusset", "strip"), {}, bracket),
}
"""base -> (its features, a feature -> the feature it needs, the builder)."""


def _feature_sets(kind: str, level: int) -> list[tuple[str, ...]]:
    names, needs, _ = _FEATURES[kind]
    return [c for c in itertools.combinations(names, level) if all(needs.get(f, f) in c for f in c)]


def make_part(rng: random.Random, level: int) -> Part:
    """A part with ``level`` features (retries placements that do not fit)."""
    kinds = [k for k in _FEATURES if _feature_sets(k, level)]
    for _ in range(_TRIES):
        kind = rng.choice(kinds)
        names = rng.choice(_feature_sets(kind, level))
        part = _FEATURES[kind][2](rng, names)
        if part is not None and len(part.features) == level:
            return part
    raise RuntimeError(f"cad generator: no part with {level} features in {_TRIES} tries")  # pragma: no cover


def part_for(seed: int, level: int, index: int) -> Part:
    """The part of task ``index`` of ``generate_level(..., level=level, seed=seed)`` (the ablation tests)."""
    return make_part(random.Random(f"cad/{seed}/{level}/{index}"), level)


def _task(part: Part, tid: str, level: int, *, without: str | None = None) -> Task:
    from posttrain.envs.cad._domain import DEFAULT_IOU, DEFAULT_LIMITS, DEFAULT_TOLERANCE_MM, fenced

    gold = part.script(without=without)
    meta = {"generator": f"cad/{part.kind}", "level": level, "features": [f.name for f in part.features]}
    if without is not None:
        meta["canary"] = f"the gold has no {without!r}, which the prompt describes"
    return Task(id=tid, domain="cad", prompt=part.description(),
                fields={"gold": gold, "iou": DEFAULT_IOU, "tolerance_mm": DEFAULT_TOLERANCE_MM,
                        "holes": part.holes(without=without), "rounds": part.rounds(without=without),
                        "round_bodies": part.round_bodies(without=without)},
                reference=None if without is not None else fenced(gold), difficulty=float(level),
                tags=("cad", part.kind, f"level-{level}", *(("canary",) if without is not None else ())),
                limits=DEFAULT_LIMITS, metadata=meta)


def generate_level(n: int, *, level: int, seed: int = 0) -> list[Task]:
    """``n`` tasks with ``level`` features each (``HasLevels``)."""
    lo, hi = LEVELS
    if not lo <= level <= hi:
        raise ValueError(f"cad level must be in [{lo}, {hi}], got {level!r}")
    return [_task(part_for(seed, level, i), f"cad-l{level}-{seed}-{i}", level) for i in range(n)]


def canary_tasks(n: int, *, seed: int = 0) -> list[Task]:
    """``n`` canaries (``HasCanaries``): the prompt describes a part, the gold lacks one of its
    features, so the described part fails (tests/envs/test_cad.py renders such ablations) and only a
    response that is not the description's can pass; no reference. Tagged ``canary``."""
    rng = random.Random(f"cad/canary/{seed}")
    out = []
    for i in range(n):
        level = rng.randint(2, LEVELS[1])
        part = make_part(rng, level)
        out.append(_task(part, f"cad-canary-{seed}-{i}", level, without=rng.choice(part.features).name))
    return out


def generate_tasks(n: int, seed: int = 0) -> list[Task]:
    """``n`` tasks, levels drawn uniformly from ``LEVELS``."""
    rng = random.Random(f"cad/{seed}")
    out = []
    for i in range(n):
        level = rng.randint(*LEVELS)
        out.append(_task(make_part(rng, level), f"cad-gen-{seed}-{i}", level))
    return out
