"""A third read of the cad verifier as a reward-hacking policy would read it, each attack through the real
verifier (OpenSCAD in the sandbox, the mesh checks in their worker).

One passed: the example tasks (``examples/tasks/cad.jsonl``) predated the ``holes`` field, so none stated
the holes its prompt describes, and the hole check (``_holes.py``) had nothing to hold them to: a 4 mm
bolt hole drawn 2.8 or 5.2 mm (a 0.6 mm ring, under the shape check's 1 mm; IoU 0.99) passed there, as it
did on every task before the generator stated its holes. The file now carries the holes the generator
gives those very tasks (same gold, same prompt: ``generate_level(2, level=L, seed=2024)``).

The others fail as they should, never as an ``infra_error``: a DXF path in parentheses, which the static
check does not see as a string argument (the render's sandbox shows only ``/usr``: OpenSCAD's example
profile fails the gate); ``/dev/zero`` read as a DXF (the render's memory limit); the two boxes sharing an
edge with one box's copies of it written ``-0`` (OpenSCAD merges points by value, so the mesh stays
non-manifold); a parser and a module-recursion bomb (OpenSCAD's own errors).
"""

from __future__ import annotations

import shutil

import pytest
from cad_examples import example

from posttrain.envs import get_domain
from posttrain.envs.cad import fenced
from posttrain.envs.cad._hacks import exploit_tasks
from posttrain.envs.cad._script import script_problem

ENV = get_domain("cad")
pytestmark = pytest.mark.skipif(shutil.which("openscad") is None, reason="openscad is not installed "
                                "(make domain-deps)")


@pytest.fixture(scope="module")
def verify(pool):
    return ENV.make_verifier(pool)


def test_the_example_tasks_hold_their_bolt_holes_to_size(verify) -> None:
    task = example("cad-l1-2024-1")  # a 70 mm disc with 5 bolt holes of 4 mm
    assert "5 through-holes of diameter 4 mm" in task.prompt
    gold = task.fields["gold"]
    for wrong in ("d = 2.8,", "d = 5.2,"):
        v = verify(task, fenced(gold.replace("d = 4,", wrong)))
        assert (v.outcome, v.error_class) == ("fail", "holes"), (wrong, v.outcome, v.feedback)


_DXF = "/usr/share/openscad/examples/Old/example009.dxf"
_A = "[[-10,-10,0],[0,-10,0],[0,0,0],[-10,0,0],[-10,-10,10],[0,-10,10],[0,0,10],[-10,0,10]]"
_B = "[[-0,-0,0],[10,-0,0],[10,10,0],[-0,10,0],[-0,-0,10],[10,-0,10],[10,10,10],[-0,10,10]]"
_FACES = "[[0,1,2,3],[4,5,1,0],[7,6,5,4],[5,6,2,1],[6,7,3,2],[7,4,0,3]]"
_FACES_B = "[[8,9,10,11],[12,13,9,8],[15,14,13,12],[13,14,10,9],[14,15,11,10],[15,12,8,11]]"
ATTACKS = [
    ("a DXF path in parentheses", f'linear_extrude(("{_DXF}"), height = 10);', {"not_solid"}),
    ("/dev/zero read as a DXF", 'p = "/dev/zero";\nlinear_extrude(p, height = 10);', {"memory", "timeout"}),
    ("two boxes sharing an edge, one's copies of it written -0", f"polyhedron(concat({_A}, {_B}), "
     f"concat({_FACES}, {_FACES_B}));", {"not_solid"}),
    ("a parser bomb (15,000 nested unions)", "union() {" * 15_000 + "cube(1);" + "}" * 15_000, {"build"}),
    ("a module recursion bomb", "module m(n) { if (n > 0) m(n - 1); else cube(1); }\nm(1000000);", {"build"}),
]


@pytest.mark.parametrize(("name", "script", "classes"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_attacks_fail_for_their_reason_never_infra(verify, name: str, script: str, classes: set[str]) -> None:
    task = exploit_tasks(ENV)["hole"]
    if name.startswith("a DXF path"):
        assert script_problem(script) is None  # the static check is a courtesy; the sandbox is the defence
    v = verify(task, fenced(script))
    assert v.outcome == "fail" and v.error_class in classes, (name, v.outcome, v.error_class, v.feedback)
