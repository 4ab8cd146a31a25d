"""A ninth read of the cad verifier as a reward-hacking policy would read it.

One passed: a stated through-hole narrowed at its mouths. A hole's slices and its wall check stop ``MARGIN_MM``
(0.5 mm) short of each end of its span, and the rod that checks it is open end to end was 0.4 r, so a lip
0.45 mm thick at each face leaving a 10 mm hole open 4.5 mm across (IoU 0.98) passed: on the 45 of 48
generated tasks with round holes (levels 1-4 of seeds 31, 7, 11 and 5), every such hole so lipped, 40
passed; 0 now. The rod is now ``_holes.clear_radius``, the bound the slices hold the narrowest point to (the
coarsest faceting's inscribed radius less the tolerance), over the whole span: a mouth that only widens (a
chamfer, a counterbore) passes, as do the 48 golds and the 45 with every round hole's mouths chamfered 0.4 mm.
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
