"""The holes a task states, measured on the part along their length: each one's diameter and place,
as a CAD user checks them.

Why: the shape check (``_mesh.shape_lines``) passes any difference thinner than 2 x ``tolerance_mm``
(1 mm by default), because a coarser faceting of a curved face differs from the gold's by slivers
that thin; so a 3 mm hole drawn 1.8 or 4.2 mm passed (a 0.6 mm ring of the IoU's 1%). A hole is
held to its stated diameter within ``hole_tolerance(d)`` (max(0.1 mm, 2 %), the radius within half
of it) and to its stated axis as closely, over the whole stretch of its axis where the task says it
is its plain self (``span``): measured at one station, a 1.8 mm hole widened to 3 mm in a 1 mm band
around that station passed, and a fixed station can be learned.

How a circle is measured whatever its faceting: OpenSCAD puts a circle's vertices on the circle
(``circle``, ``cylinder``, ``offset``, ``hull`` of them) at any ``$fn``, ``$fa`` and ``$fs``; what a
coarse faceting changes is the chords between them. Two measurements, both over the span less
``MARGIN_MM`` at each end (a feature that ends there, a counterbore or a chamfered mouth, may be off by
the domain's default tolerance):

- slices: the part is sliced across the axis at ``STATIONS`` stations spread over that stretch, ends
  included; the loop around the axis is the hole's; points where the slice only crossed a triangle's
  diagonal (they lie on a chord) are dropped; every vertex left must lie at the stated radius from
  the axis (a slot: from the nearer of its two end centres) within the tolerance, except where
  ``ignore`` says another feature cuts the wall (a keyway in a bore); and no edge of the loop may
  come closer to the axis than the inscribed radius of the coarsest faceting a hole of its radius may
  have (``round_segments``: OpenSCAD's default for the radius, at most ``ROUND_SEGMENTS``, less the
  tolerance; a hub's bound; a slot: 5 segments). Held to 5 segments at every radius, the gold with
  its 4-9 mm holes drawn with ``$fn = 5`` passed 5 of 8 generated tasks with holes (a 9 mm hole 7.28
  mm across its flats: 19 % narrow where the diameter is held to 2 %);
- the wall between them: every vertex of the part in that stretch and within ``REACH_MM`` of the
  hole's radius must be on the radius (the right hole has none there: its wall's vertices are where
  it ends). A hole changed between stations (a band of another diameter, a step, a groove) has
  vertices where it changes; one with no vertex inside the stretch is ruled between its ends, and a
  slice shows it.
- open to its size end to end: a rod on the axis, over the whole span (its ends, which the stations
  leave out, included), of the radius the slices hold the hole's narrowest point to (``clear_radius``:
  the coarsest faceting's inscribed radius less the tolerance), meets no material (``_bore_problem``): a
  through-hole closed by a skin in that margin, its genus given back by a pinhole, passed; so did one
  narrowed there by a lip (0.45 mm thick at each face, a 10 mm hole open 4.5 mm across, IoU 0.98: 40 of
  45 generated tasks with round holes, levels 1-4 of seeds 31, 7, 11 and 5, all their round holes so lipped)
  while the rod was 0.4 r. A mouth that only widens (a chamfer, a counterbore) leaves it in air.

A hole drawn to another diameter, or off its axis by more than the tolerance, in any part of its
span more than ``MARGIN_MM`` from the ends, fails at every faceting (within the margin: narrowed past
``clear_radius``); the right hole passes at
OpenSCAD's default faceting for its radius and at any finer one (10 segments or more at every radius,
5 for a hole under 3.2 mm). The gold's own check is the same every verify: it is kept per
mesh (``hole_lines`` memoises by a digest of the mesh and the holes).

A hole, as the task's ``holes`` field lists it (``_gen.py`` writes them for every round hole and
slot it makes): ``{"axis": "x" | "y" | "z", "at": [x, y, z], "d": mm, "span": [w0, w1]}``, ``at`` a
point of the axis, ``span`` the stretch of the axis's coordinate (``w0 < w1``, ``at``'s in it) where
the hole is its plain self: through the material, clear of its counterbore and of other features
(no other feature's vertex within ``REACH_MM`` of its wall); for a slot, ``"to": [x, y, z]``, the
other end's centre, ``at`` and ``to`` at the same coordinate along the axis; and optionally
``"ignore": [[x0, y0, z0], [x1, y1, z1]]``, a box whose wall vertices are another feature's. A hole
without ``span`` (task files written before it) is refused in one line naming it. Not here: holes
that are not round (the shape check holds pockets and steps to ~1 mm).

Round outer features (a hub, a boss: the task's ``rounds``, written as holes without ``to``) are held
the same way from outside (``_round_problem``): over their span less ``MARGIN_MM``, no material
between ``hole_tolerance(d)`` and ``REACH_MM`` outside the radius, and material all round just inside
``r cos(pi / n) - hole_tolerance(d)``, ``n`` the segments OpenSCAD's default gives that radius, at most
``ROUND_SEGMENTS``. The shape check alone passed a 14 mm hub drawn with ``$fn = 8`` (15 of 16 hubs and
bosses) or 6 (3 of 16): its chords are under 1 mm deep.

Round bodies (a disc's outline: the task's ``round_bodies``, in the form of ``rounds``, and optionally
``"d2"``: a cone's diameter at the span's end, ``d`` at its start, a chamfer) are held the same
way to OpenSCAD's default faceting for their radius, uncapped (``openscad_segments``: 30 segments over
a 9.5 mm radius): the verifier gives each a ``segments`` key (``body_checks``), which a task file may
not. Held to 12 segments, a 40-100 mm disc drawn with ``$fn = 12`` (flats 0.7-1.7 mm deep, IoU 0.955)
passed 6 of 12 disc tasks, and its chamfer's cone alone drawn with ``$fn = 12`` (or 8) passed 11 (5) of 11
chamfered ones; now 14 segments or more drawn on the circle pass (16: 1.9 % of the radius deep) and 13 or
fewer fail. What is held is the diameter's tolerance band, not a roundness finer than it: a polygon drawn
larger, its corners and its flats both within ``hole_tolerance(d)`` of the circle, passes this check from 11
segments (a 12-gon of circumradius 1.015 r passed the whole of a 60 mm disc task, cad-l4-31-4 of seed 31:
flats 58.8 mm across, corners 60.9, both within its 60 +/- 1.2 mm), as it is within the task's tolerance
everywhere.

A round body with ``"quadrant": [su, sv]`` (each 1 or -1, along the slice plane's two coordinates: X and
Y for an axis along Z) is a rounded edge, a plate's or block's rounded vertical edge: its circle is the
rounding's, about the arc's centre, and only the quarter on those sides of the centre is held (there the
outline is the arc; the other three quarters are the part's inside). Held as a round body is, to OpenSCAD's
default faceting for its radius (16-30 segments a turn, 4-8 a corner): the shape check alone passed a
rounding drawn with ``$fn = 8`` (two flats a corner, 0.08 r deep) on 13 of 13 generated tasks with
rounded edges, ``$fn = 12`` on 8 of 8; now 8 fails at every radius the generator draws (5 mm up), 12 from 6
mm up (at 5 mm its flats are within the tolerance), and 16 passes.

>>> parse_holes([{"axis": "z", "at": [0, 0, 2], "d": 3, "span": [0, 4]}])
[{'axis': 'z', 'at': [0.0, 0.0, 2.0], 'd': 3.0, 'span': [0.0, 4.0]}]
>>> hole_tolerance(3.0), hole_tolerance(20.0)
(0.05, 0.2)
>>> stations({"span": [0, 6]}).tolist()
[0.5, 1.75, 3.0, 4.25, 5.5]
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from posttrain.strict_json import finite_number

FRAMES = {"z": (0, 1, 2), "x": (1, 2, 0), "y": (2, 0, 1)}
"""axis -> the part's coordinates (u, v, w) of the slice plane and the axis: a cyclic permutation, so
the turned part keeps its orientation."""
MAX_HOLES = 64
STATIONS = 5
"""Slices per hole, evenly spread over its measured stretch, both ends included."""
MARGIN_MM = 0.5
"""What is not measured at each end of a hole's span (a quarter of the span at most): the domain's
default ``tolerance_mm``, how far a feature ending there (a counterbore's floor, a chamfered mouth)
may be off."""
REACH_MM = 1.5
"""How far outside a hole's radius its wall's vertices are looked for: past the 1 mm the shape check
lets through, short of the 2 mm the generator keeps between features (``_parts.GAP``)."""
BORE_SKIN_MM = 1e-6
"""Most material, as a thickness across the hole, that its span may hold (numerical slivers only: the
right hole leaves the rod in air, 0 exactly). It was 0.01 mm: a skin of 9 um, or of 1 um, across the
hole passed (the stop hook's read); a skin thinner than this is below the STL's float32 resolution at
a part's size."""
ROUND_SEGMENTS = 12
"""The coarsest faceting of a round outer feature that passes (OpenSCAD's default gives 12 or more
to every radius over 3.8 mm); with the tolerance, 10 segments pass and 9 do not."""
_RING_MM = 0.05
"""The width of the ring just inside a round feature's wall that must be all material."""
_MEMO_SIZE = 64
_memo: OrderedDict[bytes, tuple[tuple[int, str], ...]] = OrderedDict()
"""digest of (mesh, holes) -> lines: the gold's check, which every verify of its task repeats."""


def hole_tolerance(d: float) -> float:
    """How far a hole's wall may be from its stated radius: the diameter within max(0.1 mm, 2 %)."""
    return max(0.05, 0.01 * d)


def stations(hole: dict[str, Any]) -> np.ndarray:
    """Where along its axis ``hole`` is sliced: its span less ``MARGIN_MM`` (at most a quarter) at each end."""
    lo, hi = hole["span"]
    margin = min(MARGIN_MM, (hi - lo) / 4)
    return np.linspace(lo + margin, hi - margin, STATIONS)


def _point(value: Any, n: int = 3) -> list[float] | None:
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != n:
        return None
    if not all(finite_number(x) for x in value):
        return None
    return [float(x) for x in value]


def _parse_hole(i: int, hole: Any, what: str = "hole") -> dict[str, Any]:
    keys = {"axis", "at", "d", "span", "to", "ignore"} | ({"d2", "quadrant"} if what == "round body" else set())
    if not isinstance(hole, dict) or not {"axis", "at", "d"} <= set(hole) <= keys:
        raise ValueError(f"{what} {i}: an object with axis, at, d, span" + (" and optionally to, ignore" if what == "hole" else ""))
    d, at = hole["d"], _point(hole["at"])
    if not isinstance(hole["axis"], str) or hole["axis"] not in FRAMES or at is None or isinstance(d, bool) or not isinstance(d, int | float) \
            or not 0 < d < 1e4:
        raise ValueError(f"{what} {i}: axis x, y or z, at a point [x, y, z], d a diameter in mm")
    w = FRAMES[hole["axis"]][2]
    if "span" not in hole:
        raise ValueError(f"{what} {i}: span [w0, w1], where along its axis the {what} is its plain self (missing: "
                         "task files written before holes had a span must be generated again)")
    span = _point(hole["span"], 2)
    if span is None or not span[0] <= at[w] <= span[1] or not span[0] < span[1]:
        raise ValueError(f"{what} {i}: span [w0, w1], w0 < w1, the stretch of the axis where the {what} is its "
                         f"plain self, at's {'xyz'[w]} in it")
    item: dict[str, Any] = {"axis": hole["axis"], "at": at, "d": float(d), "span": span}
    if "to" in hole:
        to = _point(hole["to"])
        if to is None or to[w] != at[w]:
            raise ValueError(f"{what} {i}: to, the slot's other end centre, at the same {'xyz'[w]} as at")
        item["to"] = to
    if "ignore" in hole:
        box = hole["ignore"]
        corners = [_point(c) for c in box] if isinstance(box, list) and len(box) == 2 else [None]
        if any(c is None for c in corners):
            raise ValueError(f"{what} {i}: ignore, a box [[x0, y0, z0], [x1, y1, z1]]")
        item["ignore"] = corners
    if "d2" in hole:  # a round body's cone (a chamfer): its diameter at span's end, d at its start
        d2 = hole["d2"]
        if isinstance(d2, bool) or not isinstance(d2, int | float) or not 0 < d2 < 1e4:
            raise ValueError(f"{what} {i}: d2, the diameter at the span's end, in mm")
        item["d2"] = float(d2)
    if "quadrant" in hole:  # a rounded edge: the quarter of the circle where the part's outline is the arc
        quadrant = hole["quadrant"]
        if not isinstance(quadrant, list) or len(quadrant) != 2 or any(
                isinstance(x, bool) or x not in (-1, 1) for x in quadrant):
            raise ValueError(f"{what} {i}: quadrant [su, sv], each 1 or -1: the quarter of the circle, along the "
                             "slice plane's two coordinates, where the part's outline is the arc")
        item["quadrant"] = [int(x) for x in quadrant]
    return item


def parse_holes(value: Any) -> list[dict[str, Any]]:
    """The holes of a task record, normalised (floats, no unknown keys); ``ValueError`` says what was
    expected where they are not."""
    if not isinstance(value, list) or len(value) > MAX_HOLES:
        raise ValueError(f"a list of at most {MAX_HOLES} holes")
    return [_parse_hole(i, hole) for i, hole in enumerate(value)]


def parse_rounds(value: Any, what: str = "round feature") -> list[dict[str, Any]]:
    """The round outer features of a task record (``{"axis", "at", "d", "span"}``, as a hole without
    ``to`` or ``ignore``), normalised; ``ValueError`` says what was expected where they are not, calling
    each a ``what`` (a task's ``round_bodies``: ``"round body"``).

    >>> parse_rounds([{"axis": "z", "at": [0, 0, 8], "d": 14, "span": [5, 11]}])[0]["d"]
    14.0
    """
    if not isinstance(value, list) or len(value) > MAX_HOLES or any(
            isinstance(r, dict) and {"to", "ignore"} & set(r) for r in value):
        plural = what[:-1] + "ies" if what.endswith("y") else what + "s"
        raise ValueError(f"a list of at most {MAX_HOLES} {plural}, each with axis, at, d and span")
    return [_parse_hole(i, r, what) for i, r in enumerate(value)]


def openscad_segments(r: float) -> int:
    """The segments OpenSCAD's default faceting ($fa = 12, $fs = 2: ``ceil(max(min(360 / 12, 2 pi r / 2),
    5))``) gives a circle of radius ``r``.

    >>> openscad_segments(7.0), openscad_segments(47.5), openscad_segments(1.5)
    (22, 30, 5)
    """
    return math.ceil(max(min(30.0, math.pi * r), 5.0))


def round_segments(r: float) -> int:
    """The coarsest faceting a round feature of radius ``r`` may have: OpenSCAD's default
    (``openscad_segments``), at most ``ROUND_SEGMENTS``.

    >>> round_segments(7.0), round_segments(1.5)
    (12, 5)
    """
    return min(ROUND_SEGMENTS, openscad_segments(r))


def clear_radius(hole: dict[str, Any]) -> float:
    """How close to its axis (a slot: to the segment between its end centres) ``hole``'s wall may come: the
    inscribed radius of the coarsest faceting its radius may have (``round_segments``; a slot: 5 segments),
    less ``hole_tolerance(d)``. The slices hold its narrowest point to it, the bore check its whole span.

    >>> round(clear_radius({"d": 10.0}), 3), round(clear_radius({"d": 3.0}), 3)
    (4.73, 1.164)
    """
    r = hole["d"] / 2
    segments = 5 if "to" in hole else round_segments(r)  # a slot keeps the pentagon's (tests/envs/test_cad.py)
    return math.cos(math.pi / segments) * r - hole_tolerance(hole["d"])


def body_checks(bodies: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The round bodies of a task (``parse_rounds``) as the round features the check holds to OpenSCAD's
    default faceting for their radius (``segments``: ``openscad_segments``, not capped at
    ``ROUND_SEGMENTS``).

    >>> body_checks([{"axis": "z", "at": [0, 0, 3], "d": 95.0, "span": [0, 6]}])[0]["segments"]
    30
    """
    return [{**b, "segments": openscad_segments(b["d"] / 2)} for b in bodies]


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
    u, v, _ = ("xyz"[i].upper() for i in FRAMES[hole["axis"]])
    ui, vi, _ = FRAMES[hole["axis"]]
    place = f"{u} = {hole['at'][ui]:g}, {v} = {hole['at'][vi]:g}"
    if "to" in hole:
        return (f"the slot {hole['d']:g} mm wide along {hole['axis'].upper()}, its end centres at {place} and "
                f"{u} = {hole['to'][ui]:g}, {v} = {hole['to'][vi]:g}")
    return f"the hole of diameter {hole['d']:g} mm along {hole['axis'].upper()} at {place}"


def _across(radius: np.ndarray) -> str:
    if radius.max() - radius.min() < 0.005:
        return f"{2 * radius.max():.2f} mm across"
    return f"{2 * radius.min():.2f} to {2 * radius.max():.2f} mm across"


class _Slice:
    """The loops of the turned part's slice at one station, with their bounding boxes."""

    def __init__(self, turned: Any, station: float) -> None:
        loops = (np.asarray(p, dtype=float) for p in turned.slice(station).to_polygons())
        self.loops = [p for p in loops if len(p) >= 3]
        self.lo = np.array([p.min(axis=0) for p in self.loops]).reshape(-1, 2)
        self.hi = np.array([p.max(axis=0) for p in self.loops]).reshape(-1, 2)

    def around(self, c: np.ndarray) -> list[np.ndarray]:
        """The loops around the point ``c``."""
        boxed = np.flatnonzero(np.all((self.lo <= c) & (c <= self.hi), axis=1))
        return [self.loops[i] for i in boxed if _inside(self.loops[i], c)]


def _slice_problem(cut: _Slice, hole: dict[str, Any], station: float) -> str | None:
    """Why the slice at ``station`` (the turned part's) does not hold ``hole``, or None."""
    u, v, w = FRAMES[hole["axis"]]
    where = f"{_where(hole)}, at {'xyz'[w].upper()} = {station:g}"
    a = np.array(hole["at"])[[u, v]]
    b = np.array(hole["to"])[[u, v]] if "to" in hole else a
    around = cut.around((a + b) / 2)
    if len(around) % 2:  # inside an odd number of loops: in material
        return f"{where}: the part is solid there"
    if not around:
        return f"{where}: the part is not there"
    loop = min(around, key=lambda p: abs(_area(p)))
    r, tol = hole["d"] / 2, hole_tolerance(hole["d"])
    wall = _corners(loop)
    if "ignore" in hole:
        lo, hi = np.minimum(*hole["ignore"]), np.maximum(*hole["ignore"])
        lo, hi = lo[[u, v]] - tol, hi[[u, v]] + tol
        wall = wall[~np.all((wall >= lo) & (wall <= hi), axis=1)]
    radius = np.minimum(np.linalg.norm(wall - a, axis=1), np.linalg.norm(wall - b, axis=1))
    inner = _edges_to_segment(loop, a, b)
    if len(radius) and np.abs(radius - r).max() <= tol and inner >= clear_radius(hole):
        return None
    corners = f"its wall's corners are {_across(radius)}" if len(radius) else "none of its wall's corners is the hole's"
    return (f"{where}: measured from the stated axis, {corners} and its narrowest point {2 * inner:.2f} mm "
            f"(specified: {hole['d']:g} mm +/- {2 * tol:g} mm, on that axis)")


def _wall_problem(vertices: np.ndarray, hole: dict[str, Any]) -> str | None:
    """Why the part's ``vertices`` (V, 3) near ``hole``'s wall, between its first and last station,
    are not on it, or None (module docstring)."""
    u, v, w = FRAMES[hole["axis"]]
    lo, hi = stations(hole)[[0, -1]]
    near = vertices[(vertices[:, w] >= lo) & (vertices[:, w] <= hi)]
    a = np.array(hole["at"])[[u, v]]
    b = np.array(hole["to"])[[u, v]] if "to" in hole else a
    r, tol = hole["d"] / 2, hole_tolerance(hole["d"])
    radius = _to_points(near[:, [u, v]], a, b)
    off = (radius < r + REACH_MM) & (np.abs(radius - r) > tol)
    if "ignore" in hole and off.any():
        box_lo, box_hi = np.minimum(*hole["ignore"]) - tol, np.maximum(*hole["ignore"]) + tol
        off &= ~np.all((near >= box_lo) & (near <= box_hi), axis=1)
    if not off.any():
        return None
    axis, along = "xyz"[w].upper(), near[off, w]
    return (f"{_where(hole)}, between {axis} = {lo:g} and {hi:g}: its wall has corners {_across(radius[off])} "
            f"from the stated axis at {axis} = {along.min():.2f} to {along.max():.2f} (specified: {hole['d']:g} "
            f"mm +/- {2 * tol:g} mm along its whole length)")


def _bore_problem(turned: Any, hole: dict[str, Any]) -> str | None:
    """Why ``hole`` is not open to its size along its whole span, ends included, or None. The stations
    stop ``MARGIN_MM`` short of each end, so what a part has there went unseen: a skin closing a
    through-hole (its genus given back by a pinhole), then a lip narrowing its mouth (module docstring).
    A rod on the axis, over exactly the span, of ``clear_radius`` (drawn on its circle with 64 segments,
    its flats 0.1 % inside) must not meet the part: the right hole leaves it in air at any faceting the
    slices pass, off its axis by up to the tolerance, its mouths chamfered or counterbored (they widen it)."""
    import manifold3d as m3

    u, v, _ = FRAMES[hole["axis"]]
    lo, hi = hole["span"]
    rho = clear_radius(hole)
    if rho <= 0:
        return None
    ends = [np.array(hole["at"])[[u, v]]] + ([np.array(hole["to"])[[u, v]]] if "to" in hole else [])
    rods = [m3.Manifold.cylinder(hi - lo, rho, circular_segments=64).translate((float(x), float(y), lo))
            for x, y in ends]
    rod = m3.Manifold.batch_hull(rods) if len(rods) > 1 else rods[0]
    inside = (turned ^ rod).volume()
    blocked = inside / (rod.volume() / (hi - lo))  # the material's thickness, were it a skin across the rod
    if blocked <= BORE_SKIN_MM:
        return None
    axis = "xyz"[FRAMES[hole["axis"]][2]].upper()
    return (f"{_where(hole)}: it is not open {2 * rho:.2f} mm across from {axis} = {lo:g} to {hi:g}, its ends "
            f"included ({inside:.2f} mm^3 of material within {rho:.2f} mm of its axis; specified: {hole['d']:g} mm "
            f"+/- {2 * hole_tolerance(hole['d']):g} mm through)")


def _round_problem(turned: Any, feature: dict[str, Any], holes: Sequence[dict[str, Any]]) -> str | None:
    """Why the round outer ``feature`` is not round to its size along its span (less ``MARGIN_MM``), or
    None: material past ``hole_tolerance(d)`` outside its radius, or a gap in the ring just inside
    ``r cos(pi / n) - hole_tolerance(d)``, ``n`` its ``segments`` (a round body's, ``body_checks``) or
    ``round_segments(r)`` (the ring less the stated holes' cylinders
    and ignore boxes on that axis, which the gold cuts there). A round body with ``d2`` is a cone, its
    radius at each point of the span interpolated between ``d / 2`` and ``d2 / 2``, held the same way."""
    import manifold3d as m3

    u, v, w = FRAMES[feature["axis"]]
    lo, hi = stations(feature)[[0, -1]]
    r, tol, h = feature["d"] / 2, hole_tolerance(feature["d"]), float(hi - lo)
    segments = int(feature.get("segments", round_segments(r)))  # a round body's (``body_checks``)
    c = np.array(feature["at"])[[u, v]]
    fine = 256
    w0, w1 = feature["span"]
    slope = (feature.get("d2", feature["d"]) - feature["d"]) / 2 / (w1 - w0)  # a cone's (a round body's d2)
    r_lo, r_hi = r + slope * (lo - w0), r + slope * (hi - w0)

    def disc(offset: float, scale: float = 1.0) -> Any:
        """The (truncated) cone of the feature's radius at each end of the stretch, times ``scale``, plus ``offset``."""
        a, b = max(r_lo * scale + offset, 1e-3), max(r_hi * scale + offset, 1e-3)
        return m3.Manifold.cylinder(h, a, b, circular_segments=fine).translate((float(c[0]), float(c[1]), float(lo)))

    outer = disc(REACH_MM) - disc(tol, 1 / math.cos(math.pi / fine))
    share = 1.0
    if "quadrant" in feature:  # a rounded edge: its arc is the outline only in that quarter
        share, reach = 0.25, max(r_lo, r_hi) + REACH_MM + 1
        box = m3.Manifold.cube((reach, reach, h + 2)).translate(
            tuple(float(x) for x in (*(c[j] - (reach if s < 0 else 0) for j, s in enumerate(feature["quadrant"])),
                                     lo - 1)))
        outer ^= box
    extra = (turned ^ outer).volume() / (share * math.pi * (r_lo + r_hi) * h)
    k = math.cos(math.pi / segments)
    r_in = max((r_lo + r_hi) / 2 * k - tol, 1e-3)
    ring = disc(-tol, k) - disc(-tol - _RING_MM, k)
    if "quadrant" in feature:
        ring ^= box
    for hole in holes:
        if hole["axis"] != feature["axis"]:
            continue
        a, b = np.array(hole["at"])[[u, v]], np.array(hole.get("to", hole["at"]))[[u, v]]
        cut = [m3.Manifold.cylinder(h + 2, hole["d"] / 2 + hole_tolerance(hole["d"]), circular_segments=32)
               .translate((float(x), float(y), float(lo) - 1)) for x, y in (a, b)]
        ring -= m3.Manifold.batch_hull(cut)
        if "ignore" in hole:
            box_lo = np.minimum(*hole["ignore"])[[u, v, w]] - tol
            box_hi = np.maximum(*hole["ignore"])[[u, v, w]] + tol
            ring -= m3.Manifold.cube(tuple(float(x) for x in box_hi - box_lo)).translate(tuple(float(x) for x in box_lo))
    gap = (ring - turned).volume() / (share * 2 * math.pi * r_in * h)
    if extra <= BORE_SKIN_MM and gap <= BORE_SKIN_MM:
        return None
    axis = "xyz"[w].upper()
    what = ("rounded edge" if "quadrant" in feature else "round body") if "segments" in feature else "round feature"
    size = f"radius {r:g} mm" if "quadrant" in feature else f"diameter {feature['d']:g} mm"
    where = (f"the {what} of {size} along {axis} at {'xyz'[u].upper()} = {c[0]:g}, "
             f"{'xyz'[v].upper()} = {c[1]:g}, between {axis} = {lo:g} and {hi:g}")
    if "quadrant" in feature:  # its centre is the arc's, not the part's
        where = where.replace(" at ", " centred at ", 1)
        if extra > BORE_SKIN_MM:
            return f"{where}: material reaches past its radius (specified: {r:g} mm +/- {tol:g} mm)"
        return (f"{where}: its arc comes inside {r_lo * k - tol:.2f} mm of its centre, or is missing (specified: "
                f"a quarter circle of radius {r:g} mm +/- {tol:g} mm, as round as {segments} segments a full turn "
                "or finer)")
    if extra > BORE_SKIN_MM:
        return f"{where}: material reaches past its diameter (specified: {feature['d']:g} mm +/- {2 * tol:g} mm)"
    inside = f"{2 * (r_lo * k - tol):.2f} mm across" + (f" (at {axis} = {lo:g}; {2 * (r_hi * k - tol):.2f} at {hi:g})"
                                                         if "d2" in feature else "")
    return (f"{where}: its wall comes inside {inside}, or is missing (specified: round, "
            f"{feature['d']:g} mm{' to ' + format(feature['d2'], 'g') + ' mm' if 'd2' in feature else ''} "
            f"+/- {2 * tol:g} mm, as round as {segments} segments or finer)")


def _digest(vertices: np.ndarray, triangles: np.ndarray, holes: Sequence[dict[str, Any]]) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    for array in (vertices, triangles):
        h.update(np.ascontiguousarray(array).tobytes())
        h.update(str(array.shape).encode())
    h.update(json.dumps(list(holes), sort_keys=True).encode())
    return h.digest()


def hole_problems(manifold: Any, holes: Sequence[dict[str, Any]],
                  rounds: Sequence[dict[str, Any]] = ()) -> list[tuple[dict[str, Any], str]]:
    """``(feature, line)`` for each stated hole, then each round outer feature, that the part does not have
    (module docstring). Memoised by a digest of the mesh, the holes and the rounds: the worker checks the
    gold's before every candidate's."""
    if not holes and not rounds:
        return []
    features = [*holes, *rounds]
    mesh = manifold.to_mesh()
    vertices = np.asarray(mesh.vert_properties, dtype=float)[:, :3]
    key = _digest(vertices, np.asarray(mesh.tri_verts), [*holes, {"rounds": list(rounds)}])
    if key in _memo:
        _memo.move_to_end(key)
        return [(features[i], line) for i, line in _memo[key]]
    turned: dict[str, Any] = {}
    slices: dict[tuple[str, float], _Slice] = {}
    found = []
    for i, hole in enumerate(holes):
        axis = hole["axis"]
        if axis not in turned:
            turned[axis] = _turned(manifold, axis)
        problem = None
        for station in stations(hole).tolist():
            if (axis, station) not in slices:
                slices[axis, station] = _Slice(turned[axis], station)
            problem = _slice_problem(slices[axis, station], hole, station)
            if problem:
                break
        problem = problem or _wall_problem(vertices, hole) or _bore_problem(turned[axis], hole)
        if problem:
            found.append((i, problem))
    for i, feature in enumerate(rounds, start=len(holes)):
        axis = feature["axis"]
        if axis not in turned:
            turned[axis] = _turned(manifold, axis)
        problem = _round_problem(turned[axis], feature, holes)
        if problem:
            found.append((i, problem))
    _memo[key] = tuple(found)
    while len(_memo) > _MEMO_SIZE:
        _memo.popitem(last=False)
    return [(features[i], line) for i, line in found]


def hole_lines(manifold: Any, holes: Sequence[dict[str, Any]], rounds: Sequence[dict[str, Any]] = ()) -> list[str]:
    """One line per stated hole, then per round outer feature, that the part does not have (``hole_problems``)."""
    return [line for _, line in hole_problems(manifold, holes, rounds)]


def along(feature: dict[str, Any], points: np.ndarray, tol: float) -> bool:
    """Whether every point lies where a coarse faceting of ``feature``'s stated round surface puts wrong
    material: from its axis (a slot's: the segment between its ends) between ``2 * tol`` inside its radius
    (a polygon drawn on the circle lies inside it; a cone's radius runs from its smaller end's to its larger's;
    never nearer the axis than half the radius) and ``tol`` outside it, within its span widened by ``2 * tol``
    (``_mesh.compare`` lists the feature's own line first for such a region: a boss drawn as an octagon)."""
    u, v, w = FRAMES[feature["axis"]]
    p = np.asarray(points, dtype=float).reshape(-1, 3)
    a = np.array(feature["at"], dtype=float)[[u, v]]
    b = np.array(feature.get("to", feature["at"]), dtype=float)[[u, v]]
    radius = _to_points(p[:, [u, v]], a, b)
    r0, r1 = sorted((feature["d"] / 2, feature.get("d2", feature["d"]) / 2))
    lo, hi = feature["span"]
    near = ((radius >= max(r0 - 2 * tol, r0 / 2)) & (radius <= r1 + tol) & (p[:, w] >= lo - 2 * tol)
            & (p[:, w] <= hi + 2 * tol))
    if "quadrant" in feature:  # a rounded edge's arc is only its quarter
        near &= ((p[:, [u, v]] - a) * np.array(feature["quadrant"]) >= -tol).all(axis=1)
    return bool(near.all())
