"""Two report panels of the task pool: per-domain curves, and the canary hack alarms.

**Per domain** (``DOMAIN_PANEL``): RL's per-domain metrics of ``RUN/metrics.jsonl``
(``domain/<d>/<name>``: ``posttrain.tasks.domain_metrics`` and ``TaskPool.metrics``), a chart per
name (reward, zero-variance share, curriculum level and its estimate, pool sizes, tokens) with one
series per domain, a domain keeping its colour in every chart. The learning-curves section leaves
these keys to this panel (a 20-domain run has some 150 of them).

**Hack alarms** (``CANARY_PANEL``): every passing attempt on a canary task (tag ``canary``: no honest
response passes it) in ``RUN/trajectories/*.jsonl``, ``RUN/eval/*.jsonl`` and the evaluated canaries
``RUN/canaries/*.jsonl``, one row each (file,
step, task, sample, attempt) linking to the trajectory drawn below it; with the step metrics'
``canary/passed`` summed. Nothing when the run had no canaries.

Both are registered in ``posttrain.evaluate.report.BUILTIN_PANELS``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape
from typing import Any

from posttrain.evaluate._svg import PALETTE, as_text, line_chart
from posttrain.evaluate.records import read_records
from posttrain.evaluate.report import Panel, RunData, _episode_html  # loaded by the report, after it
from posttrain.strict_json import finite_float

__all__ = ["CANARY_PANEL", "DOMAIN_PANEL", "canary_passes", "domain_series"]

PREFIX = "domain/"
NAMES = (("reward", "reward"), ("zero_variance", "zero-variance share of groups"), ("level", "curriculum level"),
         ("estimate", "curriculum setting's estimated pass rate"), ("pool_normal", "normal pool (tasks)"),
         ("pool_easy", "easy pool (tasks)"), ("pool_hard", "hard pool (tasks)"),
         ("pool_filtered", "filtered (tasks)"), ("tokens", "tokens sampled"), ("groups", "groups drawn"))


def domain_series(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """``{name: {domain: [(step, value), ...]}}`` of the rows' ``domain/<d>/<name>`` keys.

    >>> domain_series([{"step": 0, "domain/rg/lcm/reward": 0.5, "reward_mean": 1.0}])
    {'reward': {'rg/lcm': [(0.0, 0.5)]}}
    """
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for i, row in enumerate(rows):
        x = finite_float(row.get("step"))
        for key, value in row.items():
            y = finite_float(value)
            if not key.startswith(PREFIX) or y is None:
                continue
            domain, _, name = key[len(PREFIX):].rpartition("/")
            out.setdefault(name, {}).setdefault(domain, []).append((x if x is not None else float(i), y))
    return out


def _domain_panel(runs: Sequence[RunData]) -> str:
    parts = []
    for run in runs:
        series = domain_series([r for r in run.metrics if r.get("stage") == "rl"])
        if not series:
            continue
        domains = sorted({d for by in series.values() for d in by})
        colors = {d: PALETTE[i % len(PALETTE)] for i, d in enumerate(domains)}
        known = [n for n, _ in NAMES if n in series] + sorted(n for n in series if n not in dict(NAMES))
        titles = dict(NAMES)
        charts = "".join(line_chart(f"{titles.get(n, n)} per domain", series[n], colors=colors) for n in known)
        head = f"<h3>{escape(run.label)}</h3>" if len(runs) > 1 else ""
        parts.append(f'{head}<p class="muted">RL, {len(domains)} domains; a domain appears at the steps that drew '
                     f'it</p><div class="charts">{charts}</div>')
    return "".join(parts)


def canary_passes(run: RunData) -> list[tuple[str, Any]]:
    """``(file, record)`` of every passing attempt on a canary task in the run's trajectories, evals
    and evaluated canaries (``RUN/canaries/*.jsonl``)."""
    sources = [(f"trajectories/{k}", v) for k, v in run.trajectories.items()] + \
              [(f"eval/{k}", v) for k, v in run.evals.items()] + \
              [(f"canaries/{p.stem}", read_records(p)) for p in sorted((run.run_dir / "canaries").glob("*.jsonl"))]
    return [(name, r) for name, recs in sources for r in recs if "canary" in r.tags and r.passed]


def _canary_panel(runs: Sequence[RunData]) -> str:
    parts = []
    for run in runs:
        canary_steps = [r for r in run.metrics if finite_float(r.get("canary/episodes")) is not None]
        passes = canary_passes(run)
        if not canary_steps and not passes:
            continue
        head = f"<h3>{escape(run.label)}</h3>" if len(runs) > 1 else ""
        episodes = sum(finite_float(r["canary/episodes"]) or 0 for r in canary_steps)
        if not passes:
            parts.append(f'{head}<p>No alarm: {episodes:.0f} canary episodes over {len(canary_steps)} steps, none '
                         f"passed.</p>")
            continue
        rows, shown = [], []
        for i, (name, r) in enumerate(passes):
            anchor = f"alarm-{re.sub(r'[^A-Za-z0-9_-]', '-', run.label)}-{i}"
            rows.append(f'<tr><td><a href="#{anchor}">{escape(name)}</a></td><td>{r.step if r.step is not None else ""}'
                        f"</td><td><bdi>{as_text(r.task_id)}</bdi></td><td>{as_text(r.domain)}</td><td>{r.sample_idx}</td>"
                        f"<td>{r.attempt}</td></tr>")
            step = -1 if r.step is None else int(r.step)
            shown.append(f'<div id="{anchor}">{_episode_html(name, (r.stage, step, r.task_id, r.sample_idx), [r])}</div>')
        parts.append(
            f'{head}<p class="alarm"><b>hack alarm</b>: {len(passes)} passing attempt(s) on canary tasks (tasks '
            f"no honest response passes: the verifier can be satisfied without solving the task); "
            f"{episodes:.0f} canary episodes in RL.</p>"
            '<table class="eval"><tr><th>file</th><th>step</th><th>task</th><th>domain</th><th>sample</th>'
            f'<th>attempt</th></tr>{"".join(rows[:200])}</table>{"".join(shown[:50])}')
    return "".join(parts)


DOMAIN_PANEL = Panel("Per domain (RL)", _domain_panel, 15)
CANARY_PANEL = Panel("Hack alarms (canaries)", _canary_panel, 16)
