"""The cad domain (posttrain.envs.cad): script extraction, the mesh gate on hand-built meshes, the
measured metrics case, exploit classes, feature ablations, faceting, blame, views, and the CLI.

The conformance suite (test_domains.py) covers references / no-ops / exploits through the
service; these tests pin the reasons. Renders use the real OpenSCAD in the real sandbox.
"""

from __future__ import annotations

import base64
import doctest
import importlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from posttrain.envs import HasCanaries, HasCapabilities, HasLevels, get_domain, task_to_record
from posttrain.envs.cad import fenced
from posttrain.envs.cad._hacks import EXPLOITS, exploit_tasks
from posttrain.envs.cad._mesh import MAX_TRIANGLES, MeshProblem, parse_stl, solid_of, surface_problem
from posttrain.envs.cad._script import extract_script, script_problem
from posttrain.envs.conformance import STARVED
from posttrain.errors import TaskError

ROOT = Path(__file__).resolve().parents[2]
ENV = get_domain("cad")
needs_openscad = pytest.mark.skipif(shutil.which("openscad") is None, reason="openscad is not installed "
                                    "(make domain-deps)")


@pytest.fixture(scope="module")
def verify(pool):
    return ENV.make_verifier(pool)


def _many(verify, pairs, tries: int = 3):
    """Verdicts of ``pairs`` from two threads, an infra verdict retried as the execution service retries
    it (a loaded host's starved render; a report that names another script): what a run would record."""

    def one(pair):
        for _ in range(tries):
            verdict = verify(*pair)
            if not verdict.is_infra_error:
                return verdict
        return verdict

    with ThreadPoolExecutor(2) as ex:
        return list(ex.map(one, pairs))


# ---------------------------------------------------------------- pure: no render


@pytest.mark.parametrize("module", ["__init__", "_domain", "_gen", "_holes", "_mesh", "_render", "_script"])
def test_docstring_examples(module: str) -> None:
    mod = importlib.import_module("posttrain.envs.cad" + ("" if module == "__init__" else f".{module}"))
    result = doctest.testmod(mod)
    assert result.failed == 0 and result.attempted > 0


def test_the_script_is_the_last_openscad_block_or_the_whole_text() -> None:
    assert extract_script("a\n```openscad\ncube(1);\n```\nthen\n```scad\ncube(2);\n```") == ("cube(2);\n", "fenced")
    assert extract_script("```\nsphere(1);\n```") == ("sphere(1);\n", "fenced")
    assert extract_script("cube(3);") == ("cube(3);", "whole")
    assert extract_script("```python\nx = 1\n```")[0] is None
    assert extract_script("```openscad\ncube(1);")[0] is None


@pytest.mark.parametrize("script", [
    "// the top surface is flat, import nothing\ncube(1);",
    'echo("use <this> and import(that)"); cube(1);',
    "/* surface finish: fine; include <no> is a comment */ cube(1);",
    "$import = 2; imports = 3; my_surface = 1; cube(imports);",
    "filename = 1; profile = 2; cube(filename);",
    'linear_extrude(10) text("hi"); linear_extrude(height = 2) square(1); rotate_extrude($fn = 48) square(1);',
    'linear_extrude(h) square(1); // linear_extrude("a.dxf")',
])
def test_words_in_comments_and_strings_are_not_forbidden(script: str) -> None:
    assert script_problem(script) is None


@pytest.mark.parametrize("script", [
    'import("/etc/passwd");', 'x = 1; import ( "a.stl" );', "surface(file = \"h.dat\");", "include <MCAD/units.scad>",
    "use<a.scad>", "include > <a.scad>", 'import_stl("a.stl");', 'dxf_dim(file = "a.dxf", name = "w");',
    'rotate_extrude(file = "a.dxf");', 'echo("\\"");import("x");',
    # positional `file`: OpenSCAD 2021 reads these (a part built from a DXF under /usr rendered)
    'linear_extrude("/usr/share/openscad/examples/Old/example009.dxf", height = 10);',
    'rotate_extrude ( /* a */ "a.dxf");', 'linear_extrude( // a\n"a.dxf");', 'dxf_linear_extrude("a.dxf");',
    'dxf_rotate_extrude("a.dxf");',
])
def test_file_readers_are_forbidden(script: str) -> None:
    assert script_problem(script)[0] == "forbidden"


def _stl(tris: np.ndarray, points: np.ndarray) -> bytes:
    body = b"".join(struct.pack("<12fH", 0, 0, 0, *points[a], *points[b], *points[c], 0) for a, b, c in tris)
    return bytes(80) + struct.pack("<I", len(tris)) + body


_CUBE_POINTS = np.array([[x, y, z] for x in (0, 1) for y in (0, 1) for z in (0, 1)], dtype=float) * 10
_CUBE_TRIS = np.array([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
                       [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]])


def test_a_closed_cube_passes_the_gate_and_trimesh_agrees() -> None:
    import trimesh

    solid = solid_of(_stl(_CUBE_TRIS, _CUBE_POINTS))
    assert (solid.volume, solid.bodies, solid.genus, solid.lo, solid.hi) == (1000.0, 1, 0, (0, 0, 0), (10, 10, 10))
    mesh = trimesh.Trimesh(*parse_stl(_stl(_CUBE_TRIS, _CUBE_POINTS)), process=False)
    assert mesh.is_watertight and mesh.is_winding_consistent and mesh.euler_number == 2
    assert mesh.volume == pytest.approx(solid.volume)


@pytest.mark.parametrize(("name", "tris", "points", "cls"), [
    ("inside out", _CUBE_TRIS[:, ::-1], _CUBE_POINTS, "inverted"),
    ("a face missing", _CUBE_TRIS[:-1], _CUBE_POINTS, "not_solid"),
    ("faces doubled", np.vstack([_CUBE_TRIS, _CUBE_TRIS]), _CUBE_POINTS, "not_solid"),
    ("one face flipped", np.vstack([_CUBE_TRIS[:-1], _CUBE_TRIS[-1:, ::-1]]), _CUBE_POINTS, "not_solid"),
    ("two cubes on one edge", np.vstack([_CUBE_TRIS, _CUBE_TRIS + 8]),
     np.vstack([_CUBE_POINTS, _CUBE_POINTS + [10, 10, 0]]), "not_solid"),
    ("two cubes on one corner", np.vstack([_CUBE_TRIS, _CUBE_TRIS + 8]),
     np.vstack([_CUBE_POINTS, _CUBE_POINTS + [10, 10, 10]]), "not_solid"),
    ("a point at infinity", _CUBE_TRIS, np.vstack([_CUBE_POINTS[:7], [[np.inf, 0, 0]]]), "mesh"),
    ("degenerate", np.array([[0, 0, 1], [0, 1, 1]]), _CUBE_POINTS, "not_solid"),
])
def test_the_gate_refuses_what_is_not_a_solid(name, tris, points, cls) -> None:
    with pytest.raises(MeshProblem) as e:
        solid_of(_stl(tris, points))
    assert e.value.error_class == cls, (name, e.value.message)


def test_a_truncated_or_oversized_stl_is_the_parts_failure() -> None:
    data = _stl(_CUBE_TRIS, _CUBE_POINTS)
    for bad, cls in ((data[:-7], "mesh"), (bytes(84), "empty"), (b"solid ascii\n", "mesh"),
                     (data[:80] + struct.pack("<I", 99) + data[84:], "mesh"),
                     (bytes(80) + struct.pack("<I", MAX_TRIANGLES + 1) + bytes(50 * (MAX_TRIANGLES + 1)), "too_large")):
        with pytest.raises(MeshProblem) as e:
            parse_stl(bad)
        assert e.value.error_class == cls


def test_surface_problem_counts_open_edges() -> None:
    assert surface_problem(_CUBE_TRIS, 8) is None
    assert surface_problem(_CUBE_TRIS[2:], 8).startswith("4 edges belong to one triangle only")  # a square face gone


def test_parse_errors_name_the_field() -> None:
    base = {"id": "c", "domain": "cad", "prompt": "p", "gold": "cube(1);"}
    for bad, field in (({"gold": 'import("x.stl");'}, "gold"), ({"gold": ""}, "gold"), ({"iou": 0}, "iou"),
                       ({"iou": 1.5}, "iou"), ({"iou": True}, "iou"), ({"tolerance_mm": -1}, "tolerance_mm"),
                       ({"tolerance_mm": float("nan")}, "tolerance_mm"), ({"holes": {}}, "holes"),
                       ({"holes": [{"axis": "w", "at": [0, 0, 1], "d": 3, "span": [0, 2]}]}, "holes"),
                       ({"holes": [{"axis": "z", "at": [0, 0], "d": 3, "span": [0, 2]}]}, "holes"),
                       ({"holes": [{"axis": "z", "at": [0, 0, 1], "d": 3, "span": [0, 2], "to": [5, 0, 2]}]}, "holes"),
                       ({"holes": [{"axis": "z", "at": [0, 0, 1], "d": 3, "span": [2, 0]}]}, "holes"),
                       ({"holes": [{"axis": "z", "at": [0, 0, 3], "d": 3, "span": [0, 2]}]}, "holes"),
                       ({"holes": [{"axis": "z", "at": [0, 0, 1], "d": 3, "span": [0, "2"]}]}, "holes")):
        with pytest.raises(TaskError, match=f"'{field}'"):
            ENV.parse_task({**base, **bad}, "t.jsonl")
    # a task file written before holes had a span: refused in one line that names the field and what is missing
    with pytest.raises(TaskError) as e:
        ENV.parse_task({**base, "holes": [{"axis": "z", "at": [0, 0, 1], "d": 3}]}, "old.jsonl")
    assert len(str(e.value).splitlines()) == 1 and "old.jsonl" in str(e.value) and "'holes'" in str(e.value)
    assert "hole 0: span [w0, w1]" in str(e.value) and "missing" in str(e.value)


# ---------------------------------------------------------------- stated holes (_holes.py), on meshes built here


def _plate_minus(*cuts):
    """A 20 x 20 x 6 plate on Z = 0 centred on the origin, less ``cuts`` (manifold3d solids)."""
    import manifold3d as m3

    plate = m3.Manifold.cube([20.0, 20.0, 6.0], center=True).translate((0.0, 0.0, 3.0))
    for cut in cuts:
        plate = plate - cut
    return plate


def _cylinder(d: float, segments: int, x: float = 0.0, y: float = 0.0):
    """A vertical cylinder through the plate, its vertices on the circle (as OpenSCAD puts them)."""
    import manifold3d as m3

    return m3.Manifold.cylinder(8.0, d / 2, d / 2, segments).translate((x, y, -1.0))


_PIN = [{"axis": "z", "at": [0.0, 0.0, 3.0], "d": 3.0, "span": [0.0, 6.0]}]


@pytest.mark.parametrize(("d", "segments", "dx", "ok"), [
    (3, 5, 0, True), (3, 7, 0, True), (3, 30, 0, True), (3, 128, 0, True),  # any faceting of 5 segments or more
    (3.08, 48, 0, True), (2.92, 48, 0, True), (3, 48, 0.04, True),  # within max(0.1 mm, 2 %)
    (1.8, 48, 0, False), (4.2, 48, 0, False), (2.8, 48, 0, False), (3.2, 48, 0, False), (1.8, 5, 0, False),
    (4.2, 128, 0, False), (3, 48, 0.15, False), (3, 5, 0.15, False), (3, 4, 0, False), (3, 3, 0, False),
])
def test_a_stated_hole_is_held_to_its_diameter_at_any_faceting(d, segments, dx, ok) -> None:
    """A 3 mm hole passes drawn as any polygon of 5 sides or more on its circle (OpenSCAD's default
    faceting makes a 3 mm circle a pentagon; its narrowest is 2.43 mm), and fails drawn 1.8, 2.8, 3.2
    or 4.2 mm at any faceting, 0.15 mm off its axis, or as a square or triangle on its circle. The shape
    check passed every one of these (a ring under 1 mm thick)."""
    from posttrain.envs.cad._holes import hole_lines

    lines = hole_lines(_plate_minus(_cylinder(d, segments, dx)), _PIN)
    assert (lines == []) == ok, lines
    if not ok:
        assert lines[0].startswith("the hole of diameter 3 mm along Z at X = 0, Y = 0, at Z = 0.5: measured from "
                                   "the stated axis")


def test_stated_slots_cross_holes_and_a_keyed_bore_are_measured_on_their_own_slice() -> None:
    """A slot (the hull of two circles) by its width from its end centres; a hole along X or Y on a slice
    across it; a bore with a keyway cut into its wall, the keyway's corners left out (``ignore``); no
    hole at all: the part is solid there."""
    import manifold3d as m3

    from posttrain.envs.cad._holes import hole_lines

    def slot(w: float, segments: int):
        return m3.Manifold.batch_hull([_cylinder(w, segments, -5.0), _cylinder(w, segments, 5.0)])

    stated = [{"axis": "z", "at": [-5.0, 0.0, 3.0], "to": [5.0, 0.0, 3.0], "d": 4.0, "span": [0.0, 6.0]}]
    assert hole_lines(_plate_minus(slot(4, 5)), stated) == hole_lines(_plate_minus(slot(4, 48)), stated) == []
    assert len(hole_lines(_plate_minus(slot(3.4, 48)), stated)) == len(hole_lines(_plate_minus(slot(4.6, 48)), stated)) == 1
    cross = m3.Manifold.cylinder(30.0, 1.5, 1.5, 16).rotate((0.0, 90.0, 0.0)).translate((-15.0, 2.0, 3.0))
    along_x = [{"axis": "x", "at": [-9.0, 2.0, 3.0], "d": 3.0, "span": [-10.0, 10.0]}]
    assert hole_lines(_plate_minus(cross), along_x) == []
    assert len(hole_lines(_plate_minus(cross.scale((1.0, 1.3, 1.3))), along_x)) == 1  # 3.9 mm
    along_y = [{"axis": "y", "at": [2.0, -9.0, 3.0], "d": 3.0, "span": [-10.0, 10.0]}]
    assert hole_lines(_plate_minus(cross.rotate((0.0, 0.0, 90.0)).translate((4.0, 0.0, 0.0))), along_y) == []
    key = m3.Manifold.cube([2.0, 4.0, 8.0]).translate((-1.0, 0.0, -1.0))  # 2 mm wide, to Y = 4, cut into a 6 mm bore
    bore = [{"axis": "z", "at": [0.0, 0.0, 3.0], "d": 6.0, "span": [0.0, 6.0],
             "ignore": [[-1.0, 0.0, -1.0], [1.0, 4.0, 7.0]]}]
    assert hole_lines(_plate_minus(_cylinder(6, 10), key), bore) == []
    assert len(hole_lines(_plate_minus(_cylinder(5, 10), key), bore)) == 1
    unkeyed = [{k: v for k, v in bore[0].items() if k != "ignore"}]
    assert len(hole_lines(_plate_minus(_cylinder(6, 10), key), unkeyed)) == 1  # the keyway's corners count then
    assert hole_lines(_plate_minus(), _PIN)[0].endswith("the part is solid there")


def _bands(d_wrong: float, d_right: float, centres, height: float, segments: int = 48):
    """A ``d_wrong`` hole through the plate, ``d_right`` in bands ``height`` tall around ``centres`` (Z)."""
    import manifold3d as m3

    cut = _cylinder(d_wrong, segments)
    for z in centres:
        band = m3.Manifold.cylinder(height, d_right / 2, d_right / 2, segments).translate((0.0, 0.0, z - height / 2))
        cut = cut + band if d_right > d_wrong else cut - (band - _cylinder(d_right, segments))
    return cut


def test_a_hole_is_measured_along_its_span_not_at_one_station() -> None:
    """The band attack: a 3 mm hole drawn 1.8 mm and widened to 3 mm only in a 1 mm band around the one
    station the check sliced at (mid-plate) passed the shape check (a 0.6 mm ring) and the hole check. Now
    the plate's 6 mm span less 0.5 mm at each end is sliced at 5 stations and every vertex near the wall
    in between must be on it: the band fails, and so do what a policy would try next: bands at each of
    the 5 stations (1.8 or 4.2 mm between), a cone and a twisted wall (no vertex between the ends). A
    hole right over the measured stretch and wider only within 0.5 mm of the faces passes (the margin: a
    chamfered or counterbored mouth); narrower there, a lip that would stop its fastener, it fails (it
    passed while the bore's rod was 0.4 r: ``_holes._bore_problem``)."""
    import manifold3d as m3

    from posttrain.envs.cad._holes import hole_lines, stations

    at = stations(_PIN[0]).tolist()
    assert at == [0.5, 1.75, 3.0, 4.25, 5.5]
    twisted = m3.Manifold.extrude(m3.CrossSection.circle(1.5, 48), 8.0, 0, 60.0).translate((0.0, 0.0, -1.0))
    wrong = {"old station's band": _bands(1.8, 3, [3.0], 1.0), "bands at the stations": _bands(1.8, 3, at, 0.2),
             "4.2 mm between the stations": _bands(4.2, 3, at, 0.2), "a cone 1.6 to 3.2 mm": m3.Manifold.cylinder(
                 8.0, 0.8, 1.6, 48).translate((0.0, 0.0, -1.0)), "a twisted wall (2.76 mm at mid)": twisted}
    for name, cut in wrong.items():
        lines = hole_lines(_plate_minus(cut), _PIN)
        assert len(lines) == 1 and "the hole of diameter 3 mm along Z at X = 0, Y = 0" in lines[0], (name, lines)
    assert "between Z = 0.5 and 5.5: its wall has corners 1.80 mm across from the stated axis at Z = 0.60 to " \
        "5.40" in hole_lines(_plate_minus(_bands(1.8, 3, at, 0.2)), _PIN)[0]
    mouths = [m3.Manifold.cylinder(1.45, 2.1, 2.1, 48).translate((0.0, 0.0, z)) for z in (-1.0, 5.55)]
    assert hole_lines(_plate_minus(_cylinder(3, 48), *mouths), _PIN) == []  # 4.2 mm from the faces to 0.45 in
    lips = hole_lines(_plate_minus(_bands(1.8, 3, [3.0], 5.1)), _PIN)  # right from Z = 0.45 to 5.55, 1.8 mm out
    assert len(lips) == 1 and "it is not open 2.33 mm across from Z = 0 to 6, its ends included" in lips[0], lips
    assert hole_lines(_plate_minus(_bands(4.2, 3, [3.0], 4.9)), _PIN) != []  # from 0.55 to 5.45: not


def test_the_golds_hole_check_is_done_once_per_mesh(monkeypatch) -> None:
    """The worker checks the gold's holes before every candidate's verdict; the same mesh (the same
    vertices and triangles) and holes are sliced once, another mesh again."""
    from posttrain.envs.cad import _holes

    monkeypatch.setattr(_holes, "_memo", type(_holes._memo)())  # what other tests left there
    gold, other = _plate_minus(_cylinder(3, 48)), _plate_minus(_cylinder(3, 40))
    assert _holes.hole_lines(gold, _PIN) == [] and len(_holes._memo) == 1
    monkeypatch.setattr(_holes, "_Slice", None)  # any slicing now raises
    assert _holes.hole_lines(_plate_minus(_cylinder(3, 48)), _PIN) == []  # the same mesh, another object
    with pytest.raises(TypeError):
        _holes.hole_lines(other, _PIN)


def test_every_generated_hole_states_a_span_around_its_point() -> None:
    """The generator states each hole's span: where its axis runs through the material on its own."""
    from posttrain.envs.cad._holes import FRAMES, parse_holes

    for task in ENV.generate_tasks(60, seed=3):
        holes = task.fields["holes"]
        assert parse_holes(json.loads(json.dumps(holes))) == holes
        for hole in holes:
            lo, hi = hole["span"]
            assert lo < hole["at"][FRAMES[hole["axis"]][2]] < hi and hi - lo >= 2
    # a bore runs through the hub (or a boss) above the disc: a canary's gold without the hub has it in the disc only
    from posttrain.envs.cad._gen import part_for

    part = next(p for p in (part_for(3, 3, i) for i in range(200)) if {"hub", "bore"} <= {f.name for f in p.features})
    bore = next(f for f in part.features if f.name == "bore").holes[0]
    (full,), (short,) = ([h for h in part.holes(without) if h["at"][:2] == [0, 0]] for without in (None, "hub"))
    assert full == bore and full["span"][1] > short["span"][1] == 2 * bore["at"][2]


def test_levels_count_features_and_capabilities_are_declared() -> None:
    assert isinstance(ENV, HasLevels) and isinstance(ENV, HasCapabilities) and isinstance(ENV, HasCanaries)
    lo, hi = ENV.level_range()
    for level in range(lo, hi + 1):
        tasks = ENV.generate_level(6, level=level, seed=4)
        assert all(t.difficulty == level and len(t.metadata["features"]) == level for t in tasks)
        assert len({t.fields["gold"] for t in tasks}) == 6
    with pytest.raises(ValueError):
        ENV.generate_level(1, level=hi + 1)
    assert "cad" in ENV.capabilities()


def test_the_prompt_asks_for_one_openscad_block() -> None:
    for task in ENV.generate_tasks(12, seed=8):
        shown = ENV.render_prompt(task)
        assert shown.startswith(task.prompt) and "```openscad" in shown and "millimetres" in shown
        assert "$fn = 48" in task.fields["gold"] and task.reference == fenced(task.fields["gold"])


# ---------------------------------------------------------------- renders


@needs_openscad
def test_the_measured_case(verify) -> None:
    """real-task-domains.md: the 20x20x10 block with an r = 5 hole; no hole keeps the bounding box and
    IoU 0.80, a hole of r = 6 has IoU 0.89: both fail, each for the reason measured."""
    task = exploit_tasks(ENV)["hole"]
    gold = task.fields["gold"]
    ok, bigger, none = _many(verify, [(task, fenced(gold)), (task, fenced(gold.replace("r = 5", "r = 6"))),
                                      (task, fenced("translate([-10, -10, 0]) cube([20, 20, 10]);"))])
    assert ok.passed and ok.evidence["iou"] == 1.0 and ok.evidence["gold"]["genus"] == 1
    assert ok.evidence["gold"]["volume"] == pytest.approx(3216.84, abs=0.1)  # $fn = 48 (analytic 3214.6)
    assert bigger.error_class == "iou" and bigger.evidence["iou"] == pytest.approx(0.893, abs=0.002)
    assert none.error_class == "topology" and none.evidence["iou"] == pytest.approx(0.804, abs=0.002)
    assert none.evidence["part"]["bbox"] == ok.evidence["gold"]["bbox"]
    assert "holes through it (genus); the specification has 1" in none.feedback
    assert none.components == {"outcome": 0.0, "format": 1.0, "process": 0.0}  # no IoU credit for the wrong part


def _starved(v) -> bool:
    """The one infra error a CPU-burning response may get: its job starved of CPU by a loaded host
    (posttrain.envs.conformance.STARVED; decided from CPU time, which a response cannot fake)."""
    return v.is_infra_error and v.error_class == STARVED


@needs_openscad
def test_each_exploit_fails_for_its_reason(verify) -> None:
    fixtures = ENV.exploit_fixtures()
    verdicts = _many(verify, [(task, response) for _, task, response in fixtures])
    got = [(name, v.outcome, v.error_class) for (name, _, _), v in zip(fixtures, verdicts, strict=True)]
    want = [(name, "fail", cls) for name, _, _, cls in EXPLOITS]
    kept = [(g, w) for g, w, v, row in zip(got, want, verdicts, EXPLOITS, strict=True)
            if not (_starved(v) and row[1] == "bomb")]  # only the bombs may be starved on a loaded host
    assert [g for g, _ in kept] == [w for _, w in kept]
    assert all(v.reward == 0.0 and v.components["outcome"] == 0.0 for v in verdicts if not _starved(v))


NASTY = ["", "\x00" * 100, "\ud800 lone surrogate", "x" * 1_000_000, "```openscad\n" + "[" * 50_000 + "\n```",
         "```openscad\ncube(1e308);\n```", "```openscad\ncube(-1);\n```", "```openscad\nsphere(0);\n```",
         "```openscad\ncube([1, 1, 1/0]);\n```", "```openscad\n" + "cube(1);" * 20_000 + "\n```",
         "```openscad\nfor (i = [0 : 1e9]) cube(1);\n```", "```openscad\necho(" + "(" * 3000 + "1" + ")" * 3000 + ");\n```",
         "```openscad\nlinear_extrude(height = 0) square(5);\n```", "```openscad\nrotate_extrude() square(5);\n```",
         "```openscad\nhull() { }\n```", "```openscad\ntext(\"hi\");\n```"]


@needs_openscad
def test_nasty_responses_fail_and_are_never_infra_errors(verify) -> None:
    task = exploit_tasks(ENV)["bomb"]
    verdicts = _many(verify, [(task, r) for r in NASTY], tries=1)  # infra is a finding here, not a retry
    assert [v.outcome for v in verdicts if not _starved(v)] == ["fail"] * sum(not _starved(v) for v in verdicts), \
        [(v.error_class, v.feedback[:80]) for v in verdicts]


@needs_openscad
@pytest.mark.slow
def test_every_feature_is_needed(verify) -> None:
    """For a generated part of each level, the gold without any one of its features fails: no
    feature of a description can be left out and still pass (all 84 ablations of 24 parts, levels
    1-6, seed 0, failed when the generator was written). This keeps 7 of them: each kind of feature
    of the seed-11 parts once (step, corners, band-, centre, band+, bore, edges), left out of the
    highest level that has it (the part it is the smallest share of, its absence the subtlest); the
    other 14 of these parts' 21 ablations left out the same kinds from smaller parts (one check each,
    the same path), at ~0.7 s a render. The script of every level's part is still its reference."""
    from posttrain.envs.cad._gen import part_for

    by_kind = {}
    for level in range(1, 7):
        for index, task in enumerate(ENV.generate_level(1, level=level, seed=11)):
            part = part_for(11, level, index)
            assert fenced(part.script()) == task.reference
            by_kind |= {f.name: (task, fenced(part.script(without=f.name))) for f in part.features}
    assert sorted(by_kind) == ["band+", "band-", "bore", "centre", "corners", "edges", "step"]
    jobs = list(by_kind.values())
    verdicts = _many(verify, jobs)
    assert [v.outcome for v in verdicts] == ["fail"] * len(jobs)
    assert {v.error_class for v in verdicts} <= {"shape", "topology", "iou", "dimensions"}


@needs_openscad
def test_coarser_facets_pass_and_the_reference_passes(verify) -> None:
    """A disc (level 5: chamfer, hub, keyed bore, bolts), a plate and a block pass at ``$fn = 16`` and at
    OpenSCAD's default faceting. The draw's fourth task, a level-4 disc with counterbored bolts, is left
    out: chamfered discs with counterbored bolts are held at both facetings in
    test_cad_attacks6.py::test_disc_golds_pass_at_their_own_16_and_openscads_default_faceting."""
    tasks = ENV.generate_tasks(4, seed=21)
    tasks = [t for t in tasks if "counterbores" not in t.metadata["features"]]
    assert [t.metadata["generator"] for t in tasks] == ["cad/disc", "cad/plate", "cad/block"]
    coarse = [fenced(t.fields["gold"].replace("$fn = 48", "$fn = 16")) for t in tasks]
    default = [fenced(t.fields["gold"].replace("$fn = 48;", "")) for t in tasks]  # OpenSCAD's $fa/$fs
    verdicts = _many(verify, [(t, r) for t, r in zip(tasks * 2, coarse + default, strict=True)])
    assert [v.outcome for v in verdicts] == ["pass"] * 6, [v.feedback for v in verdicts if not v.passed]
    # The gold's own text is judged on the gold's render (not rendered twice); any other text is rendered.
    same, commented = _many(verify, [(tasks[0], fenced(tasks[0].fields["gold"])),
                                     (tasks[0], fenced(tasks[0].fields["gold"] + "\n// mine"))])
    assert same.passed and same.evidence["render"] == "the gold's (the same script)", same.evidence
    assert commented.passed and "render" not in commented.evidence, commented.evidence


@needs_openscad
def test_a_3_mm_hole_is_held_to_its_size_and_passes_at_any_faceting(verify) -> None:
    """The plate with a stated 3 mm hole: drawn 1.8 or 4.2 mm it passed every other check (IoU 0.99, a
    ring 0.6 mm thick under the shape check's 1 mm) and fails ``holes`` now; the right hole passes at
    OpenSCAD's default faceting (a pentagon: ``$fn`` unset, ``$fa = 12``, ``$fs = 2``), at ``$fn = 5``
    and at ``$fn = 128``."""
    task = exploit_tasks(ENV)["pin"]
    gold = task.fields["gold"]
    right = [gold.replace("$fn = 48;", ""), gold.replace("$fn = 48", "$fn = 5"), gold.replace("$fn = 48", "$fn = 128")]
    wrong = [gold.replace("d = 3,", "d = 1.8,"), gold.replace("d = 3,", "d = 4.2,")]
    verdicts = _many(verify, [(task, fenced(s)) for s in right + wrong])
    assert [v.outcome for v in verdicts] == ["pass"] * 3 + ["fail"] * 2, [v.feedback for v in verdicts]
    for v, drawn in zip(verdicts[3:], ("1.80", "4.20"), strict=True):
        assert v.error_class == "holes" and v.evidence["problems"] == ["holes"] and v.evidence["iou"] > 0.98
        assert f"its wall's corners are {drawn} mm across" in v.feedback and "specified: 3 mm +/- 0.1 mm" in v.feedback


def _banded(gold: str, hole: dict, start: float) -> str:
    """``gold`` with each cylinder of ``hole``'s diameter drawn 1.2 mm narrower, but for a 1 mm band of the
    stated diameter around ``hole``'s ``at`` (``start``: where the cylinders begin along the hole's axis)."""
    d, w = f"{hole['d']:g}", "xyz".index(hole["axis"])
    band = f"translate([0, 0, {hole['at'][w] - start - 0.5:g}]) cylinder(d = {d}, h = 1);"
    return re.sub(rf"cylinder\(d = {d}, h = ([\d.]+)\);",
                  lambda m: f"{{ cylinder(d = {hole['d'] - 1.2:g}, h = {m[1]}); {band} }}", gold)


@needs_openscad
def test_a_generated_hole_right_only_around_its_stated_point_fails(verify) -> None:
    """The band attack on generated tasks, through the real verifier: the four 5 mm corner holes of a
    plate, or the 6 mm cross hole of a block, drawn 1.2 mm narrower (IoU over 0.98, a 0.6 mm ring the
    shape check lets through) and right only in a 1 mm band around the hole's stated point, where the
    check sliced (mid-plate; 1 mm in from the block's face). They passed; now each fails ``holes``."""
    tasks = ENV.generate_level(8, level=1, seed=0)
    corners = next(t for t in tasks if t.metadata["features"] == ["corners"])
    cross = next(t for t in tasks if t.metadata["features"] == ["crossX"])
    length = cross.prompt.split(" mm long (X)")[0].rsplit(" ", 1)[1]
    attacks = [(corners, _banded(corners.fields["gold"], corners.fields["holes"][0], -1.0)),
               (cross, _banded(cross.fields["gold"], cross.fields["holes"][0], -float(length) / 2 - 1))]
    assert all(script.count("h = 1);") >= 1 and script != t.fields["gold"] for t, script in attacks)
    verdicts = _many(verify, [(t, fenced(s)) for t, s in attacks] + [(t, fenced(t.fields["gold"])) for t, _ in attacks])
    assert [v.outcome for v in verdicts] == ["fail", "fail", "pass", "pass"], [v.feedback for v in verdicts]
    for v in verdicts[:2]:
        assert v.error_class == "holes" and set(v.evidence["problems"]) == {"holes"} and v.evidence["iou"] > 0.98


@needs_openscad
def test_the_whole_part_moved_off_the_stated_axes_fails_its_holes(verify) -> None:
    """A policy's try: the right part, every hole the right size, all of it moved 0.3 or 0.1 mm along X
    (the shape check takes either: IoU 0.978 and 0.993, no sliver thicker than 1 mm). Each hole is then off
    the axis the task states, by more than its tolerance (0.05 mm for a 5 mm hole): ``holes``."""
    tasks = ENV.generate_level(8, level=1, seed=0)
    corners = next(t for t in tasks if t.metadata["features"] == ["corners"])
    moved = [fenced(f"translate([{dx}, 0, 0]) {{\n{corners.fields['gold']}\n}}") for dx in (0.3, 0.1)]
    verdicts = _many(verify, [(corners, m) for m in moved])
    for v in verdicts:
        assert (v.outcome, v.error_class) == ("fail", "holes") and v.evidence["iou"] > 0.97, v.feedback
        assert set(v.evidence["problems"]) == {"holes"} and "measured from the stated axis" in v.feedback


@needs_openscad
def test_canaries_fail_the_part_their_prompt_describes(verify) -> None:
    """A canary's gold lacks a feature its prompt describes: the described part (the full gold) fails;
    only a response that leaves the feature out, against the prompt, passes (a hack alarm)."""
    from posttrain.envs.cad._gen import make_part

    canaries = ENV.canary_tasks(3, seed=5)
    assert all("canary" in t.tags and t.reference is None for t in canaries)
    assert [ENV.parse_task(json.loads(json.dumps(task_to_record(t))), "rt") for t in canaries] == canaries
    import random

    rng = random.Random("cad/canary/5")
    described = []
    for t in canaries:  # the same draws as canary_tasks: the level, the part, the feature left out
        level = rng.randint(2, 6)
        part = make_part(rng, level)
        rng.choice(part.features)
        described.append((t, fenced(part.script())))
    verdicts = _many(verify, described + [(t, fenced(t.fields["gold"])) for t in canaries])
    assert [v.outcome for v in verdicts] == ["fail"] * 3 + ["pass"] * 3, [(v.error_class, v.feedback, v.evidence)
                                                                         for v in verdicts]


@needs_openscad
def test_the_verdict_is_deterministic(verify) -> None:
    task = exploit_tasks(ENV)["plate"]
    response = fenced(task.fields["gold"].replace("[-24, 14, -1]", "[-21, 14, -1]"))
    a, b = _many(verify, [(task, response), (task, response)])
    assert a.feedback == b.feedback and a.error_class == b.error_class == "shape" and a.evidence["iou"] > 0.95
    assert "material missing around" in a.feedback and "material extra around" in a.feedback


@needs_openscad
def test_a_broken_gold_is_infra_not_the_candidates_fail(verify) -> None:
    task = ENV.parse_task({"id": "broken", "prompt": "p", "gold": "cube(10"}, "t")
    v = verify(task, fenced("cube(10);"))
    assert v.is_infra_error and v.error_class == "infra:gold"
    flat = ENV.parse_task({"id": "flat", "prompt": "p", "gold": "scale([1, 1, 0]) cube(10);"}, "t")
    assert verify(flat, fenced("cube(10);")).error_class == "infra:gold"
    # a candidate that fails to build never needs the gold: a fail, whatever the gold
    assert verify(task, fenced("cube(")).outcome == "fail"


@needs_openscad
def test_a_check_past_its_cpu_budget_is_the_parts_timeout(pool) -> None:
    from posttrain.envs.cad import verify_cad
    from posttrain.verify._deadline import CheckPool

    checks = CheckPool("posttrain.envs.cad._mesh", size=1, cpu_budget_s=0.05)
    try:
        task = exploit_tasks(ENV)["hole"]
        v = verify_cad(pool, checks, task, fenced("sphere(10, $fn = 300);"))
        assert (v.outcome, v.error_class) == ("fail", "timeout")
    finally:
        checks.close()


@needs_openscad
def test_views_show_gold_and_candidate_from_one_camera(pool, tmp_path) -> None:
    from posttrain.envs.cad import render_views

    task = exploit_tasks(ENV)["plate"]
    out = render_views(pool, task, fenced("cube([60, 40, 5], center = true);"), tmp_path)
    assert out["gold"].name == "cad-exploit-plate.gold.png"
    for name in ("gold", "candidate"):
        png = out[name].read_bytes()
        assert png.startswith(b"\x89PNG") and struct.unpack(">II", png[16:24]) == (256, 256)
    assert out["gold"].read_bytes() != out["candidate"].read_bytes()
    assert render_views(pool, task, 'import("/etc/passwd");', tmp_path / "no")["candidate"] is None


@needs_openscad
def test_an_evaluation_draws_its_cad_answers_beside_the_gold_into_the_report(pool, tmp_path) -> None:
    """posttrain.evaluate.views: per task the last attempt of sample 0 (a workspace episode's kept
    submission, else the completion) rendered beside the gold; the report's "Renders" panel shows them."""
    from posttrain.evaluate import write_report
    from posttrain.evaluate.records import EvalRecord, write_records
    from posttrain.evaluate.views import write_views

    task = exploit_tasks(ENV)["plate"]
    hole = next(t for t in ENV.generate_level(4, level=2, seed=0))
    records = [EvalRecord(task.id, "cad", "fail", 0.0, completion="no script here", attempt=0),
               EvalRecord(task.id, "cad", "fail", 0.0, completion="(an agent's last turn)", attempt=1,
                          error_class="spec", extra={"submission": "cube([60, 40, 5], center = true);"}),
               EvalRecord(task.id, "cad", "pass", 1.0, completion=fenced(task.fields["gold"]), sample_idx=1),
               EvalRecord(hole.id, "cad", "pass", 1.0, completion=fenced(hole.fields["gold"])),
               EvalRecord("math-1", "math", "pass", 1.0, completion="2")]
    run = tmp_path / "run"
    index = write_views(records, [task, hole], pool, run / "views" / "sft")
    entries = json.loads(index.read_text())
    assert [(e["task_id"], e["attempt"], e["outcome"]) for e in entries] == [(task.id, 1, "fail"), (hole.id, 0, "pass")]
    for e in entries:
        for key in ("gold", "candidate"):
            assert (index.parent / e[key]).read_bytes().startswith(b"\x89PNG"), (e, key)
    plate = index.parent / entries[0]["candidate"]
    assert plate.read_bytes() != (index.parent / entries[0]["gold"]).read_bytes()  # the plate without its holes
    assert write_views(records[-1:], [task], pool, tmp_path / "none") is None  # math draws nothing
    assert write_views(records, [task], None, tmp_path / "none") is None  # nor does a run without a sandbox
    assert not (tmp_path / "none").exists()
    write_records(run / "eval" / "sft.jsonl", records)
    page = write_report(run).read_text()
    renders = page.split("<h2>Renders</h2>", 1)[1].split("<h2>", 1)[0]
    assert renders.count("data:image/png;base64,") == 4 and task.id in renders and "fail (spec)" in renders


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "posttrain.cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)


@needs_openscad
@pytest.mark.slow
def test_tasks_validate_and_verify_from_the_command_line(tmp_path) -> None:
    records = [json.loads(line) for line in (ROOT / "examples" / "tasks" / "cad.jsonl").read_text().splitlines()]
    assert len(records) >= 12  # each is validated through the service by test_domains.py
    examples = tmp_path / "cad.jsonl"
    examples.write_text("".join(json.dumps(rec) + "\n" for rec in records[:2]))
    r = _cli("tasks", "validate", str(examples))
    assert r.returncode == 0, r.stderr
    assert "2 tasks, 0 problem(s)" in r.stdout
    responses = tmp_path / "responses.jsonl"
    responses.write_text("\n".join(json.dumps({"task_id": rec["id"], "response": resp}) for rec, resp in (
        (records[0], records[0]["reference"]), (records[0], "```openscad\ncube(20, center = true);\n```"),
        (records[1], 'import("/etc/passwd");'))) + "\n")
    r = _cli("verify", "--tasks", str(examples), "--responses", str(responses))
    assert r.returncode == 0, r.stderr
    outcomes = [(v["outcome"], v["error_class"]) for v in map(json.loads, r.stdout.splitlines())]
    assert outcomes == [("pass", None), ("fail", "dimensions"), ("fail", "forbidden")]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**records[0], "gold": "include <x.scad>"}) + "\n")
    r = _cli("tasks", "validate", str(bad))
    assert r.returncode == 2 and "'gold'" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_worker_reports_a_broken_gold_instead_of_judging_the_part() -> None:
    from posttrain.envs.cad._mesh import handle_check

    part = base64.b64encode(_stl(_CUBE_TRIS, _CUBE_POINTS)).decode()
    gold = base64.b64encode(_stl(_CUBE_TRIS[:-1], _CUBE_POINTS)).decode()
    common = {"iou": 0.95, "tolerance_mm": 0.5, "holes": []}
    reply = handle_check({"part": part, "gold": gold, "gold_key": "open-cube", **common})
    assert "gold_error" in reply
    ok = handle_check({"part": part, "gold": part, "gold_key": "cube", **common})
    assert ok["outcome"] == "pass" and ok["evidence"]["iou"] == 1.0
    # a task that states a hole its gold does not have is broken: the gold's error, not the part's
    holed = {**common, "holes": [{"axis": "z", "at": [5.0, 5.0, 5.0], "d": 3.0, "span": [0.0, 10.0]}]}
    no_hole = handle_check({"part": part, "gold": part, "gold_key": "cube", **holed})
    assert no_hole["gold_error"].startswith("holes: the gold does not have what the task states: the hole of")


@needs_openscad
def test_the_render_limit_follows_the_golds_own_render(pool, verify) -> None:
    """A candidate may render for GOLD_MARGIN x FINE_COST x the gold's render CPU time, or the task's
    timeout_s of CPU if more: a gold that needs ~15 s of OpenSCAD (level-5 discs of counterbored bolt
    circles) timed out as its own oracle's submission under a flat 20 s on a loaded host, and an ablation
    under 4 x the gold's wall time in a loaded full suite; CPU time does not follow the host's load. The
    right part at the finest faceting the prompt invites ($fn = 128, 7.7x the gold's CPU time here) timed
    out under 4 x the gold's own time: a policy is never punished for a finer mesh that it was asked for."""
    from posttrain.envs.cad._render import gold_render
    from posttrain.envs.cad._verify import FINE_COST, GOLD_MARGIN

    gold_text = "$fn = 48; difference() { cube(20, center = true); sphere(12); }"
    task = ENV.parse_task({"id": "limit", "prompt": "p", "gold": gold_text, "limits": {"timeout_s": 0.5}}, "t")
    same, fine = _many(verify, [(task, fenced(gold_text)), (task, fenced(gold_text.replace("48", "128")))])
    gold = gold_render(pool, task.fields["gold"])
    assert gold.status == "ok" and 0 < gold.cpu_s <= gold.duration_s + 0.05
    assert same.evidence["render_limit_s"] == round(max(0.5, GOLD_MARGIN * FINE_COST * gold.cpu_s), 2)
    assert same.outcome == "pass" and 0 < same.evidence["render_cpu_s"]
    assert fine.outcome == "pass", (fine.error_class, fine.evidence)
    assert fine.evidence["render_cpu_s"] > GOLD_MARGIN * gold.cpu_s  # past the old limit: a timeout there


def test_views_refuses_a_bad_task_file_in_one_line(tmp_path, capsys) -> None:
    """python -m posttrain.envs.cad views: a missing file, bad JSON, a bad record or no cad task is one
    line naming the file, exit 2, before any render."""
    from posttrain.envs.cad._views import main

    bad_json, bad_record = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    bad_json.write_text('{"domain": "cad", "id": 3\n')
    bad_record.write_text('{"domain": "cad", "id": "x"}\n')
    for path, said in ((tmp_path / "missing.jsonl", "No such file"), (bad_json, "invalid JSON"),
                       (bad_record, "field 'gold'"), (ROOT / "examples" / "tasks" / "math.jsonl", "no cad task")):
        assert main([str(path), str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"cad views: {path}: ") and said in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


@needs_openscad
def test_a_report_or_a_reply_that_is_anothers_is_infra_never_the_candidates_verdict(pool) -> None:
    """A render's report carries the SHA-256 of the script the job read and the checker's reply the
    SHA-256 of the part it checked: a candidate is never judged on another job's render (a mix-up between
    jobs would otherwise pass or fail it on someone else's part). Test doubles hand back another's."""
    from posttrain.envs.cad import verify_cad
    from posttrain.envs.cad._render import render_stl
    from posttrain.verify._deadline import CheckPool

    task = exploit_tasks(ENV)["plate"]
    other = "cube([5, 5, 15]);\n"
    theirs = render_stl(pool, other, timeout_s=60, memory_mb=512)
    assert theirs.status == "ok" and theirs.stl[80:84] == struct.pack("<I", 12)  # the STL alone: 12 triangles

    class Swapped:
        """A pool whose candidate renders come back with another script's report."""

        def exec(self, cmd, *, files, **kw):
            if files["part.scad"] == task.fields["gold"]:
                return pool.exec(cmd, files=files, **kw)
            return pool.exec(cmd, files={"part.scad": other}, **kw)

    checks = CheckPool("posttrain.envs.cad._mesh", size=1, cpu_budget_s=30)
    try:
        v = verify_cad(Swapped(), checks, task, fenced(task.fields["gold"].replace("[-24, 14, -1]", "[-21, 14, -1]")))
        assert (v.outcome, v.error_class) == ("infra_error", "infra:sandbox")
        assert "not this script's" in v.evidence["detail"]

        class Stale(CheckPool):
            """A checker that answers with the reply of the part it checked before."""

            last = None

            def run(self, request):
                outcome, self.last = self.last, super().run(request)
                return outcome or self.last

        stale = Stale("posttrain.envs.cad._mesh", size=1, cpu_budget_s=30)
        try:
            first = verify_cad(pool, stale, task, fenced("cube([5, 5, 15]);"))
            assert first.outcome == "fail" and first.evidence["part_sha256"]
            second = verify_cad(pool, stale, task, fenced(task.fields["gold"]))
            assert (second.outcome, second.error_class) == ("infra_error", "infra:checker")
            assert verify_cad(pool, checks, task, fenced(task.fields["gold"])).outcome == "pass"
        finally:
            stale.close()
    finally:
        checks.close()


@needs_openscad
def test_policy_attacks_on_the_report_and_the_cpu_limit_are_the_candidates_own_fails(verify) -> None:
    """Played as a policy against what a render now reports (the SHA-256 of the script the job read,
    the shell's `times`, then the STL) and against the CPU-time limit; each is the candidate's own
    fail, never a pass and never infra (which would drop it from the update):

    - a forged report printed through OpenSCAD (the gold's digest and a `times`-shaped pair of lines
      by echo): echo goes to stderr, the report is our shell's; judged on its own cube;
    - the gold's whole text in a comment beside another part: its digest is its own, and so is its mesh;
    - a minkowski bomb on a task whose limit is 1 s of CPU: killed by RLIMIT_CPU, `timeout`, and the
      feedback names CPU time (a loaded host would make it wait longer, never pass or drop it)."""
    import hashlib

    plate = exploit_tasks(ENV)["plate"]
    digest = hashlib.sha256(plate.fields["gold"].encode()).hexdigest()
    forged = fenced(f'echo("{digest}");\necho("0m0.00s 0m0.00s");\necho("0m0.01s 0m0.00s");\ncube(1);')
    commented = fenced("/*\n" + plate.fields["gold"] + "\n*/\ncube([10, 10, 2]);")
    quick = ENV.parse_task({"id": "cpu", "prompt": "p", "gold": "cube(10);", "limits": {"timeout_s": 1}}, "t")
    bomb = fenced("minkowski() { sphere(5, $fn = 160); cylinder(r = 5, h = 5, $fn = 160); }")
    forged_v, commented_v, bomb_v = _many(verify, [(plate, forged), (plate, commented), (quick, bomb)], tries=1)
    for v in (forged_v, commented_v):
        assert v.outcome == "fail" and v.error_class in {"shape", "topology", "iou", "dimensions", "bodies"}, v
    assert forged_v.evidence["part_sha256"] != commented_v.evidence["part_sha256"]
    assert (bomb_v.outcome, bomb_v.error_class) == ("fail", "timeout"), bomb_v
    assert "1 s of CPU time" in bomb_v.feedback and bomb_v.evidence["render_limit_s"] == 1.0
