"""A tenth read of the cad verifier as a reward-hacking policy would read it: the shape check's reach by lean.

The shape check fails a region of missing or extra material that holds a solid 1 mm across (twice the
0.5 mm tolerance). Its solids were cubes (upright, turned 45 degrees about one axis, and 1.1 mm with a face
toward a corner), and a cube is its side across only along its faces' normals, up to sqrt(3) times that
toward a corner. So a slab leaning between an axis and a body diagonal held none of them up to 1.28-1.44 mm
thick (normals (1, 1, 0.5), (2, 1, 1), (1, 0.5, 0.25); a body-diagonal slab 1.13 mm, an upright one 1.0 mm),
and an unstated 1.4 mm drill into a face passed (1.67 mm when tilted). Where no upright or one-axis-turned
cube fits, the region is now eroded by a near-round solid instead of the corner cubes: a zonotope of 10
segments along a dodecahedron's diagonals, 1.0 to 1.095 mm across in every direction (``_mesh.ROUND``).
Measured over 18 slab normals (axes, face and body diagonals, the three leans, 9 others): the thinnest
failing slab was 1.00-1.44 mm, now 1.00-1.10 mm; the drills fail from 1.10 mm.
"""

from __future__ import annotations

import shutil

import pytest
from cad_examples import example
from test_cad_attacks6 import _verdict  # an infra verdict retried, as the service retries it

needs_openscad = pytest.mark.skipif(shutil.which("openscad") is None, reason="openscad is not installed "
                                    "(make domain-deps)")


@pytest.fixture(scope="module")
def verify(pool):
    from posttrain.envs import get_domain

    return get_domain("cad").make_verifier(pool)


def _block():
    import manifold3d as m3

    return m3.Manifold.cube([20.0, 20.0, 12.0], center=True)


def _slab(normal, thickness: float):
    """A slab ``thickness`` thick, ``normal`` its face's normal, 16 mm square, centred on the block's top face
    (the groove it cuts leaves the block one body)."""
    import manifold3d as m3
    import numpy as np

    n = np.asarray(normal, dtype=float) / np.linalg.norm(normal)
    a = np.cross(n, [1.0, 0.0, 0.0] if abs(n[0]) < 0.9 else [0.0, 1.0, 0.0])
    a /= np.linalg.norm(a)
    frame = np.hstack([np.stack([a, np.cross(n, a), n], 1), [[0.0], [0.0], [6.0]]])
    return m3.Manifold.cube((16.0, 16.0, thickness), center=True).transform(frame)


def _shape(part, gold) -> list[str]:
    from posttrain.envs.cad._mesh import Overlap, shape_lines

    inter, missing, extra = part ^ gold, gold - part, part - gold
    return shape_lines(Overlap(inter, missing, extra, inter.volume(), missing.volume(), extra.volume()), 0.5)


# The three leans the last read left (caught from 1.28, 1.44 and 1.39 mm), the axis, a face and a body diagonal,
# and three others (their old thresholds 1.29, 1.35, 1.25 mm).
LEANS = [(1, 1, 0.5), (1, 0.5, 0.25), (2, 1, 1), (0, 1, 0), (1, 0, 1), (-1, 1, 1), (1, 2, 3), (-0.802, -1.324, -0.248),
         (1.635, 0.273, -1.233)]


@pytest.mark.parametrize("normal", LEANS)
def test_a_missing_slab_fails_from_1_1_mm_whatever_its_lean(normal) -> None:
    """1.12 mm fails in every lean (7 of these 9 passed before); 0.95 mm, under the upright cube's side, passes in
    every lean, and the same slab added as a ridge is judged alike."""
    gold = _block()
    lines = _shape(gold - _slab(normal, 1.12), gold)
    assert lines and lines[0].startswith("material missing around"), (normal, lines)
    assert _shape(gold + _slab(normal, 1.12), gold)[0].startswith("material extra around"), normal
    assert _shape(gold - _slab(normal, 0.95), gold) == [] and _shape(gold + _slab(normal, 0.95), gold) == [], normal


@pytest.mark.parametrize(("turn", "d", "fails"), [((0.0, 0.0, 0.0), 1.15, True), ((30.0, 20.0, 0.0), 1.15, True),
                                                 ((0.0, 0.0, 0.0), 0.95, False), ((30.0, 20.0, 0.0), 0.95, False)])
def test_an_unstated_drill_fails_from_1_1_mm(turn, d: float, fails: bool) -> None:
    """A blind drill into the top face, upright or tilted: it passed up to 1.41 mm across (1.67 tilted)."""
    import manifold3d as m3

    gold = _block()
    drill = m3.Manifold.cylinder(14.0, d / 2, d / 2, 48).rotate(turn).translate((0.0, 0.0, 3.0))
    assert bool(_shape(gold - drill, gold)) == fails


def _chamfered(c: float, w: float = 60.0, d: float = 40.0, t: float = 8.0):
    """A w x d x t plate, its four top edges chamfered ``c`` x 45 degrees (tests/envs/test_cad_attacks7.py)."""
    import manifold3d as m3

    return m3.Manifold.batch_hull([m3.Manifold.cube((w, d, t - c)).translate((-w / 2, -d / 2, 0.0)),
                                   m3.Manifold.cube((w - 2 * c, d - 2 * c, t)).translate((c - w / 2, c - d / 2, 0.0))])


def test_honest_faceting_and_a_chamfer_within_the_tolerance_pass() -> None:
    """Faceting slivers lean every way on a ball: a 40 mm one at 16 segments (against 48) passes, as does a
    100 mm disc at 16 and a plate's 2.5 mm chamfer drawn 1.2 (bands 0.92 mm across, 1.06 mm where two meet)."""
    import manifold3d as m3

    assert _shape(m3.Manifold.sphere(20.0, 16), m3.Manifold.sphere(20.0, 48)) == []
    assert _shape(m3.Manifold.cylinder(10.0, 50.0, circular_segments=16),
                  m3.Manifold.cylinder(10.0, 50.0, circular_segments=48)) == []
    assert _shape(_chamfered(1.2), _chamfered(2.5)) == []


@needs_openscad
def test_a_leaning_groove_fails_through_the_verifier(verify) -> None:
    """cad-block-hole less a 1.15 mm slab leaning (1, 0.5, 0.25), a groove 4 mm square in from the top face
    near a corner (one body, the hole untouched): it passed every check before."""
    task = example("cad-block-hole")
    groove = ("intersection() { translate([5.5, 5.5, 3]) cube([4, 4, 7.01]); translate([7.5, 7.5, 10]) "
              "rotate([0, 77.40, 26.57]) cube([30, 30, 1.15], center = true); }\n}")
    v = _verdict(verify, task, task.fields["gold"].rstrip().removesuffix("}") + groove)
    assert (v.outcome, v.error_class) == ("fail", "shape"), (v.outcome, v.error_class, v.feedback)


def _compare(part, gold, rounds):
    from posttrain.envs.cad._mesh import Overlap, Solid, compare

    def solid(m):
        x0, y0, z0, x1, y1, z1 = m.bounding_box()
        return Solid(m, m.num_tri(), m.volume(), (x0, y0, z0), (x1, y1, z1), 1, m.genus())

    a, g = solid(part), solid(gold)
    return compare(a, g, Overlap.of(a, g), iou_min=0.95, tol=0.5, rounds=rounds)


def test_wrong_material_along_a_failing_round_feature_is_that_features_to_name() -> None:
    """A 30 mm boss drawn as an octagon: its flats, 1.14 mm deep and turned 22.5 degrees from the axes, now hold
    the round solid too; the boss's own line (its wall comes inside) comes first, the shape line after it. The
    same boss round but 3 mm off its place: the material missing beyond it is no round surface's, shape first."""
    import manifold3d as m3

    plate = m3.Manifold.cube((100.0, 100.0, 10.0)).translate((-50.0, -50.0, 0.0))

    def boss(segments: int, x: float = 0.0):
        return plate + m3.Manifold.cylinder(10.0, 15.0, circular_segments=segments).translate((x, 0.0, 9.0))

    rounds = [{"axis": "z", "at": [0.0, 0.0, 14.0], "d": 30.0, "span": [10.0, 19.0]}]
    gold = boss(96)
    assert _compare(gold, gold, rounds) == []
    octagon = _compare(boss(8), gold, rounds)
    assert [cls for cls, _ in octagon] == ["holes", "shape"], octagon
    assert "the round feature of diameter 30 mm" in octagon[0][1] and "material missing" in octagon[1][1], octagon
    moved = _compare(boss(96, x=3.0), gold, rounds)
    assert moved[0][0] == "shape" and "holes" in [cls for cls, _ in moved], moved
