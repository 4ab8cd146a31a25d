"""Exploit fixtures of the cad domain: responses a policy could write to score without building the
part. Each must be a ``fail`` (never a pass, never an ``infra_error``) through the service's batch
path (tests/envs/test_domains.py) and one by one with its expected error class (tests/envs/test_cad.py).

They are written against five small tasks (fast renders): a 20 x 20 x 10 block with a 10 mm
hole (the measured case of real-task-domains.md: without its hole it keeps its bounding box and
scores IoU 0.80), a plate with four 8 mm holes, a plate with one 3 mm hole, a plain box, an L profile
(asymmetric, for mirror and rotation tricks), and the block again with tight limits (the bombs). The
holes are stated with their spans (the task's ``holes``), as the generator states every hole it makes.
``EXPLOITS`` lists ``(name, task key, script or raw response, expected error class)``.
"""

from __future__ import annotations

from typing import Any

from posttrain.envs.cad._holes import stations
from posttrain.types import Task

_HOLE_GOLD = ("$fn = 48;\ndifference() {\n  translate([-10, -10, 0]) cube([20, 20, 10]);\n"
              "  translate([0, 0, -1]) cylinder(r = 5, h = 12);\n}\n")
_PLATE_GOLD = ("$fn = 48;\ndifference() {\n  translate([-30, -20, 0]) cube([60, 40, 5]);\n"
               + "".join(f"  translate([{x}, {y}, -1]) cylinder(d = 8, h = 7);\n" for x in (-24, 24) for y in (-14, 14))
               + "}\n")
_PIN_GOLD = ("$fn = 48;\ndifference() {\n  translate([-15, -10, 0]) cube([30, 20, 6]);\n"
             "  translate([0, 0, -1]) cylinder(d = 3, h = 8);\n}\n")
_TASKS: dict[str, dict[str, Any]] = {
    "plate": {"prompt": "A plate 60 mm along X, 40 mm along Y and 5 mm thick, centred on the origin in X and Y with "
                        "its bottom face on Z = 0, with four through-holes of diameter 8 mm centred at X = +/-24, "
                        "Y = +/-14.", "gold": _PLATE_GOLD,
              "holes": [{"axis": "z", "at": [x, y, 2.5], "d": 8, "span": [0, 5]} for x in (-24, 24)
                        for y in (-14, 14)]},
    "hole": {"prompt": "A block 20 mm along X, 20 mm along Y and 10 mm tall, centred on the origin in X and Y with "
                       "its bottom face on Z = 0, with a through-hole of diameter 10 mm along Z at its centre.",
             "gold": _HOLE_GOLD, "holes": [{"axis": "z", "at": [0, 0, 5], "d": 10, "span": [0, 10]}]},
    "pin": {"prompt": "A plate 30 mm along X, 20 mm along Y and 6 mm thick, centred on the origin in X and Y with "
                      "its bottom face on Z = 0, with a through-hole of diameter 3 mm along Z at its centre.",
            "gold": _PIN_GOLD, "holes": [{"axis": "z", "at": [0, 0, 3], "d": 3, "span": [0, 6]}]},
    "box": {"prompt": "A box 20 mm along X, 20 mm along Y and 10 mm tall, with one corner at the origin and the "
                      "opposite corner at (20, 20, 10).", "gold": "cube([20, 20, 10]);\n"},
    "ell": {"prompt": "An L-shaped profile extruded 10 mm along Z from Z = 0: in the XY plane its outline runs "
                      "(0, 0), (30, 0), (30, 8), (8, 8), (8, 20), (0, 20).",
            "gold": "linear_extrude(height = 10) polygon([[0, 0], [30, 0], [30, 8], [8, 8], [8, 20], [0, 20]]);\n"},
    "bomb": {"prompt": "The same block with a hole, rendered under tight limits.", "gold": _HOLE_GOLD,
             "limits": {"timeout_s": 4, "memory_mb": 256}},
}

_PIN_HOLE = "  translate([0, 0, -1]) cylinder(d = 3, h = 8);\n"
_PIN_STATIONS = stations(_TASKS["pin"]["holes"][0]).tolist()
"""Where the pin's hole is sliced (0.5, 1.75, 3, 4.25, 5.5: its span, the plate, less 0.5 mm at each end)."""
_RINGS = " ".join(f"translate([0, 0, {z - 0.1:g}]) difference() {{ cylinder(d = 5, h = 0.2); cylinder(d = 3, h = 0.2); }}"
                  for z in _PIN_STATIONS)

_BOX_POINTS = "[[0,0,0],[20,0,0],[20,20,0],[0,20,0],[0,0,10],[20,0,10],[20,20,10],[0,20,10]]"
_BOX_FACES = "[[0,1,2,3],[4,5,1,0],[7,6,5,4],[5,6,2,1],[6,7,3,2],[7,4,0,3]]"
"""The box's faces, each clockwise seen from outside (OpenSCAD's convention)."""
_BOX_FACES_INVERTED = "[[3,2,1,0],[0,1,5,4],[4,5,6,7],[1,2,6,5],[2,3,7,6],[3,0,4,7]]"
_POKED_POINTS = "[[0,0,0],[20,0,0],[20,20,0],[0,20,0],[0,0,10],[20,0,10],[14,14,-4],[0,20,10]]"
_GRID = "for (x = [-8 : 4 : 8], y = [-8 : 4 : 8], z = [1.5 : 3.5 : 9]) translate([x, y, z]) cube(3, center = true);"
_ELL = "linear_extrude(height = 10) polygon([[0, 0], [30, 0], [30, 8], [8, 8], [8, 20], [0, 20]]);"

EXPLOITS: list[tuple[str, str, str, str]] = [
    # nothing, or nothing solid
    ("empty response", "hole", "", "format"),
    ("empty geometry (a comment only)", "hole", "// the part\n", "build"),
    ("a 2D shape instead of a solid", "hole", "square(20, center = true);", "build"),
    ("a flat solid (scaled to zero height)", "hole", "scale([1, 1, 0]) cube([20, 20, 10]);", "inverted"),
    ("an inside-out mesh (faces point inwards)", "box", f"polyhedron({_BOX_POINTS}, {_BOX_FACES_INVERTED});",
     "inverted"),
    ("a doubled surface (every face twice)", "box",
     f"polyhedron({_BOX_POINTS}, concat({_BOX_FACES}, {_BOX_FACES}));", "not_solid"),
    ("an open surface (the top face left out)", "box",
     f"polyhedron({_BOX_POINTS}, [[0,1,2,3],[4,5,1,0],[5,6,2,1],[6,7,3,2],[7,4,0,3]]);", "not_solid"),
    ("a self-intersecting surface (one corner pushed through the bottom)", "box",
     f"polyhedron({_POKED_POINTS}, {_BOX_FACES});", "self_intersecting"),
    ("a self-intersecting surface (a box twisted 180 degrees a slice)", "box",
     "translate([10, 10, 0]) linear_extrude(height = 10, twist = 720, slices = 4) square([10, 2], center = true);",
     "self_intersecting"),
    ("vertices at infinity", "box", "polyhedron([[0,0,0],[1e39,0,0],[0,1e39,0],[0,0,1e39]], "
     "[[0,1,2],[0,3,1],[1,3,2],[0,2,3]]);", "mesh"),
    ("non-manifold: two boxes sharing an edge", "hole",
     "translate([-10, -10, 0]) cube([10, 10, 10]); cube([10, 10, 10]);", "not_solid"),
    ("non-manifold: two boxes touching at a corner", "hole",
     "translate([-10, -10, 0]) cube(10); translate([0, 0, 10]) cube(10);", "not_solid"),
    # the wrong solid, dressed up
    ("a giant box", "hole", "cube(1000, center = true);", "dimensions"),
    ("the gold's bounding box without the hole (IoU 0.80)", "hole", "translate([-10, -10, 0]) cube([20, 20, 10]);",
     "topology"),
    ("the hole's volume hidden as an internal void", "hole",
     "difference() { translate([-10, -10, 0]) cube([20, 20, 10]); translate([-4.61, -4.61, 0.4]) "
     "cube([9.22, 9.22, 9.22]); }", "inverted"),
    ("the right volume and bounding box, the hole moved 3 mm", "hole",
     _HOLE_GOLD.replace("translate([0, 0, -1])", "translate([3, 0, -1])"), "iou"),
    ("one of four holes moved 2 mm (IoU 0.99)", "plate", _PLATE_GOLD.replace("[-24, 14, -1]", "[-22, 14, -1]"),
     "shape"),
    ("the plate's round holes cut square (8 x 8 mm, IoU 0.98)", "plate",
     _PLATE_GOLD.replace("-1]) cylinder(d = 8, h = 7)", "2.5]) cube([8, 8, 7], center = true)"), "shape"),
    # a hole to another diameter or off its axis, by less than the shape check's 1 mm (IoU over 0.98)
    ("the 3 mm hole drawn 1.8 mm", "pin", _PIN_GOLD.replace("d = 3,", "d = 1.8,"), "holes"),
    ("the 3 mm hole drawn 4.2 mm", "pin", _PIN_GOLD.replace("d = 3,", "d = 4.2,"), "holes"),
    ("the 3 mm hole cut as a triangle around it (6 mm across its corners)", "pin",
     _PIN_GOLD.replace("d = 3,", "d = 6, $fn = 3,"), "holes"),
    ("the 3 mm hole 0.4 mm off its axis", "pin", _PIN_GOLD.replace("[0, 0, -1]", "[0.4, 0, -1]"), "holes"),
    ("the 10 mm hole drawn 9 mm (IoU 0.96)", "hole", _HOLE_GOLD.replace("r = 5,", "r = 4.5,"), "holes"),
    ("the plate's 8 mm holes drawn 7.4 mm", "plate", _PLATE_GOLD.replace("d = 8,", "d = 7.4,"), "holes"),
    # a hole right where it is measured is not enough: right at both faces and 1.8 mm between them
    # (the station, mid-plate, is in the narrow part), a square hole 3 mm across, a pin left on the axis
    ("the 3 mm hole right at both faces, 1.8 mm between them", "pin",
     _PIN_GOLD.replace("  translate([0, 0, -1]) cylinder(d = 3, h = 8);\n",
                       "  translate([0, 0, -1]) cylinder(d = 3, h = 2);\n  translate([0, 0, -1]) cylinder(d = 1.8, h = 8);\n"
                       "  translate([0, 0, 5]) cylinder(d = 3, h = 2);\n"), "holes"),
    # a hole right only where it is measured: the check sliced at one station (mid-plate), so a 1.8 mm hole
    # widened to 3 mm in a 1 mm band there passed (the shape check lets the 0.6 mm ring through); now its
    # span less 0.5 mm at each end is sliced at 5 stations and every wall vertex between is held to it
    ("the 3 mm hole drawn 1.8 mm, right only in a 1 mm band at mid-plate", "pin",
     _PIN_GOLD.replace(_PIN_HOLE, "  translate([0, 0, -1]) cylinder(d = 1.8, h = 8);\n"
                                  "  translate([0, 0, 2.5]) cylinder(d = 3, h = 1);\n"), "holes"),
    ("the 3 mm hole drawn 1.8 mm, right in a 0.2 mm band at each station it is sliced at", "pin",
     _PIN_GOLD.replace(_PIN_HOLE, "  translate([0, 0, -1]) cylinder(d = 1.8, h = 8);\n" + "".join(
         f"  translate([0, 0, {z - 0.1:g}]) cylinder(d = 3, h = 0.2);\n" for z in _PIN_STATIONS)), "holes"),
    ("the 3 mm hole drawn 4.2 mm, narrowed to 3 mm in a 0.2 mm ring at each station", "pin",
     _PIN_GOLD.replace(_PIN_HOLE, f"  difference() {{ translate([0, 0, -1]) cylinder(d = 4.2, h = 8); {_RINGS} }}\n"),
     "holes"),
    ("a square hole 3 mm across for the 3 mm hole", "pin",
     _PIN_GOLD.replace("translate([0, 0, -1]) cylinder(d = 3, h = 8);", "translate([-1.5, -1.5, -1]) cube([3, 3, 8]);"),
     "holes"),
    ("a 0.6 mm pin left standing on the 3 mm hole's axis", "pin",
     f"union() {{\n{_PIN_GOLD}cylinder(d = 0.6, h = 6);\n}}\n", "bodies"),
    ("the gold scaled to 90 %", "hole", f"scale(0.9) {{ {_HOLE_GOLD.split(';', 1)[1]} }}", "dimensions"),
    ("the gold shifted 5 mm along X", "hole", f"translate([5, 0, 0]) {{ {_HOLE_GOLD.split(';', 1)[1]} }}",
     "dimensions"),
    ("many disjoint bodies filling the bounding box", "hole", _GRID, "bodies"),
    ("a thin open shell of the bounding box", "hole",
     "difference() { translate([-10, -10, 0]) cube([20, 20, 10]); translate([-9.8, -9.8, 0.2]) "
     "cube([19.6, 19.6, 10]); }", "topology"),
    ("the L mirrored", "ell", f"mirror([1, 0, 0]) {_ELL}", "dimensions"),
    ("the L turned 180 degrees in its own bounding box", "ell",
     f"translate([30, 20, 0]) rotate([0, 0, 180]) {_ELL}", "iou"),
    # reaching outside the script
    ("import of a host file", "hole", 'import("/etc/passwd");', "forbidden"),
    ("import of a mesh shipped under /usr", "hole",
     'import("/usr/share/openscad/examples/Old/example010.dat");', "forbidden"),
    ("import hidden behind a comment", "hole", 'import /* a */ ("/etc/hostname");', "forbidden"),
    ("include of a host file", "hole", "include </etc/passwd>\ncube(1);", "forbidden"),
    ("use of a library shipped with OpenSCAD", "hole", "use <MCAD/boxes.scad>\nroundedBox([20, 20, 10], 2);",
     "forbidden"),
    ("surface() from a file", "hole", 'surface(file = "/etc/hostname");', "forbidden"),
    ("linear_extrude of a DXF file", "hole", 'linear_extrude(height = 10, file = "/tmp/x.dxf");', "forbidden"),
    # OpenSCAD 2021's first positional argument of linear_extrude / rotate_extrude is `file`: these
    # read a DXF shipped under /usr and build a part from it (they rendered before the static check knew)
    ("linear_extrude of a DXF file passed by position", "hole",
     'linear_extrude(/* the profile */ "/usr/share/openscad/examples/Old/example009.dxf", height = 10);', "forbidden"),
    ("dxf_linear_extrude, the old name", "hole",
     'dxf_linear_extrude("/usr/share/openscad/examples/Old/example009.dxf", height = 10);', "forbidden"),
    # a path the static check cannot see (built by str(), held in a variable): the render sandbox shows only
    # /usr, so what is read is never the task's; OpenSCAD's example profile fails the mesh gate
    ("linear_extrude of a DXF path built by str()", "hole",
     'linear_extrude(str("/usr/share/openscad/examples/Old/", "example009.dxf"), height = 10);', "not_solid"),
    ("linear_extrude of a DXF path held in a variable", "hole",
     'p = "/usr/share/openscad/examples/Old/example009.dxf";\nlinear_extrude(p, height = 10);', "not_solid"),
    ("a script that writes outside (echoes a fake STL, calls export)", "hole",
     'echo(str("solid part\\n", "endsolid part"));\nexport("/tmp/part.stl");\n// openscad -o /work/part.stl\n',
     "build"),
    # not a script at all
    ("the prompt echoed as prose", "hole", "RAW:A block 20 mm along X with a 10 mm hole.", "build"),
    ("a fenced block in another language", "hole", "RAW:```python\nprint('cube(10);')\n```", "format"),
    ("a NUL byte in the script", "hole", "cube(10);\x00", "format"),
    ("a script over the size limit", "hole", "cube(1);" + " " * 200_001, "format"),
    # burning the verifier's resources
    ("a minkowski render bomb", "bomb",
     "minkowski() { difference() { cube(20, center = true); sphere(12, $fn = 64); } sphere(2, $fn = 64); }",
     "timeout"),
    ("a $fn bomb (a sphere of 4 million facets)", "bomb", "sphere(10, $fn = 2000);", "memory"),
    ("a recursion bomb", "bomb", "function f(n) = n == 0 ? 0 : 1 + f(n - 1);\ncube(f(10000000));", "build"),
]


def exploit_tasks(env: Any) -> dict[str, Task]:
    """The fixture tasks, parsed by ``env``."""
    return {key: env.parse_task({"id": f"cad-exploit-{key}", "domain": "cad", **record}, "cad exploit fixtures")
            for key, record in _TASKS.items()}


def _response(script: str) -> str:
    if script.startswith("RAW:"):
        return script[4:]
    return f"```openscad\n{script}\n```" if script else ""


def exploit_fixtures(env: Any) -> list[tuple[str, Task, str]]:
    """``(name, task, response)`` for every row of ``EXPLOITS``."""
    tasks = exploit_tasks(env)
    return [(name, tasks[key], _response(script)) for name, key, script, _ in EXPLOITS]
