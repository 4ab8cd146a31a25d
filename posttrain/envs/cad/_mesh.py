"""The mesh checks of a rendered part against the rendered gold (the worker side of the verifier).

Runs in a ``posttrain.verify._deadline`` worker process (``handle_check``), under a CPU budget and an
address-space limit, because the mesh is the candidate's: its size, its shape and the booleans on it
are under the candidate's control, and the trainer's process must never pay for them (a hang, a
crash in C++, a raise). The STL arrives capped in size by the sandbox (``_render.MAX_STL_BYTES``).

The gate, in order (the first failure is the verdict):

1. a binary STL of at most ``MAX_TRIANGLES`` triangles with finite coordinates (``mesh``);
2. closed and consistently oriented: after merging identical vertices, every directed edge is
   used by exactly one triangle and its reverse by exactly one other, no triangle repeats a
   vertex, and the triangles around each vertex form one fan (two parts touching along an edge
   or at a point fail) (``not_solid``); manifold3d accepts it;
3. each shell (connected surface) encloses a positive volume (an inside-out mesh, an internal
   void: ``inverted``), and the surface does not pass through itself: its union with itself has
   its own volume, and V(G - A) + V(A n G) = V(G), V(A - G) + V(A n G) = V(A) with the gold G
   (``self_intersecting``);
4. the same number of bodies (shells) as the gold (``bodies``).

Then the specification, every failing line reported at once (the first names the error class):

- ``dimensions``: each side of the bounding box within ``tolerance_mm`` of the gold's;
- ``topology``: the same genus (holes through the part, summed over bodies) as the gold;
- ``iou``: exact volume IoU with the gold, V(A n G) / V(A u G), at least ``iou`` (default 0.95);
- ``shape``: no region of missing (G - A) or extra (A - G) material contains a cube of side
  2 x ``tolerance_mm``, axis-aligned or turned 45 degrees about one axis (``DIAGONALS``: a 45-degree
  chamfer drawn 1.9 mm short passed the axis-aligned cube), or a near-round solid 1 to 1.095 times that
  across in every direction (``ROUND``: a slab leaning between an axis and a body diagonal held no cube up
  to 1.44 mm) (each eroded by its corners, a superset of the exact erosion): a hole moved by 2 mm or a
  missing 2 mm chamfer fails even where the IoU stays above 0.99, a slab of wrong material from 1.0-1.1 mm
  thick whatever its lean; facets of a coarser ``$fn`` (slivers well under a millimetre thick) pass. Nor may
  a thinner region reach more than ``DEPTH`` x ``tolerance_mm`` (1.5 mm) into the gold or out from it
  (``_depth.depth_lines``: a comb of 0.9 mm slits sawn into the part, a 0.9 mm fin standing off a face). A region
  along the round surface of a stated feature that fails its own check is listed after it (``compare``);
- ``holes``: each hole the task states (its ``holes`` field) has its diameter within max(0.1 mm, 2 %)
  and sits on its axis, at any faceting (``_holes.py``): the shape check alone passed a 3 mm hole
  drawn 1.8 or 4.2 mm; and each round outer feature it states (``rounds``: a hub, a boss) is round
  to its diameter from outside (``_holes._round_problem``): the shape check alone passed a hub drawn
  with ``$fn = 8``; a round body (``round_bodies``: a disc's outline, a rounded edge's quarter) comes in ``rounds`` with its
  ``segments`` (``_holes.body_checks``). The gold must have them too (else the task is broken: ``gold_error``).

The verdict's ``components``: ``outcome`` (1 only for a pass) and ``format`` (1 once the gate
passed: the script built one valid solid of the right number of bodies). No ``process`` credit:
the IoU is in the evidence, never in the reward, because it pays for the wrong part (the block
without its hole has IoU 0.80; a dense IoU reward is what CADForge's models learned to collect,
0.34-0.44 with nothing buildable, and a gate does not stop a bounding box).

Not here: rendering (``_render.py``), what the task says (``_domain.py``).
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from posttrain.envs.cad._depth import depth_lines
from posttrain.envs.cad._holes import along, hole_lines, hole_problems

MAX_TRIANGLES = 300_000
"""Most triangles checked (a binary STL of 15 MB); a finer mesh is the candidate's failure."""
_GOLD_CACHE_TRIANGLES = 1_000_000
"""Most triangles of gold solids a worker keeps (so its own cache never costs a check its memory)."""
_REL_EPS = 1e-6


class MeshProblem(Exception):
    """A mesh that fails the gate: ``error_class`` and a one-line ``message`` for the feedback."""

    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message


@dataclass(frozen=True)
class Solid:
    """A mesh that passed steps 1-3 of the gate, with what the specification compares."""

    manifold: Any  # manifold3d.Manifold
    triangles: int
    volume: float
    lo: tuple[float, float, float]
    hi: tuple[float, float, float]
    bodies: int
    genus: int


def parse_stl(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """``(vertices (V, 3) float32, triangles (F, 3) uint32)`` of a binary STL, identical vertices
    merged (OpenSCAD writes each shared vertex with the same bits).

    >>> import struct
    >>> tri = struct.pack("<12fH", 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0)
    >>> v, t = parse_stl(bytes(80) + struct.pack("<I", 1) + tri)
    >>> v.shape, t.shape
    ((3, 3), (1, 3))
    """
    if len(data) < 84 or (len(data) - 84) % 50:
        raise MeshProblem("mesh", f"the exported mesh is not a binary STL ({len(data)} bytes)")
    n = (len(data) - 84) // 50
    stated = int.from_bytes(data[80:84], "little")
    if stated not in (0, n):
        raise MeshProblem("mesh", f"the exported STL says {stated} triangles but holds {n}")
    if n == 0:
        raise MeshProblem("empty", "the part has no triangles (empty geometry)")
    if n > MAX_TRIANGLES:
        raise MeshProblem("too_large", f"the part has {n} triangles; at most {MAX_TRIANGLES} are checked "
                          "(lower $fn)")
    record = np.dtype([("normal", "<f4", 3), ("v", "<f4", (3, 3)), ("attr", "<u2")])
    corners = np.frombuffer(data, dtype=record, count=n, offset=84)["v"].reshape(-1, 3)
    if not np.isfinite(corners).all():
        raise MeshProblem("mesh", "the part has vertices at infinite or undefined coordinates")
    keys = np.ascontiguousarray(corners).view(np.dtype((np.void, 12))).ravel()
    unique, inverse = np.unique(keys, return_inverse=True)
    vertices = unique.view("<f4").reshape(-1, 3)
    return np.ascontiguousarray(vertices), inverse.reshape(-1, 3).astype(np.uint32)


def surface_problem(tris: np.ndarray, n_vertices: int) -> str | None:
    """Why the triangles are not a closed, consistently oriented 2-manifold surface, or None.

    >>> tet = np.array([[0, 2, 1], [0, 1, 3], [1, 2, 3], [0, 3, 2]])
    >>> surface_problem(tet, 4) is None, surface_problem(tet[:3], 4)
    (True, '3 edges belong to one triangle only: the surface has holes (it is not closed)')
    """
    t = tris.astype(np.int64)
    if ((t[:, 0] == t[:, 1]) | (t[:, 1] == t[:, 2]) | (t[:, 0] == t[:, 2])).any():
        return "a triangle uses one vertex twice (degenerate geometry)"
    src = t.ravel()  # corner c = 3*f + k sits at vertex t[f, k]; its outgoing edge goes to t[f, k+1]
    dst = t[:, [1, 2, 0]].ravel()
    key = src * n_vertices + dst
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    if (sorted_key[1:] == sorted_key[:-1]).any():
        return ("an edge is used twice in the same direction: faces are flipped, doubled, or more than two "
                "faces meet at an edge (parts touching along an edge)")
    reverse = dst * n_vertices + src
    where = np.searchsorted(sorted_key, reverse)
    found = (where < len(key)) & (sorted_key[np.minimum(where, len(key) - 1)] == reverse)
    if not found.all():
        return (f"{int((~found).sum())} edges belong to one triangle only: the surface has holes (it is not "
                "closed)")
    # Around each vertex, the corner whose outgoing edge is a->b is followed by the corner of the
    # triangle holding b->a at a (its "next" corner at a); one cycle per vertex means one fan.
    twin = order[where]  # the corner whose outgoing edge is the reverse of corner c's
    face, k = twin // 3, twin % 3
    nxt = 3 * face + (k + 1) % 3  # in the twin triangle (b, a, x), the corner at a
    used = np.unique(src).size
    if _cycles(nxt) != used:
        return "parts of the surface touch at a single point (a non-manifold vertex)"
    return None


def _cycles(perm: np.ndarray) -> int:
    """The number of cycles of a permutation of 0..n-1 (pointer doubling on cycle minima)."""
    label, step = np.arange(perm.size), perm.copy()
    for _ in range(max(1, math.ceil(math.log2(max(perm.size, 2)))) + 1):
        label = np.minimum(label, label[step])
        step = step[step]
    return int((label == np.arange(perm.size)).sum())


def solid_of(data: bytes) -> Solid:
    """Steps 1-3 of the gate but the consistency check (which needs the gold): a ``Solid`` or a
    ``MeshProblem``."""
    import manifold3d as m3

    vertices, tris = parse_stl(data)
    problem = surface_problem(tris, len(vertices))
    if problem:
        raise MeshProblem("not_solid", f"the part is not a closed solid: {problem}")
    mesh = m3.Manifold(m3.Mesh(vert_properties=vertices, tri_verts=tris))
    if mesh.status() != m3.Error.NoError:
        raise MeshProblem("not_solid", f"the part is not a closed solid ({mesh.status().name})")
    shells = mesh.decompose()
    volumes = [s.volume() for s in shells]
    scale = max(float(np.abs(vertices).max()), 1.0) ** 3
    if all(v < 0 for v in volumes):
        raise MeshProblem("inverted", "the part is inside out: its faces point inwards (negative volume)")
    if any(v <= _REL_EPS * scale for v in volumes):
        flat = sum(v <= _REL_EPS * scale for v in volumes)
        raise MeshProblem("inverted", f"{flat} of its {len(volumes)} shells enclose no positive volume (flat, "
                          "inside out, or an internal void)")
    # For a valid solid the union with itself is itself (exactly: 0 difference on every generated
    # part, coarse and fine); a surface that passes through itself counts the overlap twice in its
    # signed volume and once in the union (a figure-8 tube, a linear_extrude twisted 180 degrees
    # a slice).
    total = float(mesh.volume())
    if abs((mesh + mesh).volume() - total) > 1e-5 * abs(total):
        raise MeshProblem("self_intersecting", f"the part's surface passes through itself (its signed volume, "
                          f"{total:.1f} mm^3, counts some of it twice)")
    used = vertices[np.unique(tris)]
    return Solid(manifold=mesh, triangles=len(tris), volume=total,
                 lo=tuple(float(x) for x in used.min(0)), hi=tuple(float(x) for x in used.max(0)),
                 bodies=len(shells), genus=int(sum(s.genus() for s in shells)))


@dataclass(frozen=True)
class Overlap:
    """The booleans of a part A with the gold G: A n G, G - A (missing), A - G (extra), and volumes."""

    inter: Any
    missing: Any
    extra: Any
    v_inter: float
    v_missing: float
    v_extra: float

    @staticmethod
    def of(part: Solid, gold: Solid) -> Overlap:
        inter, missing, extra = part.manifold ^ gold.manifold, gold.manifold - part.manifold, part.manifold - gold.manifold
        return Overlap(inter, missing, extra, inter.volume(), missing.volume(), extra.volume())

    def iou(self, part: Solid, gold: Solid) -> float:
        union = part.volume + gold.volume - self.v_inter
        return self.v_inter / union if union > 0 else 0.0


def _consistency_problem(part: Solid, gold: Solid, o: Overlap) -> str | None:
    """V(G - A) + V(A n G) = V(G) and V(A - G) + V(A n G) = V(A), or the surface passes through itself."""
    gap = max(abs(o.v_missing + o.v_inter - gold.volume), abs(o.v_extra + o.v_inter - part.volume))
    if gap > 1e-3 * max(part.volume, gold.volume):
        return (f"the part's surface intersects itself: its volume ({part.volume:.1f} mm^3) disagrees with the "
                f"solid it bounds (by {gap:.1f} mm^3)")
    return None


def _fmt(x: float) -> str:
    return f"{x:.2f}"


def dimension_lines(part: Solid, gold: Solid, tol: float) -> list[str]:
    """One line per axis whose extent departs from the gold's by more than ``tol``."""
    lines = []
    for axis, name in enumerate("XYZ"):
        lo, hi, glo, ghi = part.lo[axis], part.hi[axis], gold.lo[axis], gold.hi[axis]
        off = max(abs(lo - glo), abs(hi - ghi))
        if off > tol:
            lines.append(f"along {name} the part spans {_fmt(lo)} to {_fmt(hi)} ({_fmt(hi - lo)} mm); the "
                         f"specification spans {_fmt(glo)} to {_fmt(ghi)} ({_fmt(ghi - glo)} mm), off by "
                         f"{_fmt(off)} mm (tolerance {tol:g} mm)")
    return lines


def _erode(region: Any, half: float) -> Any:
    """``region`` eroded by a cube of half-side ``half``, to the cube's 8 corners: every point left
    has all 8 corners inside ``region``. Done one axis at a time (A n (A - x) n (A + x), then y,
    then z: the same 8 translates), so the thin slivers of a coarser faceting vanish at the first
    or second step instead of riding through an 8-way intersection."""
    for axis in range(3):
        if region.is_empty():
            return region
        step = [0.0, 0.0, 0.0]
        step[axis] = half
        region = region.translate(tuple(step)) ^ region.translate(tuple(-x for x in step))
    return region


DIAGONALS = ((0.0, 0.0, 45.0), (45.0, 0.0, 0.0), (0.0, 45.0, 0.0))
"""The turns (degrees about X, Y, Z) under which a region is eroded again when the axis-aligned cube fits
nowhere: a cube turned 45 degrees about each axis. A band along a 45-degree face is 1.41 mm thick across
before an axis-aligned cube of 1 mm fits in it, so a plate's 2.5 mm top chamfer drawn 0.6 mm (1.34 mm of
band across) and a bracket's 3 mm fillet strip drawn 1.1 mm passed the shape check (4 of 4 chamfered plates,
9 of 9 strips)."""


def _dodecahedron_diagonals() -> np.ndarray:
    """The 10 lines through opposite corners of a regular dodecahedron, as unit vectors (10 x 3)."""
    p = (1 + math.sqrt(5)) / 2
    ends = [(1.0, sy, sz) for sy in (1, -1) for sz in (1, -1)]  # 4 of the cube's corners, one per opposite pair
    ends += [(0.0, sy / p, p) for sy in (1, -1)] + [(1 / p, sy * p, 0.0) for sy in (1, -1)]
    ends += [(p, 0.0, sz / p) for sz in (1, -1)]
    g = np.array(ends)
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def _min_width(g: np.ndarray) -> float:
    """The least width, over every direction n, of the zonotope sum of the segments [-g_i, g_i]: 2 sum |g_i . n|.
    That sum is a polyhedral norm of n, least on the sphere at a corner of its unit ball: a direction
    orthogonal to two of the segments."""
    n = np.cross(g[:, None, :], g[None, :, :]).reshape(-1, 3)
    n = n[np.linalg.norm(n, axis=1) > 1e-9]
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    return float(2 * np.abs(n @ g.T).sum(axis=1).min())


ROUND = _dodecahedron_diagonals()
"""The directions of the segments whose sum is the near-round solid a region is eroded by last (``_round_erode``),
when no cube upright or turned 45 degrees about one axis fits. A cube is its side across only along its faces'
normals and up to sqrt(3) times that toward a corner, so a slab of missing material leaning between an axis
and a body diagonal held none of the cubes (upright, turned about one axis, and 1.1 x as large with a face
toward a corner, the old ``CORNERS``) up to 1.28-1.49 mm thick where an upright one fails from 1 mm. This solid
(a zonotope of 10 segments along a dodecahedron's diagonals, icosahedrally symmetric) is between 1 and 1.095
times ``ROUND_WIDTH`` across in every direction, so a slab fails from 1.0-1.1 mm whatever its lean."""
ROUND_WIDTH = 1.0
"""The round solid's least width over the cube's side: a slab thinner than the upright cube's side holds it in
no lean. It is inside a ball of 1.095 times that, so where a cube 1.1 times the side fits, it fits."""
_ROUND_HALF = 2 * ROUND_WIDTH / _min_width(ROUND)
"""Each segment's half-length over the cube's half-side (the cube's side is 2 half-sides)."""
_UPRIGHT = min(1 / math.sqrt(2), ROUND_WIDTH / math.sqrt(3))
"""The largest upright cube that any turned solid holds, over the cube's half-side: ``DIAGONALS``: 1 / sqrt(2) (in
the turned plane the largest upright square of a turned one has side / sqrt(2)); the round solid holds a ball
``ROUND_WIDTH`` across, and that an upright cube of side ``ROUND_WIDTH`` / sqrt(3) (0.58): where none of that size
fits, no turned or round solid does."""


def _round_erode(region: Any, half: float) -> Any:
    """``region`` eroded by the ``ROUND`` zonotope (one segment at a time, as ``_erode`` does a cube's three)."""
    for g in ROUND:
        if region.is_empty():
            return region
        step = tuple(float(x) for x in g * half * _ROUND_HALF)
        region = region.translate(step) ^ region.translate(tuple(-x for x in step))
    return region


def _core(region: Any, half: float) -> Any:
    """``region`` eroded by a cube of half-side ``half`` (``_erode``), or, where that leaves nothing, by the
    cube turned 45 degrees about one axis (``DIAGONALS``), or else by the near-round solid (``ROUND``), the
    first that leaves something, turned back."""
    core = _erode(region, half)
    if not core.is_empty():
        return core
    # Where no upright cube of half-side half * _UPRIGHT fits, no turned or round solid does, and their
    # erosions are skipped (a coarser faceting's slivers: the common case, a passing part, at half their cost).
    if _erode(region, half * _UPRIGHT).is_empty():
        return core
    for turn in DIAGONALS:
        core = _erode(region.rotate(turn), half)
        if not core.is_empty():
            return core.rotate(tuple(-a for a in turn))  # one axis: the inverse turn is the negated angle
    return _round_erode(region, half)


def _shape_regions(o: Overlap, tol: float) -> list[tuple[str, list[Any]]]:
    """``(line, places)`` where material is missing or extra in a region thicker than ``2 * tol``: the line
    and the pieces of the region's core (``_core``), largest first."""
    regions = []
    for what, region in (("missing", o.missing), ("extra", o.extra)):
        if region.is_empty():
            continue
        core = _core(region, tol)  # the whole region: decomposing hundreds of slivers first costs 5x more
        blobs = [] if core.is_empty() else sorted((b for b in core.decompose() if b.volume() > 0),
                                                  key=lambda b: -b.volume())
        if not blobs:
            continue
        places = []
        for blob in blobs[:3]:
            x0, y0, z0, x1, y1, z1 = blob.bounding_box()
            places.append(f"({(x0 + x1) / 2:.1f}, {(y0 + y1) / 2:.1f}, {(z0 + z1) / 2:.1f})")
        more = f" and {len(blobs) - 3} more places" if len(blobs) > 3 else ""
        regions.append((f"material {what} around {', '.join(places)}{more}: thicker than {2 * tol:g} mm there "
                        f"({region.volume():.1f} mm^3 {what} in all)", blobs))
    return regions


def shape_lines(o: Overlap, tol: float) -> list[str]:
    """Where material is missing or extra in a region thicker than ``2 * tol`` (a line for each)."""
    return [line for line, _ in _shape_regions(o, tol)]


def _along_failing(blobs: Sequence[Any], failing: Sequence[Mapping[str, Any]], tol: float) -> bool:
    """Whether each piece lies along the stated round surface of a feature that fails its own check (``along``)."""
    def points(blob: Any) -> np.ndarray:
        return np.asarray(blob.to_mesh().vert_properties, dtype=float)[:, :3]

    return bool(failing) and all(any(along(f, points(b), tol) for f in failing) for b in blobs)


def compare(part: Solid, gold: Solid, o: Overlap, *, iou_min: float, tol: float,
            holes: Sequence[Mapping[str, Any]] = (), rounds: Sequence[Mapping[str, Any]] = ()) -> list[tuple[str, str]]:
    """The specification's failing lines as ``(error_class, line)``. A region of wrong material that lies
    along the round surface of a stated hole or round feature which fails its own check (a boss drawn as an
    octagon) is listed after the holes lines: the feature's line names what is wrong there."""
    iou = o.iou(part, gold)
    problems = [("dimensions", line) for line in dimension_lines(part, gold, tol)]
    if part.genus != gold.genus:
        problems.append(("topology", f"the part has {part.genus} holes through it (genus); the specification "
                         f"has {gold.genus}"))
    if iou < iou_min:
        change = (part.volume - gold.volume) / gold.volume * 100
        problems.append(("iou", f"overlap with the specified solid: IoU {iou:.3f}, needs at least {iou_min:g} "
                         f"(volume {part.volume:.1f} mm^3, specified {gold.volume:.1f} mm^3, {change:+.1f}%)"))
    failing = hole_problems(part.manifold, holes, rounds)
    regions = _shape_regions(o, tol)
    features = [f for f, _ in failing]
    owned = [_along_failing(blobs, features, tol) for _, blobs in regions]
    problems += [("shape", line) for (line, _), own in zip(regions, owned, strict=True) if not own]
    # A region that fails the shape check also reaches deep: its line says it. Beside a stated feature that
    # fails its own check (a coarse hub's flats), the feature's line comes first.
    deep = [] if regions else [("shape", line) for line in depth_lines(o.missing, o.extra, gold, tol)]
    problems += [] if failing else deep
    problems += [("holes", line) for _, line in failing]
    problems += [("shape", line) for (line, _), own in zip(regions, owned, strict=True) if own]
    problems += deep if failing else []
    return problems


def _solid_evidence(s: Solid) -> dict[str, Any]:
    return {"triangles": s.triangles, "volume": round(s.volume, 3), "bodies": s.bodies, "genus": s.genus,
            "bbox": [[round(x, 3) for x in s.lo], [round(x, 3) for x in s.hi]]}


def check(part_stl: bytes, gold: Solid, *, iou_min: float, tol: float,
          holes: Sequence[Mapping[str, Any]] = (), rounds: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The verdict (``Verdict.to_json()`` form) of ``part_stl`` against ``gold``."""
    comps = {"outcome": 0.0, "format": 0.0, "process": 0.0}  # process stays 0: the IoU is evidence, not credit
    evidence: dict[str, Any] = {"gold": _solid_evidence(gold), "iou_min": iou_min, "tolerance_mm": tol}
    try:
        part = solid_of(part_stl)
        overlap = Overlap.of(part, gold)
        problem = _consistency_problem(part, gold, overlap)
        if problem:
            raise MeshProblem("self_intersecting", problem)
    except MeshProblem as e:
        return _verdict("fail", f"The part fails the gate: {e.message}.", e.error_class, evidence, comps)
    evidence["part"] = _solid_evidence(part)
    if part.bodies != gold.bodies:
        return _verdict("fail", f"The part fails the gate: it has {part.bodies} separate bodies; the "
                        f"specification has {gold.bodies}.", "bodies", evidence, comps)
    iou = overlap.iou(part, gold)
    problems = compare(part, gold, overlap, iou_min=iou_min, tol=tol, holes=holes, rounds=rounds)
    evidence["iou"] = round(iou, 6)
    comps["format"] = 1.0
    if problems:
        evidence["problems"] = [cls for cls, _ in problems]
        text = "The part does not match the specification:\n" + "\n".join(f"- {line}" for _, line in problems)
        return _verdict("fail", text, problems[0][0], evidence, comps)
    genus = f"{gold.genus} hole{'s' if gold.genus != 1 else ''}"
    stated = f" ({len(holes)} stated, each to size)" if holes else ""
    return _verdict("pass", f"The part matches the specification (IoU {iou:.3f}; size within {tol:g} mm; {genus}"
                    f"{stated}; {gold.bodies} bod{'ies' if gold.bodies != 1 else 'y'}).", None, evidence,
                    {"outcome": 1.0, "format": 1.0, "process": 1.0})


def _verdict(outcome: str, feedback: str, error_class: str | None, evidence: Mapping[str, Any],
             components: Mapping[str, float]) -> dict[str, Any]:
    return {"outcome": outcome, "reward": 1.0 if outcome == "pass" else 0.0, "feedback": feedback,
            "error_class": error_class, "evidence": dict(evidence), "components": dict(components)}


_golds: OrderedDict[str, Solid] = OrderedDict()


def _gold(key: str, data: bytes) -> Solid:
    if key in _golds:
        _golds.move_to_end(key)
        return _golds[key]
    solid = solid_of(data)
    _golds[key] = solid
    while len(_golds) > 1 and sum(g.triangles for g in _golds.values()) > _GOLD_CACHE_TRIANGLES:
        _golds.popitem(last=False)
    return solid


def handle_check(request: Mapping[str, Any]) -> dict[str, Any]:
    """Worker entry (``posttrain.verify._deadline``): ``{"part", "gold"}`` base64 binary STLs, a
    ``gold_key`` (a digest of the gold script), ``iou``, ``tolerance_mm``, ``holes`` and optionally
    ``rounds`` (the task's, ``_holes.parse_holes``, ``parse_rounds``; none when left out, as ``holes`` is
    never). Returns the verdict, or ``{"gold_error": why}`` when the gold itself fails
    the gate or lacks a stated hole (the task's fault, not the part's)."""
    try:
        gold = _gold(str(request["gold_key"]), base64.b64decode(request["gold"]))
    except MeshProblem as e:
        return {"gold_error": f"{e.error_class}: {e.message}"}
    holes, rounds = list(request["holes"]), list(request.get("rounds", ()))
    if missing := hole_lines(gold.manifold, holes, rounds):
        return {"gold_error": f"holes: the gold does not have what the task states: {missing[0]}"}
    part = base64.b64decode(request["part"])
    verdict = check(part, gold, iou_min=float(request["iou"]), tol=float(request["tolerance_mm"]), holes=holes,
                    rounds=rounds)
    verdict["evidence"]["part_sha256"] = hashlib.sha256(part).hexdigest()  # the client checks it is its part's
    return verdict


def warm_up() -> None:
    """Import manifold3d and run one boolean before the worker says it is ready."""
    import manifold3d as m3

    cube = m3.Manifold.cube([1.0, 1.0, 1.0])
    (cube ^ cube.translate((0.5, 0.0, 0.0))).volume()
