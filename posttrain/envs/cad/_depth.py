"""How deep a thin region of wrong material reaches (``_mesh.compare``'s shape check, beside its thickness).

The shape check fails a region of missing or extra material only where it is thicker than 2 x the task's
tolerance; ``depth_lines`` fails one, however thin, that reaches more than ``DEPTH`` tolerances into the
gold or out from its surface.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any, Protocol

import numpy as np


class Solid(Protocol):
    """What is read of a ``_mesh.Solid`` here: its manifold and bounding box."""

    manifold: Any  # manifold3d.Manifold
    lo: tuple[float, float, float]
    hi: tuple[float, float, float]


DEPTH = 3.0
"""How far, in tolerances, a region of wrong material may reach into the gold (missing) or out from its surface
(extra), however thin it is (``depth_lines``): the shape check passes a region under 2 x ``tolerance_mm`` thick
whatever its extent, so a comb of 0.9 mm slits sawn half-way up into a part's underside (IoU 0.955), or a 0.9 mm
fin standing 6 mm off a face, passed every check (``tests/envs/test_cad_attacks11.py``). An honest part's
differences hug the surface: a coarser faceting's flats (a 100 mm disc at 14 segments: 1.25 mm deep), a hole
within its tolerance, a chamfer drawn 1.2 mm for 2.5 (0.92 mm)."""
_DEEP_MM3 = 1e-3
"""Wrong material beyond ``DEPTH`` of less volume than this is a boolean's rounding, not a region."""
_BALL = np.array([d for d in itertools.product((-1.0, 0.0, 1.0), repeat=3) if any(d)])
_BALL /= np.linalg.norm(_BALL, axis=1, keepdims=True)
"""The 26 directions (to the faces, edges and corners of a cube) along which a point of a region is tested
``DEPTH`` deep (``_ball_erode``): the cube's 8 corners alone (``_mesh._erode``) straddle a 3 mm hole, and counted a
point 0.5 mm from its wall as 1.5 mm deep."""
_deep_cache: OrderedDict[int, tuple[Solid, float, Any, Any]] = OrderedDict()


def _ball_erode(region: Any, reach: float) -> Any:
    """The points of ``region`` from which ``reach`` along each of the ``_BALL`` directions is inside it."""
    import manifold3d as m3

    moved = [region.translate(tuple(float(x) for x in -reach * d)) for d in _BALL]
    return m3.Manifold.batch_boolean(moved, m3.OpType.Intersect)


def _deep_cores(gold: Solid, tol: float) -> tuple[Any, Any]:
    """The gold, and the space around it (its bounding box grown), each eroded ``DEPTH * tol`` (``_ball_erode``):
    where a point of missing or extra material is deeper than that. Kept for the last few golds a worker
    checked (they cost a part's booleans)."""
    hit = _deep_cache.get(id(gold))
    if hit is not None and hit[0] is gold and hit[1] == tol:
        return hit[2], hit[3]
    import manifold3d as m3

    reach = DEPTH * tol
    lo, hi = np.asarray(gold.lo) - 3 * reach, np.asarray(gold.hi) + 3 * reach
    space = m3.Manifold.cube(tuple(float(x) for x in hi - lo)).translate(tuple(float(x) for x in lo)) - gold.manifold
    cores = _ball_erode(gold.manifold, reach), _ball_erode(space, reach)
    _deep_cache[id(gold)] = (gold, tol, *cores)
    while len(_deep_cache) > 4:
        _deep_cache.popitem(last=False)
    return cores


def depth_lines(missing: Any, extra: Any, gold: Solid, tol: float) -> list[str]:
    """Where ``missing`` material (a manifold: the gold less the part) reaches more than ``DEPTH * tol`` into
    the gold, or ``extra`` material (the part less the gold) that far out from it (a line for each), however
    thin the region is."""
    inside, outside = _deep_cores(gold, tol)
    lines = []
    for what, region, core, where in (("missing", missing, inside, "into the part"),
                                      ("extra", extra, outside, "out from its surface")):
        deep = region ^ core if not region.is_empty() else region
        if deep.is_empty() or deep.volume() <= _DEEP_MM3:
            continue
        x0, y0, z0, x1, y1, z1 = deep.bounding_box()
        lines.append(f"material {what} around ({(x0 + x1) / 2:.1f}, {(y0 + y1) / 2:.1f}, {(z0 + z1) / 2:.1f}) "
                     f"reaches more than {DEPTH * tol:g} mm {where} (thin as it may be: {region.volume():.1f} mm^3 "
                     f"{what} in all)")
    return lines
