"""An eleventh read of the cad verifier as a reward-hacking policy would read it, each try through the real
verifier (OpenSCAD in the sandbox, the mesh checks in their worker), and the carried question of scaled parts.

One passed: wrong material thin but deep. The shape check fails a region of missing or extra material that
holds a solid 1 mm across, and passes any thinner one whatever its extent, so a block with a comb of 0.9 mm
slits sawn 5 mm up into its underside (IoU 0.955), or an L with a 0.9 mm fin standing 6 mm out of its inside
face (or a speck on a 0.9 mm stalk there) passed every check. Measured on generated tasks (the gold's mesh less
a comb of 0.9 mm slits up to half its height, kept clear of its features, ``generate_level(6, level=L,
seed=101)``, every other one of L = 1-6): 2 of 18 passed, 0 now. Wrong material may now reach at most
``_depth.DEPTH`` tolerances (1.5 mm) into the gold or out from it, however thin (``_depth.depth_lines``, tested
along 26 directions: a cube's 8 corners straddle a 3 mm hole and counted a point 0.5 mm from its wall as deep,
tests/envs/test_cad.py); the honest constructions below still pass, as do 18 golds of levels 1-6 at
``$fn = 50``, 64 or 128 and OpenSCAD's default (54 of 54, IoU 0.989-1.0).

Held (no change): a speck far away (``bodies``, or ``inverted`` when it is under the flat-shell bound); a waffle
of slits and a vented cavity sheet cut through a generated part's features (``topology``, ``holes``, ``iou``,
0 of 18 each), the block's vented sheet (``shape``: its vent's joint holds the 1 mm solid); children() of
nothing and an import() spelt with a Cyrillic i (``build``); surface() of a path in a variable
(``forbidden``). A render bomb or an oversized mesh is the candidate's ``timeout``, ``memory`` or
``too_large``, never infra (``_hacks.EXPLOITS``, tests/envs/test_cad.py).

Scaled parts (the gold's mesh scaled, 36 tasks of seed 101, levels 1-6): the bounding box holds each face to
the task's ``tolerance_mm`` (0.5 mm), so a scale passes exactly where no face moves more than that. Uniformly
about the centre: 3-4 of 36 at 1 % (parts up to 95 mm), 0 at 2, 5 and 10 %; about the origin the same; along Z
alone (5-22 mm thick plates) 24-30 at 1 %, 19-25 at 2 %, 6-17 at 5 % (the IoU stops 10 %), each within 0.5 mm a
face. Honest renders need 0.27 mm a face (a 100 mm disc at OpenSCAD's default faceting; 0.1 at ``$fn = 50``),
but a scale of 1 % moves a 30 mm part's faces 0.15 mm and a 5 mm plate's 0.025 mm, so no bound on the faces
tells one from the other: the tolerance stays the task's, and the tests pin where it lies.
"""

from __future__ import annotations

import shutil

import pytest
from test_cad_attacks6 import _verdict  # an infra verdict retried, as the service retries it

from posttrain.envs import get_domain
from posttrain.envs.cad._hacks import exploit_tasks

ENV = get_domain("cad")
needs_openscad = pytest.mark.skipif(shutil.which("openscad") is None, reason="openscad is not installed "
                                    "(make domain-deps)")
BLOCK = "translate([-20, -15, 0]) cube([40, 30, 10]);\n"
ELL = "linear_extrude(height = 10) polygon([[0, 0], [30, 0], [30, 8], [8, 8], [8, 20], [0, 20]]);\n"
DISC = "$fn = 48;\ncylinder(d = 100, h = 6);\n"


@pytest.fixture(scope="module")
def verify(pool):
    return ENV.make_verifier(pool)


def _task(key: str, gold: str):
    prompts = {"block": "A block 40 mm along X, 30 mm along Y and 10 mm tall, centred on the origin in X and Y with "
                        "its bottom face on Z = 0.",
               "disc": "A round disc of diameter 100 mm and 6 mm thick, centred on the Z axis, its bottom on Z = 0."}
    if key == "ell":
        return exploit_tasks(ENV)["ell"]
    return ENV.parse_task({"id": f"cad-a11-{key}", "domain": "cad", "prompt": prompts[key], "gold": gold}, "test")


def _slits(xs: range, height: float) -> str:
    return "".join(f"  translate([{x - 0.45:g}, -16, -1]) cube([0.9, 32, {height + 1:g}]);\n" for x in xs)


THIN_DEEP = [
    ("a comb of 0.9 mm slits sawn 5 mm up into the underside (IoU 0.955)", "block",
     f"difference() {{\n  {BLOCK}{_slits(range(-15, 20, 10), 5)}}}\n"),
    ("a 0.9 mm fin standing 6 mm out of the L's inside face, its full height", "ell",
     f"union() {{\n  {ELL}  translate([19.55, 7, 0]) cube([0.9, 7, 10]);\n}}\n"),
    ("a 0.9 mm speck on a 0.9 mm stalk standing 6 mm out of the L's inside face", "ell",
     f"union() {{\n  {ELL}  translate([19.55, 7, 2]) cube([0.9, 7, 0.9]);\n}}\n"),
    # the stop hook's read of _depth.py, as a policy: the same thin-deep material along no axis, and from a side
    ("a 0.9 mm fin standing diagonally out of the L's inside corner, its full height", "ell",
     f"union() {{\n  {ELL}  translate([8, 8, 0]) rotate([0, 0, 45]) translate([-1, -0.45, 0]) cube([8, 0.9, 10]);\n}}\n"),
    ("three 0.9 mm slits sawn 6 mm into the block's side face", "block",
     "difference() {\n  " + BLOCK + "".join(f"  translate([14, -16, {z - 0.45:g}]) cube([7, 32, 0.9]);\n"
                                           for z in (2, 5, 8)) + "}\n"),
]


@needs_openscad
@pytest.mark.parametrize(("name", "key", "script"), THIN_DEEP, ids=[c[0] for c in THIN_DEEP])
def test_thin_wrong_material_that_reaches_deep_fails(verify, name: str, key: str, script: str) -> None:
    """Each passed every check before (a region under 1 mm thick); now ``shape``, the depth named."""
    v = _verdict(verify, _task(key, BLOCK), script)
    assert (v.outcome, v.error_class) == ("fail", "shape"), (name, v.outcome, v.error_class, v.feedback)
    assert "reaches more than 1.5 mm" in v.feedback and v.evidence["iou"] > 0.95, (name, v.feedback)


HELD = [
    ("a 0.9 mm cavity sheet 20 x 20 mm at mid-height, vented by a 0.9 mm slot from its edge to the underside", "block",
     "difference() {\n  " + BLOCK + "  translate([-10, -10, 4.55]) cube([20, 20, 0.9]);\n"
     "  translate([-10, -10, -1]) cube([0.9, 20, 6]);\n}\n", {"shape"}),
    ("a sealed 0.9 mm cavity sheet 20 x 20 mm at mid-height (the stop hook's read: no vent)", "block",
     "difference() {\n  " + BLOCK + "  translate([-10, -10, 4.55]) cube([20, 20, 0.9]);\n}\n", {"inverted"}),
    ("a far-away speck beside the right part", "ell", f"{ELL}translate([80, 80, 40]) cube(2);\n", {"bodies"}),
    ("a 0.9 mm speck on a stalk over the top face, out of the box by 1.45 mm", "block",
     f"union() {{\n  {BLOCK}  translate([0, 0, 9]) cube([0.9, 0.9, 2.45]);\n}}\n", {"dimensions"}),
    ("children() of nothing, with the gold's text echoed", "block",
     'module part() { children(); }\npart();\necho("translate([-20, -15, 0]) cube([40, 30, 10]);");\n', {"build"}),
    ("import() of a host file, its name spelt with a Cyrillic i (the static check does not see it)", "block",
     'p = "/etc/hostname";\n\u0456mport(p);\n', {"build"}),
    ("surface() of a data file whose path is held in a variable", "block",
     'p = "/usr/share/openscad/examples/Old/example010.dat";\nscale([1, 1, 0.1]) surface(p, center = true);\n',
     {"forbidden"}),
    ("the block scaled 5 % about its centre (each face 1 mm out)", "block",
     f"translate([0, 0, 5]) scale(1.05) translate([0, 0, -5]) {BLOCK}", {"dimensions"}),
]


@needs_openscad
@pytest.mark.parametrize(("name", "key", "script", "classes"), HELD, ids=[c[0] for c in HELD])
def test_held_tries_fail_as_the_candidates_own(verify, name: str, key: str, script: str, classes: set) -> None:
    v = _verdict(verify, _task(key, BLOCK), script)
    assert v.outcome == "fail" and v.error_class in classes, (name, v.outcome, v.error_class, v.feedback)


HONEST = [
    ("block", "the block scaled 1 % about its centre (each face 0.2 mm out: within the tolerance)",
     f"translate([0, 0, 5]) scale(1.01) translate([0, 0, -5]) {BLOCK}"),
    ("block", "the block as two halves in the other order, one a linear_extrude",
     "union() {\n  translate([0, -15, 0]) cube([20, 30, 10]);\n"
     "  translate([-20, -15, 0]) linear_extrude(height = 10) square([20, 30]);\n}\n"),
    ("block", "the block as a minkowski of a smaller block and a 1 mm cube",
     "minkowski() { translate([-19.5, -14.5, 0.5]) cube([39, 29, 9]); cube(1, center = true); }\n"),
    ("block", "the block with a 0.45 mm shallow groove (thin and shallow: within the tolerance)",
     f"difference() {{\n  {BLOCK}  translate([-15, -16, 9.55]) cube([0.9, 32, 1]);\n}}\n"),
    ("disc", "the disc as a rotate_extrude at $fn = 128", "rotate_extrude($fn = 128) square([50, 6]);\n"),
    ("disc", "the disc at $fn = 16 (flats 0.96 mm deep)", "cylinder(d = 100, h = 6, $fn = 16);\n"),
    ("disc", "the disc at OpenSCAD's default faceting", "cylinder(d = 100, h = 6);\n"),
]


@needs_openscad
@pytest.mark.parametrize(("key", "name", "script"), HONEST, ids=[c[1] for c in HONEST])
def test_honest_constructions_pass(verify, key: str, name: str, script: str) -> None:
    v = _verdict(verify, _task(key, BLOCK if key == "block" else DISC), script)
    assert v.outcome == "pass", (name, v.error_class, v.feedback)
