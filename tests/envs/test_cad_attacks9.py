"""A ninth read of the cad verifier as a reward-hacking policy would read it: two holes the last read left.

One: a stated through-hole narrowed at its mouths. A hole's slices and its wall check stop ``MARGIN_MM``
(0.5 mm) short of each end of its span, and the rod that checks it is open end to end was 0.4 r, so a lip
0.45 mm thick at each face leaving a 10 mm hole open 4.5 mm across (IoU 0.98) passed: on the 45 of 48
generated tasks with round holes (levels 1-4 of seeds 31, 7, 11 and 5), every such hole so lipped, 40
passed; 0 now. The rod is now ``_holes.clear_radius``, the bound the slices hold the narrowest point to (the
coarsest faceting's inscribed radius less the tolerance), over the whole span: a mouth that only widens (a
chamfer, a counterbore) passes, as do the 48 golds and the 45 with every round hole's mouths chamfered 0.4 mm.

Two: a missing slab whose face leans toward a corner. The shape check's cubes, upright or turned 45 degrees
about one axis, are 1 mm across only along their faces' normals, so a slab of missing material with its
normal along a body diagonal held none up to 1.39 mm thick (1.49 mm at the worst lean), where an upright one
fails from 1 mm. Where no other cube fits, the region is now eroded by a cube 1.1 mm across with a face toward
each corner (then ``_mesh.CORNERS``; a plate's chamfer drawn 1.2 of 2.5 mm, pinned passing, holds 1.06 mm where
its bands meet): such a slab fails from 1.12 mm. Since 12406cd a near-round solid (``_mesh.ROUND``) takes
those cubes' place, and a slab at any lean fails from 1.0-1.1 mm (tests/envs/test_cad_attacks10.py).
"""

from __future__ import annotations

import shutil

import pytest
from cad_examples import example
from test_cad_attacks6 import _verdict  # an infra verdict retried, as the service retries it

from posttrain.envs.cad._holes import hole_lines

needs_openscad = pytest.mark.skipif(shutil.which("openscad") is None, reason="openscad is not installed "
                                    "(make domain-deps)")


@pytest.fixture(scope="module")
def verify(pool):
    from posttrain.envs import get_domain

    return get_domain("cad").make_verifier(pool)


def _lip(z0: float, opening: float) -> str:
    """A lip 0.45 mm thick from ``z0`` in the block's 10 mm hole, ``opening`` mm across."""
    return (f"translate([0, 0, {z0}]) difference() {{ cylinder(d = 10.02, h = 0.45); "
            f"translate([0, 0, -1]) cylinder(d = {opening}, h = 2.45); }}")


# cad-block-hole: a 20 x 20 x 10 block, a 10 mm hole through it along Z. Each passed before (IoU 0.98-0.99).
LIPS = [("lips at both faces, 4.5 mm open", _lip(0, 4.5) + _lip(9.55, 4.5)),
        ("a lip at the top face, 8 mm open", _lip(9.55, 8))]


@needs_openscad
@pytest.mark.parametrize(("name", "lips"), LIPS, ids=[c[0] for c in LIPS])
def test_a_hole_narrowed_by_a_lip_at_its_mouth_fails(verify, name: str, lips: str) -> None:
    task = example("cad-block-hole")
    v = _verdict(verify, task, task.fields["gold"] + lips)
    assert (v.outcome, v.error_class) == ("fail", "holes"), (name, v.outcome, v.error_class, v.feedback)
    assert "it is not open 9.46 mm across from Z = 0 to 10, its ends included" in v.feedback, v.feedback


@needs_openscad
def test_a_hole_with_chamfered_mouths_passes(verify) -> None:
    """An honest variant: both mouths chamfered 0.5 mm x 45 degrees (wider, never narrower), at
    OpenSCAD's default faceting (a 10 mm hole: 16 segments)."""
    task = example("cad-block-hole")
    chamfers = ("translate([0, 0, -0.01]) cylinder(d1 = 11.02, d2 = 9.9, h = 0.56);\n"
                "  translate([0, 0, 9.45]) cylinder(d1 = 9.9, d2 = 11.02, h = 0.56);\n}")
    script = task.fields["gold"].replace("$fn = 48;\n", "").rstrip().removesuffix("}") + chamfers
    v = _verdict(verify, task, script)
    assert v.passed, v.feedback


def _block_minus(*cuts):
    import manifold3d as m3

    block = m3.Manifold.cube([20.0, 20.0, 12.0], center=True)
    for cut in cuts:
        block = block - cut
    return block


def test_a_cross_hole_and_a_slot_lipped_at_one_mouth_fail() -> None:
    """Along X (sliced in the turned part) and a slot (its rod the hull of two): a lip 0.45 mm thick at
    one face, right elsewhere, fails; the same mouth 0.45 mm wider passes."""
    import manifold3d as m3

    def along_x(d: float, x0: float, length: float):
        return m3.Manifold.cylinder(length, d / 2, d / 2, 48).rotate((0.0, 90.0, 0.0)).translate((x0, 0.0, 0.0))

    hole = [{"axis": "x", "at": [0.0, 0.0, 0.0], "d": 6.0, "span": [-10.0, 10.0]}]
    lipped = along_x(6, -11, 20.55) + along_x(3, 9, 2)  # 6 mm to X = 9.55, 3 mm open from there out
    assert "it is not open" in hole_lines(_block_minus(lipped), hole)[0]
    assert hole_lines(_block_minus(along_x(6, -11, 22), along_x(6.9, 9.55, 2)), hole) == []

    def slot(w: float, z0: float, h: float):
        return m3.Manifold.batch_hull([m3.Manifold.cylinder(h, w / 2, w / 2, 48).translate((x, 0.0, z0))
                                       for x in (-4.0, 4.0)])

    stated = [{"axis": "z", "at": [-4.0, 0.0, 0.0], "to": [4.0, 0.0, 0.0], "d": 4.0, "span": [-6.0, 6.0]}]
    assert hole_lines(_block_minus(slot(4, -7, 14)), stated) == []
    assert "it is not open" in hole_lines(_block_minus(slot(4, -7, 12.55), slot(2, 5, 2)), stated)[0]


def _slab(normal, thickness: float):
    """A slab ``thickness`` thick, ``normal`` its face's normal, 16 mm square, centred on the top face of
    ``_block_minus``'s block: the groove it cuts leaves the block one body."""
    import manifold3d as m3
    import numpy as np

    n = np.asarray(normal, dtype=float) / np.linalg.norm(normal)
    a = np.cross(n, [1.0, 0.0, 0.0] if abs(n[0]) < 0.9 else [0.0, 1.0, 0.0])
    a /= np.linalg.norm(a)
    frame = np.hstack([np.stack([a, np.cross(n, a), n], 1), [[0.0], [0.0], [6.0]]])
    return m3.Manifold.cube((16.0, 16.0, thickness), center=True).transform(frame)


# (normal, thickness, fails): the body diagonal and the old check's worst lean passed up to 1.39 and 1.49 mm
# (now 1.13 and 1.21).
SLABS = [((1, 1, 1), 1.2, True), ((-1, 1, 1), 1.15, True), ((-0.475, -0.334, 0.814), 1.25, True),
         ((1, 1, 1), 0.95, False), ((-0.475, -0.334, 0.814), 0.95, False), ((1, 0, 0), 0.95, False),
         ((1, 0, 0), 1.05, True), ((1, 0, 1), 1.05, True),
         # the stop hook's read, leans between an axis and the body diagonal: caught by 1.3-1.45 mm (not 1.13)
         ((1, 1, 0.5), 1.3, True), ((1, 0.5, 0.25), 1.45, True), ((2, 1, 1), 1.45, True)]


@pytest.mark.parametrize(("normal", "thickness", "fails"), SLABS)
def test_a_missing_slab_leaning_toward_a_corner_fails_from_1_13_mm(normal, thickness: float, fails: bool) -> None:
    from posttrain.envs.cad._mesh import Overlap, shape_lines

    gold = _block_minus()
    part = _block_minus(_slab(normal, thickness))
    inter, missing, extra = part ^ gold, gold - part, part - gold
    lines = shape_lines(Overlap(inter, missing, extra, inter.volume(), missing.volume(), extra.volume()), 0.5)
    assert bool(lines) == fails, lines
    assert not fails or lines[0].startswith("material missing around")


@needs_openscad
def test_a_slab_leaning_toward_a_corner_fails_through_the_verifier(verify) -> None:
    """cad-block-hole less a 1.2 mm slab, its normal along the body diagonal, a groove 4 mm square in from
    the top face near a corner (one body, the hole untouched): it passed every check before."""
    task = example("cad-block-hole")
    groove = ("intersection() { translate([5.5, 5.5, 3]) cube([4, 4, 7.01]); translate([7.5, 7.5, 10]) "
              "rotate([0, 54.7356, 45]) cube([30, 30, 1.2], center = true); }\n}")
    v = _verdict(verify, task, task.fields["gold"].rstrip().removesuffix("}") + groove)
    assert (v.outcome, v.error_class) == ("fail", "shape"), (v.outcome, v.error_class, v.feedback)


def test_three_more_ways_to_leave_a_hole_not_open_fail() -> None:
    """The stop hook's read of dcf0484, as a policy, at a 6 mm hole through a 12 mm block: a lip inside the
    0.5 mm margin that covers only one side of the mouth (a crescent leaving the hole 4.8 mm clear on one
    side; it passed on the old rod), a 0.2 mm membrane across the bore at mid-depth, and the bore drawn
    0.6 mm off its stated axis. The honest bore passes."""
    import manifold3d as m3

    stated = [{"axis": "z", "at": [0.0, 0.0, 0.0], "d": 6.0, "span": [-6.0, 6.0]}]

    def bore(d: float, z0: float = -7.0, h: float = 14.0, x: float = 0.0):
        return m3.Manifold.cylinder(h, d / 2, d / 2, 48).translate((x, 0.0, z0))

    crescent = m3.Manifold.cylinder(0.45, 3.01, 3.01, 48).translate((0.0, 0.0, 5.55)) - bore(6, 5, 2, x=-1.2)
    assert hole_lines(_block_minus(bore(6)), stated) == []
    assert "it is not open 5.59 mm across" in hole_lines(_block_minus(bore(6)) + crescent, stated)[0]
    assert "the part is solid there" in hole_lines(_block_minus(bore(6, -7, 6.9), bore(6, 0.1, 7)), stated)[0]
    assert "measured from the stated axis" in hole_lines(_block_minus(bore(6, x=0.6)), stated)[0]
