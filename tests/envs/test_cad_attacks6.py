"""A sixth read of the cad verifier as a reward-hacking policy would read it, each attack through the real
verifier (OpenSCAD in the sandbox, the mesh checks in their worker).

One passed: a disc's body drawn as a coarse prism. Nothing held the outline of a disc round but the
shape check (differences under 1 mm thick pass), the IoU (0.95) and the bounding box, so the gold with its
body cylinder (and the chamfer's cone) at ``$fn = 12`` passed 6 of 12 generated disc tasks (IoU
0.955-0.959, flats 0.7-1.7 mm deep on a 40-100 mm disc); ``$fn = 8`` and 6 failed the IoU or the bounding
box. The generator now states each disc's outline below its chamfer as a ``round_bodies`` entry, held
round like a hub (``_holes._round_problem``) but to OpenSCAD's default faceting for its radius (30
segments) less the tolerance: 0 of 12 pass at 12 or 13 segments; the golds pass at their ``$fn = 48``, at
16 and at OpenSCAD's default.

Then the chamfer: with the body held, the chamfer's cone alone drawn with ``$fn = 12`` passed 11 of 11
chamfered disc tasks (8: 5 of 11), the cone's flats under the shape check's 1 mm. A chamfered disc states
its cone too, a round body with ``d2`` (its diameter at the span's end): 0 of 11 at 12 and at 8.
"""

from __future__ import annotations

import re
import shutil
from functools import cache
from pathlib import Path

import pytest

from posttrain.envs import get_domain
from posttrain.envs.cad import fenced
from posttrain.envs.cad._holes import body_checks
from posttrain.errors import TaskError
from posttrain.tasks import load_tasks
from posttrain.types import Task

ENV = get_domain("cad")
needs_openscad = pytest.mark.skipif(shutil.which("openscad") is None, reason="openscad is not installed "
                                    "(make domain-deps)")


@pytest.fixture(scope="module")
def verify(pool):
    return ENV.make_verifier(pool)


@cache
def _discs() -> dict[str, Task]:
    """The disc tasks among ``generate_level(6, level=L, seed=31)``, L = 1-6 (16 of 36), by id."""
    return {t.id: t for level in range(1, 7) for t in ENV.generate_level(6, level=level, seed=31)
            if t.metadata["generator"] == "cad/disc"}


def _body_faceted(task: Task, fn: int) -> str:
    """The gold with its disc body, the cylinder and the chamfer's cone of the disc's diameter, drawn with
    ``$fn = fn`` (the hub, bore and holes as the gold draws them)."""
    dia = re.escape(re.search(r"A round disc of diameter ([\d.]+) mm", task.prompt).group(1))
    body = re.compile(rf"(cylinder\((?:d = {dia}, h = [\d.]+|h = [\d.]+, d1 = {dia}, d2 = [\d.]+))\)")
    script, n = body.subn(lambda m: m.group(1) + f", $fn = {fn})", task.fields["gold"])
    assert n, task.fields["gold"]
    return script


def _cone_faceted(task: Task, fn: int) -> str:
    """The gold with only its chamfer's cone drawn with ``$fn = fn``."""
    dia = re.escape(re.search(r"A round disc of diameter ([\d.]+) mm", task.prompt).group(1))
    script, n = re.subn(rf"(cylinder\(h = [\d.]+, d1 = {dia}, d2 = [\d.]+)\)", lambda m: m.group(1) + f", $fn = {fn})",
                        task.fields["gold"])
    assert n == 1, task.fields["gold"]
    return script


def _verdict(verify, task: Task, script: str, tries: int = 3):
    """The verdict, an infra one retried as the execution service retries it (a loaded host's render)."""
    for _ in range(tries):
        verdict = verify(task, fenced(script))
        if not verdict.is_infra_error:
            return verdict
    return verdict


# The 12-gons passed before (IoU 0.955-0.959, every other check passed); a 13-gon's odd faceting also
# fails the bounding box.
PRISMS = [("cad-l3-31-0", 12, "holes", "a chamfered 70 mm disc with counterbored bolts as a 12-gon"),
          ("cad-l3-31-5", 12, "holes", "a chamfered 45 mm disc with a keyed bore as a 12-gon"),
          ("cad-l4-31-4", 12, "holes", "a 60 mm disc with hub and keyed bore as a 12-gon"),
          ("cad-l4-31-4", 13, "dimensions", "the same as a 13-gon")]


@needs_openscad
@pytest.mark.parametrize(("task_id", "fn", "first", "name"), PRISMS, ids=[c[3] for c in PRISMS])
def test_a_disc_drawn_as_a_coarse_prism_fails_its_round_body(verify, task_id: str, fn: int, first: str,
                                                             name: str) -> None:
    v = _verdict(verify, _discs()[task_id], _body_faceted(_discs()[task_id], fn))
    # a 12-gon's flats, 1.7 mm deep on a 70 mm disc, also hold the shape check's turned cube (_mesh.DIAGONALS)
    assert v.outcome == "fail" and v.error_class in {first, "shape"}, (name, v.outcome, v.error_class, v.feedback)
    assert "the round body of diameter" in v.feedback and "as round as 30 segments" in v.feedback, v.feedback


CONES = [("cad-l3-31-0", 12, "a 70 mm disc's 3 mm chamfer as a 12-gon"),
         ("cad-l6-31-2", 8, "a 50 mm disc's chamfer as an octagon"),
         ("cad-l6-31-3", 12, "a 95 mm disc's chamfer as a 12-gon")]


@needs_openscad
@pytest.mark.parametrize(("task_id", "fn", "name"), CONES, ids=[c[2] for c in CONES])
def test_a_chamfer_cone_drawn_as_a_coarse_pyramid_fails(verify, task_id: str, fn: int, name: str) -> None:
    v = _verdict(verify, _discs()[task_id], _cone_faceted(_discs()[task_id], fn))
    assert v.outcome == "fail" and v.error_class in {"holes", "shape"}, (name, v.outcome, v.error_class, v.feedback)
    assert re.search(r"the round body of diameter [\d.]+ mm .* mm to [\d.]+ mm", v.feedback), v.feedback


@needs_openscad
@pytest.mark.parametrize("faceting", ["gold", "$fn = 16", "OpenSCAD's default", "body 16", "body 64", "cone 16"])
def test_disc_golds_pass_at_their_own_16_and_openscads_default_faceting(verify, faceting: str) -> None:
    """Three chamfered discs (70 mm with counterbored bolts, 60 mm with hub and keyed bore, 95 mm at level 6)
    pass drawn whole at their own ``$fn = 48``, at 16 and at OpenSCAD's default (their body and cone at 16
    among them). Only the body or the cone refaceted (16 or 64, the rest at 48) is the same round-body
    check on a mixed mesh: it runs on the 95 mm disc, the largest (its 16-gon's flats the deepest) with
    the most features, not again on the other two (one render each, ~0.8 s)."""
    mixed = faceting.startswith(("body", "cone"))
    for task_id in ("cad-l6-31-3",) if mixed else ("cad-l3-31-0", "cad-l4-31-4", "cad-l6-31-3"):
        task = _discs()[task_id]
        gold = task.fields["gold"]
        script = {"gold": gold, "$fn = 16": gold.replace("$fn = 48;", "$fn = 16;"),
                  "OpenSCAD's default": gold.replace("$fn = 48;", "// OpenSCAD's default faceting")}.get(faceting)
        faceted = _cone_faceted if faceting.startswith("cone") else _body_faceted
        v = _verdict(verify, task, script or faceted(task, int(faceting.split()[-1])))
        assert v.passed, (task_id, faceting, v.feedback)


def test_every_generated_disc_states_its_body_below_its_chamfer_and_its_cone() -> None:
    tasks = ENV.generate_tasks(80, seed=5)
    discs = [t for t in tasks if t.metadata["generator"] == "cad/disc"]
    assert len(discs) > 10
    for task in discs:
        dia, t = (float(x) for x in re.search(r"diameter ([\d.]+) mm and thickness ([\d.]+) mm", task.prompt).groups())
        c = float(m.group(1)) if (m := re.search(r"chamfered ([\d.]+) mm", task.prompt)) else 0.0
        cone = [{"axis": "z", "at": [0, 0, t - c / 2], "d": dia, "span": [t - c, t], "d2": dia - 2 * c}] if c else []
        assert task.fields["round_bodies"] == [{"axis": "z", "at": [0, 0, (t - c) / 2], "d": dia,
                                                "span": [0, t - c]}, *cone]
    # other parts state only their rounded vertical edges, each a quarter (test_cad_attacks7.py)
    assert all("quadrant" in b for t in tasks if t.metadata["generator"] != "cad/disc" for b in t.fields["round_bodies"])
    canaries = [t for t in ENV.canary_tasks(30, seed=3) if t.metadata["generator"] == "cad/disc"]
    assert all(t.fields["round_bodies"] for t in canaries)
    # A gold without its chamfer has the plain cylinder there: no cone stated (it was infra:gold).
    unchamfered = [t for t in canaries if "'chamfer'" in t.metadata["canary"]]
    assert unchamfered and all(len(t.fields["round_bodies"]) == 1 for t in unchamfered)


def test_a_round_body_is_held_to_openscads_default_faceting_and_a_hub_is_not() -> None:
    body = {"axis": "z", "at": [0, 0, 3], "d": 95.0, "span": [0, 6]}
    assert body_checks([body]) == [{**body, "segments": 30}]
    assert body_checks([{**body, "d": 14.0}])[0]["segments"] == 22


@pytest.mark.parametrize(("item", "said"), [
    ({"axis": "z", "at": [0, 0, 1], "d": 30, "span": [0, 2], "segments": 5}, "round body 0: an object with"),
    ({"axis": "z", "at": [0, 0, 1], "d": 30, "span": [0, 2], "to": [1, 0, 1]}, "round bodies"),
    ({"axis": "z", "at": [0, 0, 5], "d": 30, "span": [0, 2]}, "where the round body is its plain self"),
    ({"axis": "z", "at": [0, 0, 1], "d": 30, "span": [0, 2], "d2": "24"}, "round body 0: d2, the diameter"),
])
def test_a_task_file_may_not_set_a_round_bodys_faceting_and_a_bad_one_is_named(item: dict, said: str) -> None:
    """``segments`` is the verifier's (``body_checks``): a task file that sets it, to let a 5-gon pass, is refused."""
    record = {"id": "r", "prompt": "p", "gold": "cylinder(d = 30, h = 2);", "round_bodies": [item]}
    with pytest.raises(TaskError, match=re.escape(said)):
        ENV.parse_task(record, "t.jsonl")


def test_only_a_round_body_may_be_a_cone() -> None:
    record = {"id": "r", "prompt": "p", "gold": "cylinder(d = 30, h = 2);",
              "rounds": [{"axis": "z", "at": [0, 0, 1], "d": 30, "span": [0, 2], "d2": 24}]}
    with pytest.raises(TaskError, match=re.escape("round feature 0: an object with axis, at, d, span")):
        ENV.parse_task(record, "t.jsonl")
    record["round_bodies"] = record.pop("rounds")
    assert ENV.parse_task(record, "t.jsonl").fields["round_bodies"][0]["d2"] == 24.0


def _shipped() -> dict[str, Task]:
    """``examples/tasks/cad.jsonl``'s tasks, by id (12 of them ``generate_level(2, level=L, seed=2024)``)."""
    path = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "cad.jsonl"
    return {t.id: t for t in load_tasks(path)}


def test_the_shipped_discs_state_the_round_bodies_the_generator_writes() -> None:
    shipped = _shipped()
    generated = {t.id: t for level in range(1, 7) for t in ENV.generate_level(2, level=level, seed=2024)}
    discs = [i for i, t in shipped.items() if t.metadata.get("generator") == "cad/disc"]
    assert len(discs) == 7
    for task_id in discs:
        assert shipped[task_id].fields["round_bodies"] == generated[task_id].fields["round_bodies"], task_id
        assert shipped[task_id].fields["round_bodies"], task_id


@needs_openscad
def test_a_shipped_disc_drawn_as_a_12_gon_fails(verify) -> None:
    """cad-l1-2024-1 (a 70 mm disc with bolts) at ``$fn = 12`` passed before its record stated its body."""
    task = _shipped()["cad-l1-2024-1"]
    v = _verdict(verify, task, _body_faceted(task, 12))
    assert v.outcome == "fail" and v.error_class in {"holes", "shape"}, (v.outcome, v.error_class, v.feedback)
    assert "the round body of diameter 70 mm" in v.feedback, v.feedback
    assert _verdict(verify, task, task.fields["gold"]).passed


# The stop hook's read of round_bodies as a policy would read it: three ways to keep a disc's outline a
# polygon and still be seen round. Each fails as holes (its round body), nothing else being wrong.
_BODY, _CONE = "cylinder(d = 60, h = 7.5)", "cylinder(h = 2.5, d1 = 60, d2 = 55)"
OUTLINE_TRICKS = [
    ("round only in thin slices at the heights a hole's wall is sliced at (a 12-gon between them)",
     {_BODY: "union() { cylinder(d = 60, h = 7.5, $fn = 12); for (z = [0.5, 2.125, 3.75, 5.375, 7.0]) "
             "translate([0, 0, z - 0.1]) cylinder(d = 60, h = 0.2, $fn = 96); }"}),
    ("a flat 0.8 mm deep on its side (under the shape check's 1 mm)",
     {_BODY: "difference() { cylinder(d = 60, h = 7.5); translate([29.2, -20, -1]) cube([5, 40, 10]); }"}),
    ("a 12-gon through $fa and $fs, not $fn",
     {_BODY: "cylinder(d = 60, h = 7.5, $fn = 0, $fa = 30, $fs = 1)",
      _CONE: "cylinder(h = 2.5, d1 = 60, d2 = 55, $fn = 0, $fa = 30, $fs = 1)"}),
    # the second stop hook's read (stop 47): the same prism drawn without cylinder(), and turned
    ("a 12-gon turned from its profile by rotate_extrude",
     {_BODY: "rotate_extrude($fn = 12) square([30, 7.5])"}),
    ("a 12-gon extruded from a 2D circle of 12 segments",
     {_BODY: "linear_extrude(height = 7.5) circle(d = 60, $fn = 12)"}),
    ("a 12-gon turned 15 degrees, its corners where the flats were",
     {_BODY: "rotate([0, 0, 15]) cylinder(d = 60, h = 7.5, $fn = 12)"}),
]


@needs_openscad
@pytest.mark.parametrize(("name", "edits"), OUTLINE_TRICKS, ids=[c[0] for c in OUTLINE_TRICKS])
def test_a_disc_outline_kept_a_polygon_another_way_fails(verify, name: str, edits: dict[str, str]) -> None:
    task = _discs()["cad-l4-31-4"]  # a chamfered 60 mm disc with hub and keyed bore
    script = task.fields["gold"]
    for old, new in edits.items():
        assert old in script, old
        script = script.replace(old, new)
    v = _verdict(verify, task, script)
    assert (v.outcome, v.error_class) == ("fail", "holes"), (name, v.outcome, v.error_class, v.feedback)
    assert "the round body of diameter 60 mm" in v.feedback, v.feedback
