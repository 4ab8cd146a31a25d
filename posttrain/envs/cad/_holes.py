"""The holes a task states, measured on the part: each one's diameter and place, as a CAD user checks them.

Why: the shape check (``_mesh.shape_lines``) passes any difference thinner than 2 x ``tolerance_mm``
(1 mm by default), because a coarser faceting of a curved face differs from the gold's by slivers
that thin; so a 3 mm hole drawn 1.8 or 4.2 mm passed (a 0.6 mm ring of the IoU's 1%). A hole is
held to its stated diameter within ``hole_tolerance(d)`` (max(0.1 mm, 2 %), the radius within half
of it) and to its stated axis as closely.

How a circle is measured whatever its faceting: OpenSCAD puts a circle's vertices on the circle
(``circle``, ``cylinder``, ``offset``, ``hull`` of them) at any ``$fn``, ``$fa`` and ``$fs``; what a
coarse faceting changes is the chords between them. So the part is sliced across the hole's axis at
a station where the task says the hole is on its own (not in its counterbore, clear of other
features); the loop around the axis is the hole's; points where the slice only crossed a triangle's
diagonal (they lie on a chord) are dropped; every vertex left must lie at the stated radius from the
axis (a slot: from the nearer of its two end centres) within the tolerance, except where ``ignore``
says another feature cuts the wall (a keyway in a bore); and no edge of the loop may come closer to
the axis than the inscribed radius of the coarsest faceting OpenSCAD makes by default (5 segments,
r cos 36 degrees). A hole drawn to another diameter, or off its axis by more than the tolerance,
fails at every faceting; the right hole passes at every faceting of 5 segments or more.

A hole, as the task's ``holes`` field lists it (``_gen.py`` writes them for every round hole and
slot it makes): ``{"axis": "x" | "y" | "z", "at": [x, y, z], "d": mm}``, ``at`` a point of the axis
at the station; for a slot, ``"to": [x, y, z]``, the other end's centre at the same station; and
optionally ``"ignore": [[x0, y0, z0], [x1, y1, z1]]``, a box whose wall vertices are another
feature's. Not here: holes that are not round (the shape check holds pockets and steps to ~1 mm).

>>> parse_holes([{"axis": "z", "at": [0, 0, 2], "d": 3}])
[{'axis': 'z', 'at': [0.0, 0.0, 2.0], 'd': 3.0}]
>>> hole_tolerance(3.0), hole_tolerance(20.0)
(0.05, 0.2)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

FRAMES = {"z": (0, 1, 2), "x": (1, 2, 0), "y": (2, 0, 1)}
"""axis -> the part's coordinates (u, v, w) of the slice plane and the axis: a cyclic permutation, so
the turned part keeps its orientation."""
COARSEST = math.cos(math.pi / 5)
"""The inscribed radius of OpenSCAD's coarsest default faceting (5 segments), over the radius."""
MAX_HOLES = 64


def hole_tolerance(d: float) -> float:
    """How far a hole's wall may be from its stated radius: the diameter within max(0.1 mm, 2 %)."""
    return max(0.05, 0.01 * d)


def _point(value: Any) -> list[float] | None:
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 3:
        return None
    if not all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in value):
        return None
    return [float(x) for x in value]


def parse_holes(value: Any) -> list[dict[str, Any]]:
    """The holes of a task record, normalised (floats, no unknown keys); ``ValueError`` says what was
    expected where they are not."""
    if not isinstance(value, list) or len(value) > MAX_HOLES:
        raise ValueError(f"a list of at most {MAX_HOLES} holes")
    out = []
    for i, hole in enumerate(value):
        if not isinstance(hole, dict) or not {"axis", "at", "d"} <= set(hole) <= {"axis", "at", "d", "to", "ignore"}:
            raise ValueError(f"hole {i}: an object with axis, at, d and optionally to, ignore")
        d, at = hole["d"], _point(hole["at"])
        if hole["axis"] not in FRAMES or at is None or isinstance(d, bool) or not isinstance(d, int | float) \
                or not 0 < d < 1e4:
            raise ValueError(f"hole {i}: axis x, y or z, at a point [x, y, z], d a diameter in mm")
        item: dict[str, Any] = {"axis": hole["axis"], "at": at, "d": float(d)}
        if "to" in hole:
            to = _point(hole["to"])
            w = FRAMES[hole["axis"]][2]
            if to is None or to[w] != at[w]:
                raise ValueError(f"hole {i}: to, the slot's other end centre, at the same station as at")
            item["to"] = to
        if "ignore" in hole:
            box = hole["ignore"]
            corners = [_point(c) for c in box] if isinstance(box, list) and len(box) == 2 else [None]
            if any(c is None for c in corners):
                raise ValueError(f"hole {i}: ignore, a box [[x0, y0, z0], [x1, y1, z1]]")
            item["ignore"] = corners
        out.append(item)
    return out


def _turned(manifold: Any, axis: str) -> Any:
    """``manifold`` turned so that ``axis`` is its Z (the slice plane's u, v are its X, Y)."""
    if axis == "z":
        return manifold
    m = np.zeros((3, 4))
    for row, col in enumerate(FRAMES[axis]):
        m[row, col] = 1.0
    return manifold.transform(m)


def _area(loop: np.ndarray) -> float:
    x, y = loop[:, 0], loop[:, 1]
    return 0.5 * float(np.dot(x, np.roll(y, -1)) - np.dot(np.roll(x, -1), y))


def _inside(loop: np.ndarray, p: np.ndarray) -> bool:
    """Even-odd ray casting along +u."""
    a, b = loop, np.roll(loop, -1, axis=0)
    crosses = (a[:, 1] > p[1]) != (b[:, 1] > p[1])
    with np.errstate(divide="ignore", invalid="ignore"):
        u = a[:, 0] + (p[1] - a[:, 1]) * (b[:, 0] - a[:, 0]) / (b[:, 1] - a[:, 1])
    return bool(np.count_nonzero(crosses & (u > p[0])) % 2)


def _corners(loop: np.ndarray) -> np.ndarray:
    """The loop without the points where it runs straight on (a slice crossing a triangle's diagonal)."""
    prev, nxt = loop - np.roll(loop, 1, axis=0), np.roll(loop, -1, axis=0) - loop
    cross = prev[:, 0] * nxt[:, 1] - prev[:, 1] * nxt[:, 0]
    norms = np.linalg.norm(prev, axis=1) * np.linalg.norm(nxt, axis=1)
    keep = np.abs(cross) > 1e-6 * np.maximum(norms, 1e-12)
    return loop[keep] if keep.sum() >= 3 else loop


def _to_points(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distances of points ``p`` (N, 2) to the segment ``a``-``b``."""
    ab = b - a
    t = np.clip(((p - a) @ ab) / max(float(ab @ ab), 1e-18), 0.0, 1.0)
    return np.linalg.norm(p - (a + t[:, None] * ab), axis=1)


def _edges_to_segment(loop: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """The least distance from the loop's edges to the segment ``a``-``b`` (0 where they cross)."""
    p, q = loop, np.roll(loop, -1, axis=0)

    def side(o: np.ndarray, s: np.ndarray, t: np.ndarray) -> np.ndarray:
        return (s[..., 0] - o[..., 0]) * (t[..., 1] - o[..., 1]) - (s[..., 1] - o[..., 1]) * (t[..., 0] - o[..., 0])

    if np.any((side(p, q, a) * side(p, q, b) < 0) & (side(a, b, p) * side(a, b, q) < 0)):
        return 0.0
    ends = np.minimum(_to_points(p, a, b), _to_points(q, a, b))
    pq = q - p
    for c in (a, b):  # the segment's ends to each edge
        t = np.clip(np.einsum("ij,ij->i", c - p, pq) / np.maximum(np.einsum("ij,ij->i", pq, pq), 1e-18), 0, 1)
        ends = np.minimum(ends, np.linalg.norm(c - (p + t[:, None] * pq), axis=1))
    return float(ends.min())


def _where(hole: dict[str, Any]) -> str:
    at = ", ".join(f"{x:g}" for x in hole["at"])
    kind = f"slot {hole['d']:g} mm wide" if "to" in hole else f"hole of diameter {hole['d']:g} mm"
    return f"the {kind} along {hole['axis'].upper()} at ({at})"


def hole_problem(turned: Any, hole: dict[str, Any]) -> str | None:
    """Why the part ``turned`` (by ``_turned`` for the hole's axis) does not have ``hole``, or None."""
    u, v, w = FRAMES[hole["axis"]]
    at = np.array(hole["at"])
    a = at[[u, v]]
    b = np.array(hole["to"])[[u, v]] if "to" in hole else a
    centre = (a + b) / 2
    loops = [np.asarray(p, dtype=float) for p in turned.slice(float(at[w])).to_polygons()]
    around = [p for p in loops if len(p) >= 3 and _inside(p, centre)]
    if len(around) % 2:  # inside an odd number of loops: in material
        return f"{_where(hole)}: the part is solid there"
    if not around:
        return f"{_where(hole)}: the part is not there"
    loop = min(around, key=lambda p: abs(_area(p)))
    r, tol = hole["d"] / 2, hole_tolerance(hole["d"])
    wall = _corners(loop)
    if "ignore" in hole:
        lo, hi = np.minimum(*hole["ignore"]), np.maximum(*hole["ignore"])
        lo, hi = lo[[u, v]] - tol, hi[[u, v]] + tol
        wall = wall[~np.all((wall >= lo) & (wall <= hi), axis=1)]
    radius = np.minimum(np.linalg.norm(wall - a, axis=1), np.linalg.norm(wall - b, axis=1))
    inner = _edges_to_segment(loop, a, b)
    if len(radius) and np.abs(radius - r).max() <= tol and inner >= COARSEST * r - tol:
        return None
    if not len(radius):
        corners = "none of its wall's corners is the hole's"
    elif radius.max() - radius.min() < 0.005:
        corners = f"its wall's corners are {2 * radius.max():.2f} mm across"
    else:
        corners = f"its wall's corners are {2 * radius.min():.2f} to {2 * radius.max():.2f} mm across"
    return (f"{_where(hole)}: measured from the stated axis, {corners} and its narrowest point {2 * inner:.2f} mm "
            f"(specified: {hole['d']:g} mm +/- {2 * tol:g} mm, on that axis)")


def hole_lines(manifold: Any, holes: Sequence[dict[str, Any]]) -> list[str]:
    """One line per stated hole that the part does not have (module docstring)."""
    turned: dict[str, Any] = {}
    lines = []
    for hole in holes:
        if hole["axis"] not in turned:
            turned[hole["axis"]] = _turned(manifold, hole["axis"])
        problem = hole_problem(turned[hole["axis"]], hole)
        if problem:
            lines.append(problem)
    return lines
