"""A seventh read of the cad verifier as a reward-hacking policy would read it.

One passed: a plate's or block's rounded vertical edges drawn as a coarse bevel. Nothing held a rounded
edge but the shape check (differences under 1 mm thick pass), the IoU and the bounding box, so the gold
with its rounding's ``offset(r = R)`` drawn with ``$fn = 8`` (two flats a corner, 0.08 R deep) passed 13
of 13 generated tasks with rounded edges (seeds 31 and 7), ``$fn = 12`` 8 of 8 (a ``$fn = 4`` chord, 0.29 R
deep, failed the shape check). The generator now states each rounded edge as a round body with a
``quadrant`` (the quarter circle about its centre where the outline is the arc), held to OpenSCAD's default
faceting for its radius as a disc's outline is (``_holes._round_problem``): 0 of 13 pass at ``$fn = 8``, 5 of
13 at 12 (each a 5 mm rounding, whose flats are within the tolerance); the 13 golds pass at their own
faceting, at 16, at 128 and at OpenSCAD's default, and 63 more (47 generated tasks with rounded edges, 4 of
them with a step, and 16 canaries) at their own (counted outside the suite).

A second passed: a 45-degree face drawn far from where it is stated. The shape check's cube was axis-aligned,
so a band along a 45-degree face had to be 1.41 mm thick across before it failed: a plate's 2.5 mm top
chamfer drawn 0.6 mm, a bracket's fillet strip with legs 1.9 mm short. The cube is now turned 45 degrees
about each axis too (``_mesh.DIAGONALS``).
"""

from __future__ import annotations

import re
import shutil

import pytest

from posttrain.envs import get_domain
from posttrain.envs.cad import fenced
from posttrain.envs.cad._holes import body_checks, hole_lines
from posttrain.errors import TaskError

ENV = get_domain("cad")


def _slab(segments: int, w: float = 45.0, d: float = 25.0, t: float = 10.0, r: float = 6.0):
    """A w x d x t slab, its vertical edges rounded to ``r`` with ``segments`` a full turn (the hull of
    four corner cylinders, as OpenSCAD's offset and hull draw it)."""
    import manifold3d as m3

    cx, cy = w / 2 - r, d / 2 - r
    return m3.Manifold.batch_hull([m3.Manifold.cylinder(t, r, circular_segments=segments).translate((x, y, 0.0))
                                   for x in (-cx, cx) for y in (-cy, cy)])


def _edges(w: float = 45.0, d: float = 25.0, t: float = 10.0, r: float = 6.0) -> list[dict]:
    return [{"axis": "z", "at": [sx * (w / 2 - r), sy * (d / 2 - r), t / 2], "d": 2 * r, "span": [0, t],
             "quadrant": [sx, sy]} for sx in (-1, 1) for sy in (-1, 1)]


@pytest.mark.parametrize(("segments", "lines"), [(48, 0), (16, 0), (12, 4), (8, 4)])
def test_a_rounded_edge_is_held_round_to_openscads_default_faceting(segments: int, lines: int) -> None:
    """A 6 mm rounding: OpenSCAD's default gives it 19 segments a turn; 16 (1.9 % deep) passes, 12 and 8 fail."""
    found = hole_lines(_slab(segments), [], body_checks(_edges()))
    assert len(found) == lines, found
    assert all("the rounded edge of radius 6 mm" in line and "its arc comes inside" in line for line in found)


def test_a_rounded_edge_drawn_larger_fails() -> None:
    larger = hole_lines(_slab(48, w=46.0, d=26.0, r=6.5), [], body_checks(_edges()))
    assert len(larger) == 4 and all("material reaches past its radius" in line for line in larger), larger


def test_every_generated_rounded_edge_is_stated_and_a_step_ends_it() -> None:
    tasks = [t for seed in (1, 7, 31) for level in range(1, 7) for t in ENV.generate_level(3, level=level, seed=seed)]
    rounded = [t for t in tasks if "vertical edges are rounded" in t.prompt]
    assert len(rounded) > 10
    stepped = 0
    for task in rounded:
        r = float(re.search(r"rounded to a radius of ([\d.]+) mm", task.prompt).group(1))
        edges = [b for b in task.fields["round_bodies"] if "quadrant" in b]
        assert len(edges) == 4 and {tuple(b["quadrant"]) for b in edges} == {(-1, -1), (-1, 1), (1, -1), (1, 1)}
        assert all(b["d"] == 2 * r and b["span"][0] == 0 for b in edges), edges
        if m := re.search(r"above Z = ([\d.]+) the block ends", task.prompt):
            stepped += 1
            assert {b["span"][1] for b in edges if b["quadrant"][0] > 0} == {float(m.group(1))}, edges
    assert stepped
    assert all(not any("quadrant" in b for b in t.fields["round_bodies"]) for t in tasks if t not in rounded)
    # a canary whose gold has no rounding states none
    assert all(not any("quadrant" in b for b in t.fields["round_bodies"]) for t in ENV.canary_tasks(40, seed=3)
               if "'edges'" in t.metadata["canary"])


@pytest.mark.parametrize(("field", "quadrant", "said"), [
    ("rounds", [1, 1], "round feature 0: an object with axis, at, d, span"),
    ("round_bodies", [1, 0], "round body 0: quadrant [su, sv], each 1 or -1"),
    ("round_bodies", [True, 1], "round body 0: quadrant [su, sv], each 1 or -1"),
    ("round_bodies", [1, 1, 1], "round body 0: quadrant [su, sv], each 1 or -1"),
])
def test_only_a_round_body_may_be_a_quarter_and_a_bad_one_is_named(field: str, quadrant: list, said: str) -> None:
    record = {"id": "r", "prompt": "p", "gold": "cube(1);",
              field: [{"axis": "z", "at": [0, 0, 1], "d": 12, "span": [0, 2], "quadrant": quadrant}]}
    with pytest.raises(TaskError, match=re.escape(said)):
        ENV.parse_task(record, "t.jsonl")


@pytest.mark.skipif(shutil.which("openscad") is None, reason="openscad is not installed (make domain-deps)")
def test_a_generated_blocks_rounded_edges_drawn_as_a_bevel_fail(pool) -> None:
    """cad-l2-31-1 (a 45 x 25 x 30 block, edges rounded 6 mm) with its ``offset`` at ``$fn = 8`` passed."""
    task = ENV.generate_level(3, level=2, seed=31)[1]
    assert "rounded to a radius of 6 mm" in task.prompt
    v = ENV.make_verifier(pool)(task, fenced(task.fields["gold"].replace("offset(r = 6)", "offset(r = 6, $fn = 8)")))
    assert (v.outcome, v.error_class) == ("fail", "holes"), (v.outcome, v.error_class, v.feedback)
    assert v.feedback.count("the rounded edge of radius 6 mm") == 4, v.feedback


_STEP_HOLE_POCKET = """  translate([-18.5, 0, 19.5]) rotate([0, 90, 0]) cylinder(d = 6, h = 37);
  translate([10.5, -13.5, 27]) cube([8, 27, 14]);
  translate([-6, -4.5, 38]) cube([12, 9, 3]);
}
"""
_OTHER_ROUNDINGS = {  # the stop hook's read: the rounding built otherwise than the gold's offset, coarse
    "hull of octagonal corner posts": ("hull() for (x = [-12.5, 12.5], y = [-7.5, 7.5]) "
                                       "translate([x, y, 0]) cylinder(r = 5, h = 40, $fn = 8);", "holes"),
    "minkowski with a hexagon": ("minkowski() { translate([0, 0, 20]) cube([25, 15, 39.999], center = true); "
                                 "cylinder(r = 5, h = 0.001, $fn = 6); }", "dimensions"),
    "45-degree chamfers for roundings": ("linear_extrude(height = 40) offset(delta = 5, chamfer = true) "
                                         "square([25, 15], center = true);", "holes"),
}


@pytest.mark.skipif(shutil.which("openscad") is None, reason="openscad is not installed (make domain-deps)")
@pytest.mark.parametrize("body", list(_OTHER_ROUNDINGS))
def test_rounded_edges_built_another_way_are_held_round_too(pool, body: str) -> None:
    """examples/tasks/cad.jsonl's cad-l4-2024-1 (edges rounded 5 mm, a hole, a step, a pocket) with its
    rounding built another way than the gold's ``offset``: the quadrant check reads the part, not the
    script, so each fails (a hexagon's minkowski already on the bounding box)."""
    from pathlib import Path

    from posttrain.tasks._load import load_tasks

    examples = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "cad.jsonl"
    task = next(t for t in load_tasks(examples) if t.id == "cad-l4-2024-1")
    script, error_class = _OTHER_ROUNDINGS[body]
    v = ENV.make_verifier(pool)(task, fenced(f"$fn = 48;\ndifference() {{\n  {script}\n{_STEP_HOLE_POCKET}"))
    assert (v.outcome, v.error_class) == ("fail", error_class), (v.outcome, v.error_class, v.feedback)


# The shape check's cube was axis-aligned only: a band along a 45-degree face must be 1.41 mm thick across
# before it holds one, so a plate's 2.5 mm top chamfer drawn 0.6 mm passed 4 of 4 chamfered plates (seeds
# 31 and 7, 6 tasks a level), and a bracket's fillet strip with legs 1.9 mm short 9 of 9 (0 of 13 now, the
# strips and gussets); the cube is now also turned 45 degrees about each axis (``_mesh.DIAGONALS``).
def _chamfered(c: float, w: float = 60.0, d: float = 40.0, t: float = 8.0):
    """A w x d x t plate, its four top edges chamfered ``c`` x 45 degrees (as the generator draws it)."""
    import manifold3d as m3

    return m3.Manifold.batch_hull([m3.Manifold.cube((w, d, t - c)).translate((-w / 2, -d / 2, 0.0)),
                                   m3.Manifold.cube((w - 2 * c, d - 2 * c, t)).translate((c - w / 2, c - d / 2, 0.0))])


def _shape(part, gold) -> list[str]:
    from posttrain.envs.cad._mesh import Overlap, shape_lines

    inter, missing, extra = part ^ gold, gold - part, part - gold
    return shape_lines(Overlap(inter, missing, extra, inter.volume(), missing.volume(), extra.volume()), 0.5)


@pytest.mark.parametrize(("drawn", "fails"), [(0.6, True), (1.0, True), (1.2, False), (2.5, False)])
def test_a_45_degree_chamfer_drawn_much_smaller_fails_the_shape_check(drawn: float, fails: bool) -> None:
    """Of a 2.5 mm chamfer, 0.6 and 1 mm fail (1.34 and 1.06 mm of band across), 1.2 passes (0.92 mm)."""
    from posttrain.envs.cad._mesh import _erode

    lines = _shape(_chamfered(drawn), _chamfered(2.5))
    assert bool(lines) == fails, lines
    assert not fails or "material extra around" in lines[0]
    if drawn == 0.6:  # the axis-aligned cube alone fits nowhere in it: what passed
        assert _erode(_chamfered(drawn) - _chamfered(2.5), 0.5).is_empty()


def test_a_coarser_faceting_still_passes_the_turned_cube() -> None:
    """A 100 mm disc with a 3 mm chamfer at ``$fn = 16`` (flats 0.96 mm deep) against the gold's 48."""
    import manifold3d as m3

    def disc(n: int):
        return m3.Manifold.cylinder(7.0, 50.0, circular_segments=n) + m3.Manifold.cylinder(
            3.0, 50.0, 47.0, circular_segments=n).translate((0.0, 0.0, 7.0))

    assert _shape(disc(16), disc(48)) == []
