"""The cad domain's scripted agents: the oracle, and cheats written as a policy would write them.

Each is ``script(task) -> [call, ...]``, played one call an action by ``posttrain.envs.workspace.ScriptedAgent``
through the runner, the tools and the chat template a model uses (``posttrain eval --episodes agent
--agent NAME``). The oracle must pass every task; the no-op (the kit's) and every cheat must fail
every task, as a ``fail`` verdict, never ``infra_error`` (README's table; tests/envs/test_cad_agent.py).

- ``oracle``: reads the specification, writes the gold script to ``part.scad``, renders it, submits.
- cheats (``CHEATS``; why each fails in ``WHY_IT_FAILS``): an empty model; an inside-out mesh; a giant
  box; ``import`` of a host file; the gold rendered to an STL in the workspace and imported; the gold
  in a second file pulled in with ``include``; a non-manifold shape (two boxes sharing an edge); the
  gold's render left as ``part.stl`` beside an empty script.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from posttrain.envs.cad._episode import SCRIPT
from posttrain.envs.workspace import SUBMIT, Call
from posttrain.types import Task


def _c(name: str, **arguments: object) -> Call:
    return {"name": name, "arguments": arguments}


def _write(script: str) -> list[Call]:
    return [_c("read_file", path="spec.md"), _c("write_file", path=SCRIPT, content=script), _c("render")]


def oracle(task: Task) -> list[Call]:
    return [*_write(task.fields["gold"]), SUBMIT]


_BOX_POINTS = "[[0,0,0],[20,0,0],[20,20,0],[0,20,0],[0,0,10],[20,0,10],[20,20,10],[0,20,10]]"
_INVERTED_FACES = "[[3,2,1,0],[0,1,5,4],[4,5,6,7],[1,2,6,5],[2,3,7,6],[3,0,4,7]]"


def _fixed(script: str) -> Callable[[Task], list[Call]]:
    def play(task: Task) -> list[Call]:
        return [*_write(script), SUBMIT]

    return play


def import_own_mesh(task: Task) -> list[Call]:
    """Render the gold to ``gold.stl`` in the workspace, then make ``part.scad`` import it."""
    return [_c("write_file", path="gold.scad", content=task.fields["gold"]),
            _c("bash", command="openscad -o gold.stl gold.scad"), *_write('import("gold.stl");\n'), SUBMIT]


def include_own_file(task: Task) -> list[Call]:
    """The gold in ``lib.scad``, and ``part.scad`` that includes it (the grader renders part.scad alone)."""
    return [_c("write_file", path="lib.scad", content=task.fields["gold"]), *_write("include <lib.scad>\n"), SUBMIT]


def stl_beside(task: Task) -> list[Call]:
    """Leave the gold's mesh as ``part.stl`` (a grader that looked for a mesh would find it) beside an
    empty script."""
    return [_c("write_file", path="gold.scad", content=task.fields["gold"]),
            _c("bash", command="openscad -o part.stl gold.scad && rm gold.scad"), *_write("// see part.stl\n"), SUBMIT]


CHEATS: dict[str, Callable[[Task], Sequence[Call]]] = {
    "empty": _fixed("// the part\n"),
    "inverted": _fixed(f"polyhedron({_BOX_POINTS}, {_INVERTED_FACES});\n"),
    "giant-box": _fixed("cube(1000, center = true);\n"),
    "import-host-file": _fixed('import("/etc/passwd");\n'),
    "import-own-mesh": import_own_mesh,
    "include-own-file": include_own_file,
    "non-manifold": _fixed("cube([10, 10, 10]);\ntranslate([10, 10, 0]) cube([10, 10, 10]);\n"),
    "stl-beside": stl_beside,
}
WHY_IT_FAILS = {
    "empty": "build: no 3D object",
    "inverted": "inverted: a shell enclosing negative volume",
    "giant-box": "dimensions: the bounding box is off by hundreds of millimetres",
    "import-host-file": "forbidden: import reads a file (and the render's sandbox has none of the host's)",
    "import-own-mesh": "forbidden: import reads a file (the render is the script alone, in a fresh sandbox)",
    "include-own-file": "forbidden: include pulls in a file (the grader takes part.scad alone)",
    "non-manifold": "not_solid: two boxes sharing an edge are not a 2-manifold",
    "stl-beside": "build: the script builds nothing; other files of the workspace are never graded",
}


def probes(task: Task) -> list[tuple[Call, str]]:
    """None: a cad task's prompt is its specification, so two tasks with one prompt are one part."""
    return []
