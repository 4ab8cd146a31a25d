"""The parts the cad generator builds: a base solid and features with templated dimensions, each
feature carrying its OpenSCAD lines and the sentence that describes it.

Bases and their features:

- ``plate``: rounded or chamfered vertical/top edges, four corner holes, a centre feature (a
  hole, a counterbored hole, a pocket, or a boss, optionally bored through), a row of holes or a
  slot on either side;
- ``disc``: a top-edge chamfer, a centre bore, a hub, a keyway in the bore, a bolt circle, its
  counterbores;
- ``block``: rounded vertical edges, a cross hole along X, another along Y, a pocket in the top,
  a step cut along one top edge, a pair of vertical holes;
- ``bracket``: an L angle with holes in the base, holes or a slot in the wall, a gusset, a
  fillet strip in the inside corner.

Every feature is placed on a rectangle of the XY plane (or a ring of the disc) that is kept at
least ``GAP`` mm from the others and from the edges, so no two features merge and each keeps its
stated size; every feature but a hole (which changes the genus) is thicker than 2 x the default
tolerance (1 mm) in every direction, so leaving any one out fails the ``shape`` check
(tests/envs/test_cad.py renders such ablations). A builder returns None when its random
dimensions do not fit; the generator draws again.

Every round hole and slot a feature cuts is also listed as a ``hole`` (``_holes.py``): its axis, a
point of it, its diameter and its span, the stretch of the axis where the hole is its plain self
(through the material, below its counterbore, clear of the other features: from face to face, or to
the counterbore's floor), so that the verifier holds it to its stated size along its length
(``Part.holes``); every boss and hub likewise as a round outer feature (``Part.rounds``), and a disc's
outline, below its chamfer and the chamfer's cone (``d2``), as round bodies (``Part.round_bodies``).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

GAP = 2.0
"""Least wall, in mm, between two features and between a feature and an edge."""


def _n(x: float) -> str:
    """A dimension as written in the script and the prompt: ``12``, ``12.5``, ``-3.25``."""
    r = round(x, 3)
    return f"{r:g}" if r != 0 else "0"


Rect = tuple[float, float, float, float]
"""(x0, y0, x1, y1) of a feature's footprint on the XY plane."""


@dataclass
class Feature:
    """One feature: what it adds to and cuts from the solid, and how the prompt says it."""

    name: str
    text: str
    adds: list[str] = field(default_factory=list)
    subs: list[str] = field(default_factory=list)
    base: str | None = None
    """A replacement of the base solid (rounded or chamfered edges)."""
    holes: list[dict[str, object]] = field(default_factory=list)
    """The round holes and slots it cuts (``_hole``): what the verifier measures."""
    spans_without: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Another feature its holes run through (a boss, a hub) -> their span when the gold lacks it."""
    rounds: list[dict[str, object]] = field(default_factory=list)
    """The round outer features it adds (a boss, a hub), as ``_hole`` writes them: held round from outside."""


@dataclass
class Part:
    """A base solid and its features: renders to the gold script and the description."""

    kind: str
    base: str
    intro: str
    features: list[Feature]
    outline: list[tuple[str | None, dict[str, object]]] = field(default_factory=list)
    """The base's round outline (a disc's; a plate's or block's rounded vertical edges, each a quarter
    circle: ``quadrant``), as ``_hole`` writes it, each with the feature that makes it (None: the base;
    "chamfer": its cone; "edges": the rounding): held round from outside to OpenSCAD's default faceting
    for its radius (``round_bodies``)."""

    def script(self, without: str | None = None) -> str:
        """The gold script; ``without`` leaves one feature out (the ablation tests)."""
        kept = [f for f in self.features if f.name != without]
        base = next((f.base for f in kept if f.base), self.base)
        adds = [a for f in kept for a in f.adds]
        subs = [s for f in kept for s in f.subs]
        body = base if not adds else "union() {\n" + "".join(f"  {s}\n" for s in [base, *adds]) + "}"
        if subs:
            inner = "".join(f"  {line}\n" for line in body.splitlines())
            body = "difference() {\n" + inner + "".join(f"  {s}\n" for s in subs) + "}"
        return f"// {self.kind} with {len(self.features)} feature(s)\n$fn = 48;\n{body}\n"

    def description(self) -> str:
        return " ".join([self.intro, *(f.text for f in self.features)])

    def holes(self, without: str | None = None) -> list[dict[str, object]]:
        """The stated holes of the gold ``script(without)`` builds (the task's ``holes`` field)."""
        kept = [f for f in self.features if f.name != without]
        return [{**h, "span": [round(x, 6) for x in f.spans_without[without]]} if without in f.spans_without else h
                for f in kept for h in f.holes]

    def round_bodies(self, without: str | None = None) -> list[dict[str, object]]:
        """The stated round bodies of the gold ``script(without)`` builds (the task's ``round_bodies``)."""
        return [body for name, body in self.outline if name is None or name != without]

    def rounds(self, without: str | None = None) -> list[dict[str, object]]:
        """The stated round outer features of the gold ``script(without)`` builds (the task's ``rounds``)."""
        return [r for f in self.features if f.name != without for r in f.rounds]


def _hole(axis: str, at: tuple[float, float, float], d: float, span: tuple[float, float], *,
          to: tuple[float, float, float] | None = None,
          ignore: tuple[tuple[float, ...], tuple[float, ...]] | None = None) -> dict[str, object]:
    """A stated hole (``_holes.parse_holes``): ``at`` a point of its axis, ``span`` the stretch of the
    axis where it is its plain self."""
    hole: dict[str, object] = {"axis": axis, "at": [round(x, 6) for x in at], "d": d,
                               "span": [round(x, 6) for x in span]}
    if to is not None:
        hole["to"] = [round(x, 6) for x in to]
    if ignore is not None:
        hole["ignore"] = [[round(x, 6) for x in corner] for corner in ignore]
    return hole


def _cyl(x: float, y: float, z: float, d: float, h: float) -> str:
    return f"translate([{_n(x)}, {_n(y)}, {_n(z)}]) cylinder(d = {_n(d)}, h = {_n(h)});"


def _box(x0: float, y0: float, z0: float, sx: float, sy: float, sz: float) -> str:
    return f"translate([{_n(x0)}, {_n(y0)}, {_n(z0)}]) cube([{_n(sx)}, {_n(sy)}, {_n(sz)}]);"


def _square(cx: float, cy: float, size: float) -> Rect:
    return (cx - size / 2, cy - size / 2, cx + size / 2, cy + size / 2)


class _Layout:
    """Footprints placed so far on a W x D top face, with ``margin`` kept free along the edges."""

    def __init__(self, w: float, d: float, margin: float) -> None:
        self.w, self.d, self.margin = w, d, margin
        self.taken: list[Rect] = []

    def fits(self, *rects: Rect) -> bool:
        hw, hd, m = self.w / 2, self.d / 2, self.margin
        for x0, y0, x1, y1 in rects:
            if x0 < -hw + m or y0 < -hd + m or x1 > hw - m or y1 > hd - m:
                return False
            for a0, b0, a1, b1 in self.taken:
                if x0 < a1 + GAP and a0 < x1 + GAP and y0 < b1 + GAP and b0 < y1 + GAP:
                    return False
        return True

    def take(self, *rects: Rect) -> bool:
        if not self.fits(*rects):
            return False
        self.taken.extend(rects)
        return True


def _pick(rng: random.Random, lo: float, hi: float, step: float = 1.0) -> float:
    """A multiple of ``step`` in [lo, hi] (lo if the range is empty)."""
    k0, k1 = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
    return (rng.randint(k0, k1) if k1 >= k0 else k0) * step


# ---------------------------------------------------------------- plate and block


@dataclass
class _Slab:
    """The plate or block being built: its size, the layout of its top face, and its features."""

    w: float
    d: float
    t: float
    layout: _Layout
    features: list[Feature] = field(default_factory=list)
    round_r: float = 0.0
    chamfer: float = 0.0
    side_z: float = 0.0
    """Top of the highest cross hole (a block's pocket and step stay above it)."""
    step_z: float = 0.0
    """Where a block's step along its +X top edge begins (0: no step): its rounded +X edges end there."""
    cross: list[Rect] = field(default_factory=list)
    """Footprints of the cross holes (vertical through-holes keep clear of them; a pocket above may not)."""

    def through(self, x: float, y: float, d: float) -> str:
        return _cyl(x, y, -1, d, self.t + 2)


def _slab_edge(rng: random.Random, s: _Slab, kind: str) -> bool:
    if kind == "round" or s.t < 8:
        r = _pick(rng, 5, min(s.w, s.d) / 4)
        if r > min(s.w, s.d) / 4:
            return False
        s.round_r = r
        base = (f"linear_extrude(height = {_n(s.t)}) offset(r = {_n(r)}) "
                f"square([{_n(s.w - 2 * r)}, {_n(s.d - 2 * r)}], center = true);")
        s.features.append(Feature("edges", f"Its four vertical edges are rounded to a radius of {_n(r)} mm.",
                                  base=base))
        return True
    c = rng.choice((2.5, 3.0))
    s.chamfer, s.layout.margin = c, c + GAP
    base = (f"hull() {{ {_box(-s.w / 2, -s.d / 2, 0, s.w, s.d, s.t - c)} "
            f"{_box(-s.w / 2 + c, -s.d / 2 + c, 0, s.w - 2 * c, s.d - 2 * c, s.t)} }}")
    s.features.append(Feature("edges", f"All four top edges are chamfered {_n(c)} mm x 45 degrees (the top face "
                              f"is {_n(s.w - 2 * c)} x {_n(s.d - 2 * c)} mm).", base=base))
    return True


def _edge_bodies(s: _Slab) -> list[tuple[str | None, dict[str, object]]]:
    """The rounded vertical edges as round bodies (``Part.outline``): each a quarter circle (``quadrant``,
    its corner's signs in X and Y) of the rounding's radius about its centre, up to the top face or, at a
    block's +X edges, to its step. None without a rounding (a chamfer is held by the shape check: its
    2.5-3 mm legs are thicker than 1 mm)."""
    if not s.round_r:
        return []
    r = s.round_r
    cx, cy = s.w / 2 - r, s.d / 2 - r
    bodies: list[tuple[str | None, dict[str, object]]] = []
    for sx, sy in itertools.product((-1, 1), repeat=2):
        top = s.step_z if sx > 0 and s.step_z else s.t
        bodies.append(("edges", {**_hole("z", (sx * cx, sy * cy, top / 2), 2 * r, (0, top)), "quadrant": [sx, sy]}))
    return bodies


def _corner_obstacles(s: _Slab) -> None:
    """Keep other features out of the corners a rounding took away."""
    if s.round_r:
        r, hw, hd = s.round_r, s.w / 2, s.d / 2
        for sx, sy in itertools.product((-1, 1), repeat=2):
            xs, ys = sorted((sx * hw, sx * (hw - r))), sorted((sy * hd, sy * (hd - r)))
            s.layout.taken.append((xs[0], ys[0], xs[1], ys[1]))


def _slab_corners(rng: random.Random, s: _Slab) -> bool:
    d = rng.choice((3.0, 3.5, 4.0, 5.0, 6.0))
    if s.round_r:
        e = s.round_r
        if e < d / 2 + GAP:
            return False
        where = "concentric with the rounded corners"
    else:
        e = _pick(rng, d / 2 + s.chamfer + 3, d / 2 + s.chamfer + 7, 0.5)
        where = f"{_n(e)} mm in from both edges"
    xs, ys = s.w / 2 - e, s.d / 2 - e
    margin, s.layout.margin = s.layout.margin, 0.0
    rects = [_square(sx * xs, sy * ys, d) for sx, sy in itertools.product((-1, 1), repeat=2)]
    ok = s.layout.take(*rects)
    s.layout.margin = margin
    if not ok:
        return False
    s.features.append(Feature(
        "corners", f"Four through-holes of diameter {_n(d)} mm sit at the corners, {where} (centres at "
        f"X = +/-{_n(xs)}, Y = +/-{_n(ys)}).",
        subs=[f"for (x = [{_n(-xs)}, {_n(xs)}], y = [{_n(-ys)}, {_n(ys)}]) translate([x, y, -1]) "
              f"cylinder(d = {_n(d)}, h = {_n(s.t + 2)});"],
        holes=[_hole("z", (sx * xs, sy * ys, s.t / 2), d, (0, s.t))
               for sx, sy in itertools.product((-1, 1), repeat=2)]))
    return True


def _slab_centre(rng: random.Random, s: _Slab, kind: str, bored: bool) -> bool:
    small = min(s.w, s.d)
    if kind == "boss":
        db = _pick(rng, 10, small / 2)
        hb = _pick(rng, 3, 10)
        if not s.layout.take(_square(0, 0, db)):
            return False
        s.features.append(Feature("centre", f"A cylindrical boss of diameter {_n(db)} mm stands on the top face at "
                                  f"the centre, rising {_n(hb)} mm to Z = {_n(s.t + hb)}.",
                                  adds=[_cyl(0, 0, s.t - 0.01, db, hb + 0.01)],
                                  rounds=[_hole("z", (0, 0, s.t + hb / 2), db, (s.t, s.t + hb))]))
        if bored:
            d = _pick(rng, 3, db - 6)
            s.features.append(Feature("bore", f"A through-hole of diameter {_n(d)} mm runs down the boss's axis "
                                      "through the boss and the plate.", subs=[_cyl(0, 0, -1, d, s.t + hb + 2)],
                                      holes=[_hole("z", (0, 0, s.t / 2), d, (0, s.t + hb))],
                                      spans_without={"centre": (0, s.t)}))
        return True
    if kind == "pocket":
        a, b = _pick(rng, s.w / 4, s.w / 2), _pick(rng, s.d / 4, s.d / 2)
        p = _pick(rng, 2, s.t - 2 - s.side_z if s.side_z else s.t - 2)
        if p < 2 or not s.layout.take((-a / 2, -b / 2, a / 2, b / 2)):
            return False
        s.features.append(Feature("centre", f"A rectangular pocket {_n(a)} mm along X by {_n(b)} mm along Y and "
                                  f"{_n(p)} mm deep is cut into the top face at the centre (its floor at Z = "
                                  f"{_n(s.t - p)}).", subs=[_box(-a / 2, -b / 2, s.t - p, a, b, p + 1)]))
        return True
    d = _pick(rng, 5, small / 3)
    if kind == "counterbore":
        cd, k = d + rng.choice((4, 5, 6)), _pick(rng, 2, s.t - 2)
        if not s.layout.take(_square(0, 0, cd)):
            return False
        s.features.append(Feature("centre", f"A counterbored through-hole at the centre: diameter {_n(d)} mm, with a "
                                  f"counterbore of diameter {_n(cd)} mm and depth {_n(k)} mm from the top face.",
                                  subs=[s.through(0, 0, d), _cyl(0, 0, s.t - k, cd, k + 1)],
                                  holes=[_hole("z", (0, 0, (s.t - k) / 2), d, (0, s.t - k)),
                                         _hole("z", (0, 0, s.t - k / 2), cd, (s.t - k, s.t))]))
        return True
    if not s.layout.take(_square(0, 0, d)):
        return False
    s.features.append(Feature("centre", f"A through-hole of diameter {_n(d)} mm goes through the centre.",
                              subs=[s.through(0, 0, d)], holes=[_hole("z", (0, 0, s.t / 2), d, (0, s.t))]))
    return True


def _slab_band(rng: random.Random, s: _Slab, side: int) -> bool:
    """A row of holes or a slot along X on the +Y (side 1) or -Y (side -1) half."""
    name = "band+" if side > 0 else "band-"
    y = side * _pick(rng, s.d / 4, s.d / 2 - 4, 0.5)
    if rng.random() < 0.5:
        w = rng.choice((3.0, 4.0, 5.0, 6.0))
        length = _pick(rng, 8, s.w / 2)
        if not s.layout.take((-length / 2 - w / 2, y - w / 2, length / 2 + w / 2, y + w / 2)):
            return False
        hull = f"hull() {{ {s.through(-length / 2, y, w)} {s.through(length / 2, y, w)} }}"
        s.features.append(Feature(name, f"A through slot {_n(w)} mm wide with rounded ends runs along X at Y = "
                                  f"{_n(y)}, its end centres at X = +/-{_n(length / 2)}.", subs=[hull],
                                  holes=[_hole("z", (-length / 2, y, s.t / 2), w, (0, s.t),
                                               to=(length / 2, y, s.t / 2))]))
        return True
    count, d = rng.randint(2, 5), rng.choice((3.0, 4.0, 5.0))
    pitch = _pick(rng, d + 3, d + 8)
    xs = [(i - (count - 1) / 2) * pitch for i in range(count)]
    if not s.layout.take(*[_square(x, y, d) for x in xs]):
        return False
    s.features.append(Feature(name, f"A row of {count} through-holes of diameter {_n(d)} mm, {_n(pitch)} mm apart "
                              f"and centred on X = 0, runs along X at Y = {_n(y)}.",
                              subs=[f"for (x = [{', '.join(_n(x) for x in xs)}]) translate([x, {_n(y)}, -1]) "
                                    f"cylinder(d = {_n(d)}, h = {_n(s.t + 2)});"],
                              holes=[_hole("z", (x, y, s.t / 2), d, (0, s.t)) for x in xs]))
    return True


def plate(rng: random.Random, names: tuple[str, ...]) -> Part | None:
    w = float(rng.randrange(40, 101, 5))
    d = float(rng.randrange(30, int(min(w, 70)) + 1, 5))
    t = float(rng.randint(5, 12))
    s = _Slab(w, d, t, _Layout(w, d, GAP))
    ok = True
    if "edges" in names:
        ok &= _slab_edge(rng, s, rng.choice(("round", "chamfer")))
    if "corners" in names:
        ok &= _slab_corners(rng, s)
    _corner_obstacles(s)
    if "centre" in names:
        kinds = ("boss",) if "bore" in names else ("hole", "counterbore", "pocket", "boss")
        ok &= _slab_centre(rng, s, rng.choice(kinds), "bore" in names)
    for side, name in ((1, "band+"), (-1, "band-")):
        if name in names:
            ok &= _slab_band(rng, s, side)
    if not ok:
        return None
    intro = (f"A rectangular plate {_n(w)} mm long (X), {_n(d)} mm wide (Y) and {_n(t)} mm thick (Z), centred on "
             "the origin in X and Y with its bottom face on Z = 0.")
    return Part("plate", _box(-w / 2, -d / 2, 0, w, d, t), intro, s.features, outline=_edge_bodies(s))


def _block_cross(rng: random.Random, s: _Slab, axis: str) -> bool:
    along, across = (s.w, s.d) if axis == "X" else (s.d, s.w)
    d = _pick(rng, 5, min(across, s.t) / 3)
    taken = s.side_z
    z = _pick(rng, taken + d / 2 + GAP if taken else max(d / 2 + 3, s.t / 4), s.t * 0.6, 0.5)
    if z - d / 2 < (taken + GAP if taken else 3) or z + d / 2 > s.t - 6:
        return False
    s.side_z = z + d / 2
    rot = "[0, 90, 0]" if axis == "X" else "[-90, 0, 0]"
    start = f"[{_n(-along / 2 - 1)}, 0, {_n(z)}]" if axis == "X" else f"[0, {_n(-along / 2 - 1)}, {_n(z)}]"
    s.features.append(Feature(f"cross{axis}", f"A through-hole of diameter {_n(d)} mm runs along {axis} through the "
                              f"whole block, its axis at Z = {_n(z)} and {'Y' if axis == 'X' else 'X'} = 0.",
                              subs=[f"translate({start}) rotate({rot}) cylinder(d = {_n(d)}, h = {_n(along + 2)});"],
                              holes=[_hole(axis.lower(), (0, 0, z), d, (-along / 2, along / 2))]))
    s.cross.append((-s.w / 2, -d / 2, s.w / 2, d / 2) if axis == "X" else (-d / 2, -s.d / 2, d / 2, s.d / 2))
    return True


def _block_step(rng: random.Random, s: _Slab) -> bool:
    sw, sh = _pick(rng, 5, s.w / 4), _pick(rng, 4, s.t / 3)
    if s.t - sh < s.side_z + GAP:
        return False
    s.features.append(Feature("step", f"A step {_n(sw)} mm wide (along X) and {_n(sh)} mm deep is cut along the "
                              f"whole top edge at +X: above Z = {_n(s.t - sh)} the block ends at X = "
                              f"{_n(s.w / 2 - sw)}.", subs=[_box(s.w / 2 - sw, -s.d / 2 - 1, s.t - sh, sw + 1,
                                                                 s.d + 2, sh + 1)]))
    s.layout.taken.append((s.w / 2 - sw, -s.d / 2, s.w / 2, s.d / 2))
    s.step_z = s.t - sh
    return True


def _block_vertical(rng: random.Random, s: _Slab) -> bool:
    d = rng.choice((3.0, 4.0, 5.0))
    x, y = _pick(rng, s.w / 6, s.w / 2 - d / 2 - 3, 0.5), _pick(rng, s.d / 5, s.d / 2 - d / 2 - 3, 0.5)
    holes = (_square(-x, y, d), _square(x, y, d))
    crossing = _Layout(s.w * 4, s.d * 4, 0.0)
    crossing.taken = list(s.cross)
    if not crossing.fits(*holes) or not s.layout.take(*holes):
        return False
    s.features.append(Feature("vertical", f"Two vertical through-holes of diameter {_n(d)} mm run from the bottom "
                              f"to the top face at X = +/-{_n(x)}, Y = {_n(y)}.",
                              subs=[f"for (x = [{_n(-x)}, {_n(x)}]) translate([x, {_n(y)}, -1]) "
                                    f"cylinder(d = {_n(d)}, h = {_n(s.t + 2)});"],
                              holes=[_hole("z", (sx * x, y, s.t / 2), d, (0, s.t)) for sx in (-1, 1)]))
    return True


def block(rng: random.Random, names: tuple[str, ...]) -> Part | None:
    w, d, h = float(rng.randrange(30, 61, 5)), float(rng.randrange(20, 41, 5)), float(rng.randrange(20, 41, 5))
    s = _Slab(w, d, h, _Layout(w, d, GAP))
    steps: list[Callable[[], bool]] = []
    if "edges" in names:
        steps.append(lambda: _slab_edge(rng, s, "round"))
    steps.append(lambda: (_corner_obstacles(s), True)[1])
    for axis in ("X", "Y"):
        if f"cross{axis}" in names:
            steps.append(lambda axis=axis: _block_cross(rng, s, axis))
    if "step" in names:
        steps.append(lambda: _block_step(rng, s))
    if "vertical" in names:
        steps.append(lambda: _block_vertical(rng, s))
    if "centre" in names:
        steps.append(lambda: _slab_centre(rng, s, "pocket", False))
    if not all(step() for step in steps):
        return None
    intro = (f"A rectangular block {_n(w)} mm long (X), {_n(d)} mm wide (Y) and {_n(h)} mm tall (Z), centred on "
             "the origin in X and Y and standing on Z = 0.")
    return Part("block", _box(-w / 2, -d / 2, 0, w, d, h), intro, s.features, outline=_edge_bodies(s))


# ---------------------------------------------------------------- disc


def disc(rng: random.Random, names: tuple[str, ...]) -> Part | None:
    dia, t = float(rng.randrange(40, 101, 5)), float(rng.randint(5, 12))
    feats: list[Feature] = []
    c = rng.choice((2.5, 3.0)) if "chamfer" in names else 0.0
    if c and t < c + 3:
        return None
    if c:
        feats.append(Feature("chamfer", f"Its top outer edge is chamfered {_n(c)} mm x 45 degrees (the top face is "
                             f"{_n(dia - 2 * c)} mm across).",
                             base=f"union() {{ cylinder(d = {_n(dia)}, h = {_n(t - c)}); translate([0, 0, "
                                  f"{_n(t - c)}]) cylinder(h = {_n(c)}, d1 = {_n(dia)}, d2 = {_n(dia - 2 * c)}); }}"))
    inner = 0.0
    bore = _pick(rng, 6, dia / 4) if "bore" in names else 0.0
    hub_d, hub_h = 0.0, 0.0
    if "hub" in names:
        hub_d = _pick(rng, max(bore + 8, 14), dia / 2, 2)
        hub_h = _pick(rng, 3, 10)
        inner = hub_d / 2
        feats.append(Feature("hub", f"A hub of diameter {_n(hub_d)} mm, concentric with the disc, rises {_n(hub_h)} "
                             f"mm above the top face (to Z = {_n(t + hub_h)}).",
                             adds=[_cyl(0, 0, t - 0.01, hub_d, hub_h + 0.01)],
                             rounds=[_hole("z", (0, 0, t + hub_h / 2), hub_d, (t, t + hub_h))]))
    top = t + hub_h
    kw, reach = (_pick(rng, 2, bore / 2), bore / 2 + _pick(rng, 2, 3, 0.5)) if "keyway" in names else (0.0, 0.0)
    if bore:
        keyway = ((-kw / 2, 0.0, -1.0), (kw / 2, reach, top + 1)) if kw else None  # its cut in the bore's wall
        feats.append(Feature("bore", f"A centre bore of diameter {_n(bore)} mm runs through the "
                             f"{'disc and the hub' if hub_d else 'disc'}.", subs=[_cyl(0, 0, -1, bore, top + 2)],
                             holes=[_hole("z", (0, 0, t / 2), bore, (0, top), ignore=keyway)],
                             spans_without={"hub": (0, t)} if hub_d else {}))
        inner = max(inner, bore / 2)
    if kw:
        if hub_d and reach > hub_d / 2 - GAP:
            return None
        feats.append(Feature("keyway", f"A keyway {_n(kw)} mm wide is cut along the whole bore on its +Y side, "
                             f"reaching Y = {_n(reach)}.", subs=[_box(-kw / 2, 0, -1, kw, reach, top + 2)]))
        inner = max(inner, reach)
    if "bolts" in names and not _disc_bolts(rng, feats, dia / 2 - c - GAP, inner + GAP, t, "counterbores" in names):
        return None
    intro = (f"A round disc of diameter {_n(dia)} mm and thickness {_n(t)} mm, its axis along Z through the origin "
             "and its bottom face on Z = 0.")
    outline: list[tuple[str | None, dict[str, object]]] = [(None, _hole("z", (0, 0, (t - c) / 2), dia, (0, t - c)))]
    if c:  # the chamfer's cone (a gold without the chamfer has the plain cylinder there)
        outline.append(("chamfer", {**_hole("z", (0, 0, t - c / 2), dia, (t - c, t)), "d2": dia - 2 * c}))
    return Part("disc", f"cylinder(d = {_n(dia)}, h = {_n(t)});", intro, feats, outline=outline)


def _disc_bolts(rng: random.Random, feats: list[Feature], outer: float, inner: float, t: float,
                counterbored: bool) -> bool:
    n, d = rng.choice((3, 4, 5, 6, 8)), rng.choice((3.0, 4.0, 5.0, 6.0))
    cd, k = (d + rng.choice((3, 4)), _pick(rng, 2, t - 2)) if counterbored else (d, 0.0)
    r = _pick(rng, inner + cd / 2, outer - cd / 2, 0.5)
    if r - cd / 2 < inner or r + cd / 2 > outer or 2 * r * math.sin(math.pi / n) < cd + GAP:
        return False
    places = [(r * math.cos(2 * math.pi * i / n), r * math.sin(2 * math.pi * i / n)) for i in range(n)]
    feats.append(Feature("bolts", f"{n} through-holes of diameter {_n(d)} mm are equally spaced on a circle of "
                         f"radius {_n(r)} mm about the axis, the first on the +X axis.",
                         subs=[f"for (i = [0 : {n - 1}]) rotate([0, 0, i * {_n(360 / n)}]) "
                               f"{_cyl(r, 0, -1, d, t + 2)}"],
                         holes=[_hole("z", (x, y, (t - k) / 2), d, (0, t - k)) for x, y in places]))
    if counterbored:
        feats.append(Feature("counterbores", f"Each of them is counterbored from the top face: diameter {_n(cd)} mm, "
                             f"depth {_n(k)} mm.", subs=[f"for (i = [0 : {n - 1}]) rotate([0, 0, i * {_n(360 / n)}]) "
                                                         f"{_cyl(r, 0, t - k, cd, k + 1)}"],
                             holes=[_hole("z", (x, y, t - k / 2), cd, (t - k, t)) for x, y in places]))
    return True


# ---------------------------------------------------------------- bracket


def bracket(rng: random.Random, names: tuple[str, ...]) -> Part | None:
    w, d = float(rng.randrange(40, 81, 5)), float(rng.randrange(30, 61, 5))
    t, h = float(rng.randint(4, 8)), float(rng.randrange(25, 61, 5))
    back = d / 2 - t  # the wall's front face
    feats: list[Feature] = []
    strip = _pick(rng, 3, 6) if "strip" in names else 0.0
    gusset = _pick(rng, 3, 6) if "gusset" in names else 0.0
    clear_x = gusset / 2 + GAP
    if strip:
        feats.append(Feature("strip", f"A 45-degree fillet strip with {_n(strip)} mm legs fills the inside corner "
                             "between base and wall along the whole width.",
                             adds=[f"translate([{_n(-w / 2)}, 0, 0]) rotate([90, 0, 90]) linear_extrude(height = "
                                   f"{_n(w)}) polygon([[{_n(back + 0.01)}, {_n(t - 0.01)}], [{_n(back - strip)}, "
                                   f"{_n(t - 0.01)}], [{_n(back + 0.01)}, {_n(t + strip)}]]);"]))
    if gusset:
        ly, lz = _pick(rng, (d - t) / 2, d - t - 4), _pick(rng, (h - t) / 2, h - t - 4)
        feats.append(Feature("gusset", f"A triangular gusset {_n(gusset)} mm thick, centred on X = 0, joins base and "
                             f"wall: it runs {_n(ly)} mm along the base from the wall and {_n(lz)} mm up the wall.",
                             adds=[f"translate([{_n(-gusset / 2)}, 0, 0]) rotate([90, 0, 90]) linear_extrude(height = "
                                   f"{_n(gusset)}) polygon([[{_n(back + 0.01)}, {_n(t - 0.01)}], [{_n(back - ly)}, "
                                   f"{_n(t - 0.01)}], [{_n(back + 0.01)}, {_n(t + lz)}]]);"]))
    if "base" in names:
        hd = rng.choice((4.0, 5.0, 6.0))
        x = _pick(rng, max(clear_x + hd / 2, w / 5), w / 2 - hd / 2 - 3, 0.5)
        y = _pick(rng, -d / 2 + hd / 2 + 3, back - strip - hd / 2 - GAP, 0.5)
        if x - hd / 2 < clear_x or y + hd / 2 > back - strip - GAP or y - hd / 2 < -d / 2 + 3:
            return None
        feats.append(Feature("base", f"Two through-holes of diameter {_n(hd)} mm go down through the base at X = "
                             f"+/-{_n(x)}, Y = {_n(y)}.",
                             subs=[f"for (x = [{_n(-x)}, {_n(x)}]) translate([x, {_n(y)}, -1]) "
                                   f"cylinder(d = {_n(hd)}, h = {_n(t + 2)});"],
                             holes=[_hole("z", (sx * x, y, t / 2), hd, (0, t)) for sx in (-1, 1)]))
    if "wall" in names and not _bracket_wall(rng, feats, w, d, t, h, strip, clear_x):
        return None
    intro = (f"An L-shaped angle bracket of {_n(t)} mm thick plate, {_n(w)} mm wide along X and centred on X = 0: a "
             f"base {_n(d)} mm deep along Y (from Y = {_n(-d / 2)} to {_n(d / 2)}) lying on Z = 0, and a wall along "
             f"its back edge (Y from {_n(back)} to {_n(d / 2)}) rising to Z = {_n(h)}.")
    base = f"union() {{ {_box(-w / 2, -d / 2, 0, w, d, t)} {_box(-w / 2, back, 0, w, t, h)} }}"
    return Part("bracket", base, intro, feats)


def _bracket_wall(rng: random.Random, feats: list[Feature], w: float, d: float, t: float, h: float, strip: float,
                  clear_x: float) -> bool:
    hd = rng.choice((4.0, 5.0, 6.0))
    z = _pick(rng, t + strip + hd / 2 + GAP, h - hd / 2 - 3, 0.5)
    if z - hd / 2 < t + strip + GAP or z + hd / 2 > h - 3:
        return False
    axis = f"rotate([-90, 0, 0]) cylinder(d = {_n(hd)}, h = {_n(t + 2)});"
    y0, mid, wall = _n(d / 2 - t - 1), d / 2 - t / 2, (d / 2 - t, d / 2)  # the wall's faces: the holes' span
    if rng.random() < 0.5 or clear_x > GAP:
        x = _pick(rng, max(clear_x + hd / 2, w / 5), w / 2 - hd / 2 - 3, 0.5)
        if x - hd / 2 < clear_x:
            return False
        feats.append(Feature("wall", f"Two through-holes of diameter {_n(hd)} mm go through the wall along Y at "
                             f"X = +/-{_n(x)}, Z = {_n(z)}.",
                             subs=[f"for (x = [{_n(-x)}, {_n(x)}]) translate([x, {y0}, {_n(z)}]) {axis}"],
                             holes=[_hole("y", (sx * x, mid, z), hd, wall) for sx in (-1, 1)]))
        return True
    length = _pick(rng, 8, w / 2)
    feats.append(Feature("wall", f"A horizontal through slot {_n(hd)} mm wide with rounded ends goes through the wall "
                         f"along Y at Z = {_n(z)}, its end centres at X = +/-{_n(length / 2)}.",
                         subs=[f"hull() {{ translate([{_n(-length / 2)}, {y0}, {_n(z)}]) {axis} "
                               f"translate([{_n(length / 2)}, {y0}, {_n(z)}]) {axis} }}"],
                         holes=[_hole("y", (-length / 2, mid, z), hd, wall, to=(length / 2, mid, z))]))
    return True
