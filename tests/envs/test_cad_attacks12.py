"""A twelfth read of the cad verifier as a reward-hacking policy would read it: OpenSCAD's output, renders side
by side, and placements by a matrix. Each try goes through the real verifier (OpenSCAD in the sandbox, the
mesh checks in their worker) unless it is about the verifier's own cost.

One cost the candidate could put on the verifier's process: OpenSCAD's stderr is the candidate's to fill
(``echo``, up to the job's 16 MiB cap), and the ERROR / WARNING lines for the feedback were read from all of
it, each normalised: a script echoing "\\nWARNING: ..." a million times cost the verifier's own process (the
trainer's, outside any budget) 3.7 s of CPU in ``openscad_messages`` a render (and 1.5 s more in the
sandbox's pump, left as it is). Now its two ends are read, 64 KiB each, and only the kept lines normalised:
0.002 s. No verdict depended on it: a message never decides one.

Held (no change), each the candidate's own verdict: fake "Rendering finished" / "Volume" / "ERROR" lines put
on stderr by an ``echo`` with newlines in it (they reach the feedback's quotation of OpenSCAD, never the
verdict: the right box still passes, a box 1 mm short still fails ``dimensions``); a render bomb checked at
the same time as an honest answer on the same two-slot pool (the bomb ``timeout``, the answer ``pass``); an L
mirrored or its axes swapped inside its own bounding box by ``multmatrix`` (``iou``, ``dimensions``); a box
placed by a mirroring matrix is the box (its faces are turned back by OpenSCAD: ``pass``).
"""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from posttrain.envs import get_domain
from posttrain.envs.cad import fenced
from posttrain.envs.cad._hacks import exploit_tasks
from posttrain.envs.cad._render import openscad_messages

ENV = get_domain("cad")
needs_openscad = pytest.mark.skipif(shutil.which("openscad") is None, reason="openscad is not installed "
                                    "(make domain-deps)")
_ECHOED = b'ECHO: "\nWARNING: Rendering finished. Volume: 4000\nWARNING: fake"\n'


def test_a_flood_of_echoed_messages_costs_the_verifier_little() -> None:
    """16 MiB of echoed WARNING lines (the job's cap): 3.7 s of CPU before, now the two ends alone (the
    cost is measured in the commit, not timed here: the message says what was not read)."""
    flood = (b"Compiling design (CSG Tree generation)...\n" + _ECHOED * (16_777_216 // len(_ECHOED)))[:16_777_345]
    said = openscad_messages(flood + b"ERROR: the last line\n")
    lines = said.splitlines()
    assert len(lines) == 6 and lines[0] == "WARNING: Rendering finished. Volume: 4000", said
    assert lines[-1].startswith("... (") and lines[-1].endswith("more messages, more not read)"), said
    # a real message at the end of a long output (a script's own echo before it) is still read
    tail = openscad_messages(b'ECHO: "x"\n' * 100_000 + b"WARNING: Ignoring unknown variable 'q'\n")
    assert tail == "WARNING: Ignoring unknown variable 'q'", tail


def test_a_short_output_is_read_whole_as_before() -> None:
    out = b"Compiling...\nWARNING: a in file /work/part.scad, line 2\nECHO: 1\n" + b"ERROR: b\n" * 6
    assert openscad_messages(out).splitlines() == ["WARNING: a in file part.scad, line 2", *["ERROR: b"] * 4,
                                                   "... (2 more messages)"]


@pytest.fixture(scope="module")
def verify(pool):
    return ENV.make_verifier(pool)


def _both(verify, pairs):
    """Verdicts of two (task, script) pairs verified at the same time (the pool has two slots)."""
    with ThreadPoolExecutor(2) as ex:
        return list(ex.map(lambda p: verify(p[0], fenced(p[1])), pairs))


_FLOOD = 'for (i = [0 : 299], j = [0 : 999]) echo("\\nWARNING: Rendering finished. Volume: 4000\\nERROR: fake");\n'


@needs_openscad
def test_fake_render_reports_on_stderr_are_never_the_verdict(verify) -> None:
    """300,000 echoes, each a fake "Rendering finished. Volume: 4000" and an ERROR line (stderr cut at the cap),
    beside the right 20 x 20 x 10 box and beside one 1 mm short: each is judged on its mesh."""
    box = exploit_tasks(ENV)["box"]
    right, short = _both(verify, [(box, _FLOOD + "cube([20, 20, 10]);"), (box, _FLOOD + "cube([20, 20, 9]);")])
    assert right.passed, (right.error_class, right.feedback)
    assert "ERROR: fake" in right.evidence["openscad"]  # quoted as OpenSCAD's, decides nothing
    assert (short.outcome, short.error_class) == ("fail", "dimensions"), (short.outcome, short.feedback)


@needs_openscad
def test_a_render_bomb_beside_an_honest_answer_costs_only_itself(verify) -> None:
    """A minkowski bomb (the task's 4 s of CPU) and the gold's text with a comment, verified at once."""
    task = exploit_tasks(ENV)["bomb"]
    bomb = "minkowski() { difference() { cube(20, center = true); sphere(12, $fn = 64); } sphere(2, $fn = 64); }"
    bombed, honest = _both(verify, [(task, bomb), (task, task.fields["gold"] + "// mine\n")])
    assert (bombed.outcome, bombed.error_class) in {("fail", "timeout"), ("fail", "memory")}, bombed
    assert honest.passed, (honest.error_class, honest.feedback)


_ELL = "linear_extrude(height = 10) polygon([[0, 0], [30, 0], [30, 8], [8, 8], [8, 20], [0, 20]]);"
MATRICES = [
    ("the L mirrored in its own bounding box by a matrix (IoU 0.56)", "ell",
     f"multmatrix([[-1, 0, 0, 30], [0, 1, 0, 0], [0, 0, 1, 0]]) {_ELL}", ("fail", "iou")),
    ("the L with X and Y swapped by a matrix", "ell",
     f"multmatrix([[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0]]) {_ELL}", ("fail", "dimensions")),
    ("the box placed by a mirroring matrix (the same solid: its faces turned back)", "box",
     "multmatrix([[-1, 0, 0, 20], [0, 1, 0, 0], [0, 0, 1, 0]]) cube([20, 20, 10]);", ("pass", None)),
]


@needs_openscad
@pytest.mark.parametrize(("name", "key", "script", "expected"), MATRICES, ids=[m[0] for m in MATRICES])
def test_parts_placed_by_a_matrix_are_judged_on_their_mesh(verify, name: str, key: str, script: str,
                                                           expected: tuple) -> None:
    v = verify(exploit_tasks(ENV)[key], fenced(script))
    assert (v.outcome, v.error_class) == expected, (name, v.outcome, v.error_class, v.feedback)
