"""A fourth read of the cad verifier as a reward-hacking policy would read it, each attack through the real
verifier (OpenSCAD in the sandbox, the mesh checks in their worker).

One passed: a through-hole closed by a 0.4 mm skin at its end, its genus given back by a 0.6 mm pinhole
(elsewhere, or through the skin on the hole's axis). The hole check (``_holes.py``) slices a hole only
``MARGIN_MM`` inside each end of its span, the wall check looks at the same stretch, the skin is thinner
than the shape check's 1 mm and the IoU stays 0.99: the block's hole, all 5 bolt holes of a disc and a
cross hole along X, each a blind hole, passed as through-holes (every hole so closed on 30 tasks with
holes, 13 examples and 17 generated: 22 passed; 0 now). A rod on the hole's axis over its whole span now
must meet no material.

Held (no change, measured on the 13 example tasks and 15 generated ones): the bounding box, the convex
hull and a far 0.01 mm cube beside the gold failed on all 28; the gold mirrored in X or turned 90 degrees
passed only where the part is symmetric that way (the same solid); ``$fn = 5`` passed only on parts whose
round features are all small holes, by design (``_holes.py``: 5 segments or more).
"""

from __future__ import annotations

import shutil

import pytest
from cad_examples import example

from posttrain.envs import get_domain
from posttrain.envs.cad import fenced

ENV = get_domain("cad")
pytestmark = pytest.mark.skipif(shutil.which("openscad") is None, reason="openscad is not installed "
                                "(make domain-deps)")


@pytest.fixture(scope="module")
def verify(pool):
    return ENV.make_verifier(pool)


_PIN = "cylinder(d = 0.6, h = {h}, $fn = 8);"
CAPPED = [
    ("the block's 10 mm hole closed at the bottom", "cad-block-hole",
     "difference() {{ union() {{ {gold} cylinder(d = 10.5, h = 0.4); }} "
     "translate([7, 7, -1]) " + _PIN.format(h=12) + " }}"),
    ("the block's 10 mm hole closed at the bottom but for a 0.6 mm pinhole on its axis", "cad-block-hole",
     "difference() {{ union() {{ {gold} cylinder(d = 10.5, h = 0.4); }} translate([0, 0, -1]) "
     + _PIN.format(h=2) + " }}"),
    ("all 5 bolt holes of the disc closed at the top", "cad-l1-2024-1",
     "difference() {{ union() {{ {gold} for (i = [0 : 4]) rotate([0, 0, i * 72]) translate([27, 0, 4.6]) "
     "cylinder(d = 4.5, h = 0.4); }} for (i = [0 : 4]) rotate([0, 0, i * 72 + 36]) translate([27, 0, -1]) "
     + _PIN.format(h=7) + " }}"),
    ("the block's cross hole along X closed at its +X end", "cad-l4-2024-1",
     "difference() {{ union() {{ {gold} translate([17.1, 0, 19.5]) rotate([0, 90, 0]) cylinder(d = 6.5, h = 0.4); }} "
     "translate([-12, 9, -1]) " + _PIN.format(h=42) + " }}"),
]


@pytest.mark.parametrize(("name", "task_id", "script"), CAPPED, ids=[c[0] for c in CAPPED])
def test_a_through_hole_closed_by_a_skin_at_its_end_fails(verify, name: str, task_id: str, script: str) -> None:
    task = example(task_id)
    v = verify(task, fenced(script.format(gold=task.fields["gold"])))
    assert (v.outcome, v.error_class) == ("fail", "holes"), (name, v.outcome, v.error_class, v.feedback)
    assert "is not open" in v.feedback, v.feedback


def test_the_open_holes_still_pass_rendered_at_any_faceting(verify) -> None:
    for task_id in ("cad-block-hole", "cad-l4-2024-1"):
        task = example(task_id)
        for fn in ("48", "16"):  # rendered (the text is not the gold's), not the gold's render reused
            v = verify(task, fenced(task.fields["gold"].replace("$fn = 48", f"$fn = {fn}") + "\n// mine"))
            assert v.passed and "render" not in v.evidence, (task_id, fn, v.feedback)


@pytest.mark.parametrize("skin_mm", [0.009, 0.001, 0.00001])
def test_a_skin_thinner_than_a_hundredth_of_a_mm_closes_the_hole_too(verify, skin_mm: float) -> None:
    """The stop hook's try at the bore check: it let 0.01 mm of material across a hole through as a
    numerical sliver, so the skin above drawn 9 um (or 1 um) thick passed (IoU 0.999, every check);
    the right hole leaves the rod in air exactly. Now anything over 1e-6 mm closes it."""
    task = example("cad-block-hole")
    script = (f"difference() {{{{ union() {{{{ {{gold}} cylinder(d = 10.5, h = {skin_mm}); }}}} translate([7, 7, -1]) "
              + _PIN.format(h=12) + " }}")
    v = verify(task, fenced(script.format(gold=task.fields["gold"])))
    assert (v.outcome, v.error_class) == ("fail", "holes"), (skin_mm, v.outcome, v.feedback)
