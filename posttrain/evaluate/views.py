"""Pictures of evaluated answers beside the gold, for the report: ``RUN/views/<stage>/``.

A domain whose answers people judge by eye (``posttrain.envs.HasViews``: cad, OpenSCAD renders)
draws, after an evaluation, the answers of its first ``VIEWS_PER_STAGE`` tasks: per task the last
attempt of its first sample (what the episode ended with), the response a verifier graded (a
workspace episode's kept ``submission``, else the completion), beside the task's gold, in the
sandbox (the response is model output). ``index.json`` lists them with their verdicts; the report's
"Renders" panel (``VIEWS_PANEL``) shows every stage's, images inline.

Pictures are never part of a verdict, and one that cannot be drawn is a line in the index, never a
failed evaluation.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from posttrain.evaluate._svg import as_text
from posttrain.evaluate.records import EvalRecord
from posttrain.evaluate.report import Panel, RunData
from posttrain.types import Task

__all__ = ["VIEWS_PANEL", "VIEWS_PER_STAGE", "answers_to_draw", "write_views"]

VIEWS_PER_STAGE = 4
"""Tasks drawn per evaluated stage and domain (each costs a few sandboxed renders)."""


def answers_to_draw(records: Sequence[EvalRecord], limit: int = VIEWS_PER_STAGE) -> list[EvalRecord]:
    """Per task (in record order, at most ``limit`` tasks a domain), the last attempt of sample 0.

    >>> recs = [EvalRecord("a", "cad", "fail", 0.0, attempt=0), EvalRecord("a", "cad", "pass", 1.0, attempt=1),
    ...         EvalRecord("b", "cad", "fail", 0.0, sample_idx=1), EvalRecord("c", "cad", "pass", 1.0)]
    >>> [(r.task_id, r.attempt) for r in answers_to_draw(recs, limit=2)]
    [('a', 1), ('c', 0)]
    """
    last: dict[tuple[str, str], EvalRecord] = {}
    for r in records:
        if r.sample_idx != 0:
            continue
        key = (r.domain, r.task_id)
        if key in last or sum(d == r.domain for d, _ in last) < limit:
            if key not in last or r.attempt >= last[key].attempt:
                last[key] = r
    return list(last.values())


def _response(record: EvalRecord) -> str:
    kept = record.extra.get("submission")
    return kept if isinstance(kept, str) else record.completion


def write_views(records: Sequence[EvalRecord], tasks: Sequence[Task], pool: Any, out_dir: Path,
                *, limit: int = VIEWS_PER_STAGE) -> Path | None:
    """Draw the records' answers (``answers_to_draw``) of every domain that draws (``HasViews``) into
    ``out_dir`` and list them in ``out_dir/index.json``; None (nothing written) when no domain draws
    or there is no sandbox."""
    from posttrain.envs import HasViews, get_domain

    if pool is None:
        return None
    by_id = {t.id: t for t in tasks}
    entries: list[dict[str, Any]] = []
    for record in answers_to_draw([r for r in records if r.task_id in by_id], limit):
        domain = get_domain(record.domain)
        if not isinstance(domain, HasViews):
            continue
        entry: dict[str, Any] = {"task_id": record.task_id, "domain": record.domain, "outcome": record.outcome,
                                 "error_class": record.error_class, "attempt": record.attempt}
        try:
            drawn: Mapping[str, Path | None] = domain.render_views(pool, by_id[record.task_id], _response(record), out_dir)
            entry.update({k: (p.name if p is not None else None) for k, p in drawn.items()})
        except Exception as e:  # noqa: BLE001 - a picture is never worth a failed evaluation
            entry["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        entries.append(entry)
    if not entries:
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    index = out_dir / "index.json"
    index.write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")
    return index


def _image(path: Path) -> str:
    if not path.is_file():
        return '<span class="muted">(none)</span>'
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{as_text(path.name)}" width="192" src="data:image/png;base64,{data}">'


def _own_file(name: Any) -> bool:
    """Whether an index entry names a file of its own stage's folder (never ``../..``, never a path)."""
    return isinstance(name, str) and name not in ("", ".", "..") and Path(name).name == name


def _stage_table(stage_dir: Path) -> str:
    try:
        entries = json.loads((stage_dir / "index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f'<p class="muted">{as_text(stage_dir.name)}: unreadable index.json</p>'
    rows = []
    for e in entries if isinstance(entries, list) else []:
        if not isinstance(e, dict):
            continue
        verdict = str(e.get("outcome", "?")) + (f" ({e['error_class']})" if e.get("error_class") else "")
        cells = [_image(stage_dir / e[k]) if _own_file(e.get(k)) else '<span class="muted">(none)</span>'
                 for k in ("gold", "candidate")]
        note = f'<br><span class="muted">{as_text(str(e["error"]))}</span>' if e.get("error") else ""
        rows.append(f"<tr><td>{as_text(str(e.get('task_id', '?')))}<br>attempt {as_text(str(e.get('attempt', 0)))}</td>"
                    f"<td>{as_text(verdict)}{note}</td><td>{cells[0]}</td><td>{cells[1]}</td></tr>")
    head = "<tr><th>task</th><th>verdict</th><th>gold</th><th>answer</th></tr>"
    return f"<h3>{as_text(stage_dir.name)}</h3><table>{head}{''.join(rows)}</table>"


def _views_panel(runs: Sequence[RunData]) -> str:
    parts = []
    for run in runs:
        stages = sorted(p.parent for p in (run.run_dir / "views").glob("*/index.json"))
        if stages:
            label = f"<h3>{as_text(run.label)}</h3>" if len(runs) > 1 else ""
            parts.append(label + "".join(_stage_table(s) for s in stages))
    return "".join(parts)


VIEWS_PANEL = Panel("Renders", _views_panel, 45)
"""The report's pictures of answers beside the gold (``RUN/views/<stage>/index.json``); nothing when none."""
