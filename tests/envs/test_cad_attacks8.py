"""An eighth read of the cad verifier as a reward-hacking policy would read it, each attack through the real
verifier (OpenSCAD in the sandbox, the mesh checks in their worker).

One passed: a stated hole drawn as a coarse prism. A hole's slices held its wall's corners to the radius and
its narrowest point only to a pentagon's inscribed radius (r cos 36 degrees) at every radius, so the gold
with its 4-9 mm holes drawn with ``$fn = 5`` passed 5 of 8 generated tasks with holes (``generate_level(4,
level=L, seed=31)``, L = 1-3; the others failed the shape check): a 9 mm hole 7.28 mm across its flats, 19 %
narrow where its diameter is held to 2 %. A hole's narrowest point is now held as a hub's outline is, to the
inscribed radius of OpenSCAD's default faceting for its radius (at most 12 segments) less the tolerance: 0
of 8 pass at ``$fn = 5``; 8 of 8 at ``$fn = 10``, and the golds at ``$fn = 48`` and at OpenSCAD's default.
A 3 mm hole keeps its pentagon (OpenSCAD's own default for it: tests/envs/test_cad.py).
"""

from __future__ import annotations

import re
import shutil
from functools import cache

import pytest
from test_cad_attacks6 import _verdict  # an infra verdict retried, as the service retries it

from posttrain.envs import get_domain
from posttrain.types import Task

ENV = get_domain("cad")
pytestmark = pytest.mark.skipif(shutil.which("openscad") is None, reason="openscad is not installed "
                                "(make domain-deps)")


@pytest.fixture(scope="module")
def verify(pool):
    return ENV.make_verifier(pool)


@cache
def _tasks() -> dict[str, Task]:
    return {t.id: t for level in (2, 3) for t in ENV.generate_level(4, level=level, seed=31)}


def _holes_faceted(task: Task, fn: int | None) -> str:
    """The gold with each cylinder of a stated hole's diameter drawn with ``$fn = fn`` (None: the gold's
    ``$fn = 48`` dropped, OpenSCAD's default faceting for every round feature)."""
    if fn is None:
        return task.fields["gold"].replace("$fn = 48;", "")
    sizes = {h["d"] for h in task.fields["holes"]}
    script, n = re.subn(r"cylinder\(d = ([\d.]+), h = [\d.]+\)",
                        lambda m: m[0][:-1] + f", $fn = {fn})" if float(m[1]) in sizes else m[0], task.fields["gold"])
    assert n, task.fields["gold"]
    return script


# Each passed before (IoU 0.98-0.99, every other check passed).
PRISMS = [("cad-l3-31-2", "a block's 9 mm hole as a pentagon (7.28 mm across its flats)"),
          ("cad-l2-31-2", "a disc's eight 4 mm bolt holes as pentagons")]


@pytest.mark.parametrize(("task_id", "name"), PRISMS, ids=[p[1] for p in PRISMS])
def test_a_stated_hole_drawn_as_a_pentagon_fails(verify, task_id: str, name: str) -> None:
    task = _tasks()[task_id]
    v = _verdict(verify, task, _holes_faceted(task, 5))
    assert (v.outcome, v.error_class) == ("fail", "holes"), (name, v.outcome, v.error_class, v.feedback)
    assert "narrowest point" in v.feedback and set(v.evidence["problems"]) == {"holes"}, v.feedback


@pytest.mark.parametrize("fn", [10, None], ids=["$fn = 10", "OpenSCAD's default"])
def test_the_9_mm_hole_passes_at_10_segments_and_at_openscads_default(verify, fn: int | None) -> None:
    task = _tasks()["cad-l3-31-2"]
    v = _verdict(verify, task, _holes_faceted(task, fn))
    assert v.passed, (fn, v.error_class, v.feedback)


def _pentagon_widened(task: Task) -> str:
    """The gold with each stated hole a pentagon whose flats reach the hole's circle (its diameter over
    cos 36 degrees): the narrowest point right, the corners 1.24 r out."""
    sizes = {h["d"] for h in task.fields["holes"]}
    return re.sub(r"cylinder\(d = ([\d.]+), h = ([\d.]+)\)",
                  lambda m: f"cylinder(d = {float(m[1]) / 0.80902:.4f}, h = {m[2]}, $fn = 5)"
                  if float(m[1]) in sizes else m[0], task.fields["gold"])


# The stop hook's read of 2f585b2, as a policy would answer its bound: coarser prisms than a pentagon's
# that OpenSCAD's default does not make at 9 mm, and a pentagon widened until its flats meet the circle.
COARSE = [(6, "a hexagon"), (8, "an octagon"), ("widened", "a pentagon whose flats reach the circle")]


@pytest.mark.parametrize(("fn", "name"), COARSE, ids=[c[1] for c in COARSE])
def test_the_9_mm_hole_as_a_coarser_prism_than_the_default_fails(verify, fn, name: str) -> None:
    task = _tasks()["cad-l3-31-2"]
    script = _pentagon_widened(task) if fn == "widened" else _holes_faceted(task, fn)
    v = _verdict(verify, task, script)
    assert v.outcome == "fail" and "holes" in v.evidence.get("problems", ()), (name, v.error_class, v.feedback)
