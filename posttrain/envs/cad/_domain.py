"""The cad domain's ``Domain``: task records, the prompt, the verifier, no-op, exploits, generators.

Task fields (docs/tasks.md, "cad"): ``prompt`` (the part described in words: dimensions,
features, placement), ``gold`` (the OpenSCAD script of the specified solid: everything the
verifier compares is measured on its render, never typed in by hand), ``iou`` (the least IoU
with the gold that passes, default 0.95), ``tolerance_mm`` (default 0.5: how far each side of
the bounding box may be off, and half the thickness of the smallest difference in shape that
fails) and ``holes`` (default none: the round holes and slots the prompt states, each held to its
diameter within max(0.1 mm, 2 %) on its axis, ``_holes.py``; the generator lists every one it
makes) and ``rounds`` (default none: the round outer features, hubs and bosses, each held round to
its diameter from outside, ``_holes._round_problem``) and ``round_bodies`` (default none, in the form
of ``rounds``: a disc's outline, or with a ``quadrant`` a plate's or block's rounded vertical edge, held
round likewise to OpenSCAD's default faceting for its radius, ``_holes.body_checks``). The reference, unless the record gives one, is the gold in a fenced block.

>>> task = ENV.parse_task({"id": "c1", "prompt": "A 10 mm cube on the origin.", "gold": "cube(10);"}, "doc")
>>> task.fields["iou"], task.fields["tolerance_mm"], task.fields["holes"], task.reference
(0.95, 0.5, [], '```openscad\\ncube(10);\\n```')
>>> task.fields["rounds"], task.fields["round_bodies"]
([], [])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from posttrain.envs._base import RecordReader, Verifier, parse_common
from posttrain.envs._workspace_hooks import WorkspaceEpisodes
from posttrain.envs.cad._holes import parse_holes, parse_rounds
from posttrain.envs.cad._script import script_problem
from posttrain.envs.cad._verify import NAME, make_cad_verifier
from posttrain.strict_json import finite_number
from posttrain.types import Task, TaskLimits

DOMAIN_KEYS = frozenset({"gold", "iou", "tolerance_mm", "holes", "rounds", "round_bodies"})
DEFAULT_IOU = 0.95
DEFAULT_TOLERANCE_MM = 0.5
DEFAULT_LIMITS = TaskLimits(timeout_s=20.0, memory_mb=1024)
"""A render may take seconds (OpenSCAD 2021's CGAL booleans) and hundreds of MiB."""

INSTRUCTIONS = (
    "Write an OpenSCAD script that builds this part. Units are millimetres. Reply with the complete "
    "script in one ```openscad code block. Build it from primitives: do not include, use or import any "
    "file. Use $fn = 48 to 128 for round features."
)
"""Appended to every task's prompt (``render_prompt``)."""


def fenced(script: str) -> str:
    """A response that is ``script`` in one ``openscad`` block."""
    return f"```openscad\n{script.rstrip()}\n```"


def _number(reader: RecordReader, field: str, default: float, lo: float, hi: float, what: str) -> float:
    value = reader.record.get(field, default)
    if not finite_number(value) \
            or not lo < value <= hi:
        raise reader.fail(field, what, value)
    return float(value)


class CadDomain(WorkspaceEpisodes):
    """The cad domain (see the package docstring)."""

    name = NAME
    needs_sandbox = True
    verdict_is_a_draw = True
    """Not a function of (task, response): OpenSCAD's ``rands()`` without a seed draws anew at each render.
    The service replays a pass only after three in a row (``sched.Service``)."""

    def parse_task(self, record: Mapping[str, Any], source: str) -> Task:
        reader = RecordReader(record, source, NAME)
        reader.check_keys(DOMAIN_KEYS)
        gold = reader.string("gold")
        problem = script_problem(gold)
        if problem:
            raise reader.fail("gold", f"an OpenSCAD script that may be rendered ({problem[1]})", show_got=False)
        fields = {
            "gold": gold,
            "iou": _number(reader, "iou", DEFAULT_IOU, 0.0, 1.0, "a number in (0, 1]"),
            "tolerance_mm": _number(reader, "tolerance_mm", DEFAULT_TOLERANCE_MM, 0.0, 100.0,
                                    "a number of millimetres in (0, 100]"),
            "holes": _features(reader, "holes", parse_holes),
            "rounds": _features(reader, "rounds", parse_rounds),
            "round_bodies": _features(reader, "round_bodies", lambda v: parse_rounds(v, "round body")),
        }
        canary = "canary" in reader.tags()  # its gold contradicts its prompt: no reference
        return parse_common(reader, fields, reference=None if canary else fenced(gold), default_limits=DEFAULT_LIMITS)

    def render_prompt(self, task: Task) -> str:
        return f"{task.prompt.rstrip()}\n\n{INSTRUCTIONS}"

    def make_verifier(self, pool: Any | None) -> Verifier:
        return make_cad_verifier(pool)

    def noop_response(self, task: Task) -> str:
        return ""

    def exploit_fixtures(self) -> list[tuple[str, Task, str]]:
        """``(name, task, response)``: responses a policy could write that must score 0 as a
        ``fail`` (``_hacks.py``)."""
        from posttrain.envs.cad._hacks import exploit_fixtures

        return exploit_fixtures(self)

    def generate_tasks(self, n: int, seed: int = 0) -> list[Task]:
        from posttrain.envs.cad._gen import generate_tasks

        return generate_tasks(n, seed=seed)

    def level_range(self) -> tuple[int, int]:
        """Difficulty is the number of features on the part (``_gen.py``)."""
        from posttrain.envs.cad._gen import LEVELS

        return LEVELS

    def generate_level(self, n: int, *, level: int, seed: int = 0) -> list[Task]:
        from posttrain.envs.cad._gen import generate_level

        return generate_level(n, level=level, seed=seed)

    def canary_tasks(self, n: int, *, seed: int = 0) -> list[Task]:
        """Tasks whose gold lacks a feature the prompt describes (``_gen.canary_tasks``)."""
        from posttrain.envs.cad._gen import canary_tasks

        return canary_tasks(n, seed=seed)

    def capabilities(self) -> tuple[str, ...]:
        return ("cad", "3d-modeling", "spatial", "code")

    def render_views(self, pool: Any, task: Task, response: str, out_dir: Path) -> Mapping[str, Path | None]:
        """The response's part and the gold, rendered by OpenSCAD in ``pool`` and seen by one camera
        (``_render.render_views``: no candidate picture when it does not build)."""
        from posttrain.envs.cad._render import render_views

        return render_views(pool, task, response, out_dir)

    # -- agent episodes (the workspace kit: posttrain.envs.workspace; _episode.py, _agents.py) --

    def workspace_spec(self, task: Task) -> Any:
        """The workspace episode of ``task`` (``_episode.workspace_spec``)."""
        from posttrain.envs.cad._episode import workspace_spec

        return workspace_spec(task)

    def agents(self) -> ModuleType:
        """The scripted agents (``_agents.py``: ``oracle``, ``CHEATS``, ``probes``)."""
        from posttrain.envs.cad import _agents

        return _agents


ENV = CadDomain()


def _features(reader: RecordReader, key: str, parse: Callable[[Any], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    try:
        return parse(reader.record.get(key, []))
    except ValueError as e:
        raise reader.fail(key, str(e), reader.record[key]) from None
