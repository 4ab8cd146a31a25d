"""The report's learning curves: each stage on its own axis, one series per run, flat panels folded.

``curves_html(runs)`` draws, for each stage in the order the runs logged them, a chart per metric of
``RUN/metrics.jsonl`` (the known ones first: reward, pass rate per domain, loss, KL, entropy, clip
fraction, tokens/s, zero-std groups; then up to ``_MAX_OTHER_CURVES`` others), with one series per
run when several are compared (a run keeps its colour in every chart). A chart whose every curve is
constant over the stage (KL without a reference, clip fraction on-policy) goes behind a toggle. The
smoothing slider above them drives ``_page.CHART_SCRIPT``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from posttrain.evaluate._svg import PALETTE, as_text, line_chart
from posttrain.strict_json import finite_float

if TYPE_CHECKING:
    from posttrain.evaluate.report import RunData

__all__ = ["curves_html"]

_CURVES = (
    ("reward", "reward_mean"),
    ("loss", "loss"),
    ("KL", "kl"),
    ("entropy", "entropy"),
    ("clip fraction", "clip_frac"),
    ("tokens / s", "tokens_per_s"),
    ("fraction of groups with zero reward std", "frac_zero_std"),
)
_SKIP_KEYS = {"stage", "step", "wall_s", "time", "timestamp"}
_MAX_OTHER_CURVES = 16


def _stage_of(row: dict[str, Any]) -> str:
    return str(row.get("stage") or "run")


def _number(value: Any) -> float | None:
    """A logged value as a float, NaN and inf kept (the chart says what it could not draw); None for
    what is no number."""
    return finite_float(value) if not isinstance(value, float) else value


def _series(rows: Sequence[dict[str, Any]], key: str) -> list[tuple[float, float]]:
    out = []
    for i, row in enumerate(rows):
        y = _number(row.get(key))
        if y is not None:
            x = finite_float(row.get("step"))
            out.append((x if x is not None else float(i), y))
    return out


def _flat(series: dict[str, list[tuple[float, float]]]) -> bool:
    """Whether every curve of a chart is constant over several steps: a panel with nothing to say."""
    return (all(len({y for _, y in pts if math.isfinite(y)}) == 1 for pts in series.values())
            and any(len(p) > 1 for p in series.values()))


Chart = tuple[str, dict[str, list[tuple[float, float]]], dict[str, str]]


def _stage_charts(rows: dict[str, list[dict[str, Any]]], colors: dict[str, str]) -> list[Chart]:
    """``(title, series, colours)`` of every chart of one stage; ``rows`` maps a run's label to its rows."""
    many = len(rows) > 1
    keys = [k for k in dict.fromkeys(k for rs in rows.values() for row in rs for k in row)
            if k not in _SKIP_KEYS and any(_number(row.get(k)) is not None for rs in rows.values() for row in rs)]
    known = {key for _, key in _CURVES}
    charts: list[Chart] = []
    for title, key in _CURVES:
        if key in keys:
            charts.append((title, {(label if many else key): _series(rs, key) for label, rs in rows.items()},
                           colors if many else {}))
    domains = sorted(k for k in keys if k.startswith("pass_rate/"))
    if domains:
        series = {(f"{d.split('/', 1)[1]} · {label}" if many else d.split("/", 1)[1]): _series(rs, d)
                  for d in domains for label, rs in rows.items()}
        charts.insert(1, ("pass rate per domain", series, {}))
    others = [k for k in keys if k not in known and not k.startswith(("pass_rate/", "domain/"))]  # domain/: its panel
    for key in others[:_MAX_OTHER_CURVES]:
        charts.append((key, {(label if many else key): _series(rs, key) for label, rs in rows.items()},
                       colors if many else {}))
    return [(t, {k: v for k, v in s.items() if v}, c) for t, s, c in charts if any(s.values())]


def _constants(series: dict[str, list[tuple[float, float]]]) -> str:
    """The constant of each curve of a flat panel: one number when there is one curve, else each named
    (one domain's 1 never reads as every domain's)."""
    values = {name: next(y for _, y in pts if math.isfinite(y)) for name, pts in series.items()}
    if len(values) == 1:
        return f"{next(iter(values.values())):.4g}"
    return "(" + ", ".join(f"{as_text(name)} {v:.4g}" for name, v in values.items()) + ")"


def _stage_curves(stage: str, runs: Sequence[RunData], colors: dict[str, str]) -> str:
    rows = {r.label: [row for row in r.metrics if _stage_of(row) == stage] for r in runs}
    live, flat, blank = [], [], []
    for title, series, fixed in _stage_charts(rows, colors):
        chart = line_chart(title, series, colors=fixed)
        if not chart:  # every value NaN/inf: said, not left out (a reward that is all NaN is news)
            blank.append(f"{as_text(title)} ({sum(map(len, series.values()))} NaN/inf)")
        else:
            (flat if _flat(series) else live).append((title, chart, series))
    steps = sorted({x for rs in rows.values() for row in rs if (x := finite_float(row.get("step"))) is not None})
    span = f"steps {int(steps[0]):,}-{int(steps[-1]):,}, " if steps else ""
    html = (f'<h3>stage {as_text(stage)} <span class="muted">({span}{sum(len(rs) for rs in rows.values()):,} '
            f'rows)</span></h3>')
    if blank:
        html += f'<p><b>not drawn, no finite value:</b> {", ".join(blank)}</p>'
    html += f'<div class="charts">{"".join(c for _, c, _ in live)}</div>'
    if flat:
        said = ", ".join(f"{as_text(title)} = {_constants(s)}" for title, _, s in flat)
        html += (f'<details class="flat"><summary>{len(flat)} panel(s) with nothing to say, constant over the stage: '
                 f'{said}</summary><div class="charts">{"".join(c for _, c, _ in flat)}</div></details>')
    return html


def curves_html(runs: Sequence[RunData]) -> str:
    """The learning-curves section of a report of ``runs`` (the module docstring)."""
    if not any(r.metrics for r in runs):
        return '<p class="muted">No RUN/metrics.jsonl yet.</p>'
    colors = {r.label: PALETTE[i % len(PALETTE)] for i, r in enumerate(runs)}
    stages = list(dict.fromkeys(_stage_of(row) for r in runs for row in r.metrics))
    control = ('<label class="ctl">smoothing <input type="range" id="smooth" min="0" max="0.95" step="0.05" '
               'value="0"> <output id="smooth-value">off</output></label> <span class="muted">hover a chart for its '
               "values; each stage has its own axis</span>")
    return control + "".join(_stage_curves(stage, runs, colors) for stage in stages)
