"""Renders of what agents submit, beside the gold, for people to look at: ``python -m posttrain.envs.cad views``.

    python -m posttrain.envs.cad views examples/tasks/cad.jsonl docs/images/cad --agent oracle --agent hull

For each task of the file (``--limit`` the first N) and each named agent, the script the agent leaves
in ``part.scad`` (its last ``write_file`` of it: the oracle's is the gold; a cheat's or a near miss's
its own) is verified as a submission is (the cad verifier: sandboxed render, gate, specification) and
rendered beside the gold by ``_render.write_views`` (``xvfb-run openscad``, one camera aimed at the
gold for both, so a wrong size shows). Writes ``<task>.gold.png``, ``<task>.<agent>.png`` and
``index.md``: a table of the verdicts with the images, for a README or a run's report.

Agents: the domain's scripted agents (``oracle`` and the cheats) and the near misses of
``NEAR_MISSES``: attempts that look right and fail the specification (the hull of the gold: every
hole and pocket filled, the bounding box kept; the gold scaled by 3 %).

Not here: the verdict itself (``_verify.py``); views are never part of one.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from posttrain.types import Task

NEAR_MISSES: Mapping[str, Callable[[Task], str]] = {
    "hull": lambda task: f"hull() {{\n{task.fields['gold']}\n}}\n",
    "scaled": lambda task: f"scale(1.03) {{\n{task.fields['gold']}\n}}\n",
}
"""Attempts that look right and are not (never cheats: on a convex part the hull *is* the part)."""


def submitted_script(task: Task, agent: str) -> str | None:
    """The ``part.scad`` an agent's script leaves (its last ``write_file`` of it), a near miss's script,
    or None when it writes none."""
    from posttrain.envs import get_domain
    from posttrain.envs.cad._episode import SCRIPT

    if agent in NEAR_MISSES:
        return NEAR_MISSES[agent](task)
    calls = get_domain("cad").scripted_agents()[agent](task)
    writes = [c["arguments"]["content"] for c in calls
              if c["name"] == "write_file" and c["arguments"].get("path") == SCRIPT]
    return writes[-1] if writes else None


def write_gallery(pool: object, tasks: Sequence[Task], agents: Sequence[str], out: Path) -> Path:
    """Verify and render each agent's ``part.scad`` beside the gold into ``out``; returns ``index.md``."""
    from posttrain.envs import get_domain
    from posttrain.envs.cad._render import render_stl, write_views

    verify = get_domain("cad").make_verifier(pool)
    rows = ["| task | gold | " + " | ".join(agents) + " |", "|---|---|" + "---|" * len(agents)]
    for task in tasks:
        stem = re.sub(r"[^A-Za-z0-9._-]", "_", task.id)[:120]
        cells = []
        for agent in agents:
            script = submitted_script(task, agent)
            if script is None:
                cells.append(f"{agent}: nothing written")
                continue
            verdict = verify(task, script)
            part = render_stl(pool, script, timeout_s=task.limits.timeout_s, memory_mb=task.limits.memory_mb)
            views = write_views(pool, task.fields["gold"], part.stl if part.status == "ok" else None, out, stem)
            candidate = out / f"{stem}.{agent}.png"
            if views["candidate"] is not None:
                views["candidate"].replace(candidate)
            said = verdict.outcome if verdict.passed else f"{verdict.outcome} ({verdict.error_class})"
            image = f"<br>![{agent}]({candidate.name})" if candidate.exists() else "<br>(no mesh)"
            cells.append(f"{said}{image}")
        rows.append(f"| {task.id} | ![gold]({stem}.gold.png) | " + " | ".join(cells) + " |")
    index = out / "index.md"
    index.write_text("\n".join(rows) + "\n")
    return index


def main(argv: Sequence[str] | None = None) -> int:
    from posttrain.envs import get_domain
    from posttrain.errors import UserError
    from posttrain.sandbox import open_pool
    from posttrain.strict_json import StrictJSONError, loads_strict

    p = argparse.ArgumentParser(prog="python -m posttrain.envs.cad views", description=__doc__.split("\n\n")[0])
    p.add_argument("tasks", type=Path, help="a task file (cad tasks)")
    p.add_argument("out", type=Path, help="the directory the PNGs and index.md go to")
    p.add_argument("--agent", action="append", default=[], help="oracle, a cheat, or a near miss (repeatable)")
    p.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    args = p.parse_args(argv)
    cad = get_domain("cad")  # the file's cad records (envs reads them itself: tasks/ is a layer above)
    try:
        lines = args.tasks.read_text(encoding="utf-8").splitlines()
        records = [(i, loads_strict(line)) for i, line in enumerate(lines, 1) if line.strip()]
        tasks = [cad.parse_task(r, f"{args.tasks}:{i}") for i, r in records
                 if isinstance(r, dict) and r.get("domain") == "cad"][: args.limit]
    except (OSError, UnicodeDecodeError, StrictJSONError, UserError) as e:
        print(f"cad views: {args.tasks}: {e}", file=sys.stderr)
        return 2
    if not tasks:
        print(f"cad views: {args.tasks}: no cad task (a JSONL file of records with \"domain\": \"cad\")",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with open_pool(size=2) as pool:
        print(write_gallery(pool, tasks, args.agent or ["oracle"], args.out))
    return 0
