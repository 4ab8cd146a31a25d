"""Inline SVG charts for the HTML report: a line chart and a bar chart with error bars.

Plain strings, no plotting library, so the page stays self-contained. Axis ticks are "nice" numbers
(1, 2, 2.5 or 5 times a power of ten) inside the data's range, integers only on an integer axis (a
2-step run is ticked 0, 1, never 0 0 0 1 1). A line chart carries its data for the page's script:
the frame on the ``<svg>`` (``data-frame``: x0 x1 y0 y1 and the plot box) and each series' points on
its ``<polyline>`` (``data-name``, ``data-xy``), which the script reads for hover values and redraws
for smoothing. The legend is HTML under the chart (``<figcaption class="legend">``), so labels wrap
instead of overlapping. Not a general plotting API: only what report.py draws.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from html import escape

from posttrain.shown import visible

__all__ = ["line_chart", "bar_chart", "nice_ticks", "tick_labels", "as_text"]


def as_text(value: object, *, limit: int | None = 200, multiline: bool = False) -> str:
    """``value`` (model or task-file text) as HTML text that shows as itself: markup escaped (quotes
    too, so it may sit in an attribute), and each character that would not show -- controls (NUL, ESC),
    bidi overrides and isolates, zero-width characters, lone surrogates -- written as its escape
    (``\\u202e``), so two ids differing only there read apart and none turns its line around; tabs and
    line breaks too unless ``multiline``. Past ``limit`` characters (None: no limit) it is cut, saying
    how much more there was. Covered: what the text shows; not covered: what it says.

    >>> print(as_text('<b x="1">task\\u200b-1\\u202e</b>'))
    &lt;b x=&quot;1&quot;&gt;task\\u200b-1\\u202e&lt;/b&gt;
    >>> print(as_text("a\\nb: 1.0"), as_text("x" * 9, limit=4))
    a\\x0ab: 1.0 xxxx… (5 more chars)
    """
    text = str(value)
    if limit is not None and len(text) > limit:
        text = f"{text[:limit]}… ({len(text) - limit} more chars)"
    return escape(visible(text, breaks=multiline))


PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22")
W, H = 400, 220
PAD_L, PAD_R, PAD_T, PAD_B = 52, 12, 26, 30


def tick_labels(ticks: Sequence[float]) -> list[str]:
    """Labels for ``ticks`` with as many decimals as their step needs, so neighbours never read the same.

    >>> tick_labels([0.99998, 1.0, 1.00002]), tick_labels([0, 2.5, 5]), tick_labels([0, 500000, 1000000])
    (['0.99998', '1.00000', '1.00002'], ['0.0', '2.5', '5.0'], ['0', '5e+05', '1e+06'])
    """
    if not ticks:
        return []
    step = min((b - a for a, b in zip(ticks, ticks[1:], strict=False)), default=0.0) or abs(ticks[0]) or 1.0
    if max(abs(t) for t in ticks) >= 1e5 and step >= 1:
        return [f"{t:.3g}" if t else "0" for t in ticks]
    decimals = max(0, -math.floor(math.log10(step)))
    while decimals < 12 and abs(round(step, decimals) - step) > step * 1e-9:
        decimals += 1
    return [f"{t:.{decimals}f}" for t in ticks]


def nice_ticks(lo: float, hi: float, *, most: int = 6, integer: bool = False) -> list[float]:
    """Tick values inside [lo, hi]: multiples of a nice step (1, 2, 2.5, 5 x 10^k), at most ``most`` of
    them; on an ``integer`` axis the step is a whole number, so no label repeats.

    >>> nice_ticks(0, 1, integer=True)
    [0.0, 1.0]
    >>> nice_ticks(0, 1499, integer=True)
    [0.0, 500.0, 1000.0]
    >>> nice_ticks(0.1, 0.33)
    [0.1, 0.15, 0.2, 0.25, 0.3]
    """
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo:
        return []
    if hi == lo:
        return [float(lo)] if not integer or lo == int(lo) else []
    raw = (hi - lo) / max(most - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 2.5, 5, 10):
        step = mult * power
        if integer and step < 1:
            continue
        if integer and step != int(step):
            continue
        if (hi - lo) / step <= most - 1 + 1e-9:
            break
    first = math.ceil(lo / step - 1e-9)
    ticks = []
    k = first
    while k * step <= hi + 1e-9 * step:
        ticks.append(round(k * step, 12))
        k += 1
    return [float(t) for t in ticks]


def _y_range(lo: float, hi: float) -> tuple[float, float]:
    if lo == hi:
        pad = abs(lo) * 0.1 or 1.0
        return lo - pad, hi + pad
    pad = (hi - lo) * 0.06
    return lo - pad, hi + pad


def _svg(title: str, body: list[str], extra: str = "") -> str:
    return (f'<svg class="chart" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
            f'aria-label="{as_text(title)}"{extra}>{"".join(body)}</svg>')


def line_chart(title: str, series: Mapping[str, Sequence[tuple[float, float]]], *, x_label: str = "step",
               colors: Mapping[str, str] | None = None) -> str:
    """One line chart with its legend (a ``<figure>``); ``series`` maps a legend name to (x, y) points.
    NaN/inf points are not drawn, and the legend says how many a series lost (a run whose reward went NaN
    does not read as a clean line); "" when nothing is left. ``colors`` fixes a series' colour (the same
    run or domain keeps its colour across charts)."""
    clean = {name: sorted((float(x), float(y)) for x, y in pts if math.isfinite(x) and math.isfinite(y))
             for name, pts in series.items()}
    lost = {name: len(pts) - len(clean[name]) for name, pts in series.items()}
    clean = {k: v for k, v in clean.items() if v}
    if not clean:
        return ""
    xs = [x for pts in clean.values() for x, _ in pts]
    ys = [y for pts in clean.values() for _, y in pts]
    integer = all(x == int(x) for x in xs)
    x0, x1 = (min(xs), max(xs)) if min(xs) != max(xs) else (min(xs) - 0.5, max(xs) + 0.5)
    y0, y1 = _y_range(min(ys), max(ys))
    box = (PAD_L, PAD_T, W - PAD_R, H - PAD_B)

    def sx(x: float) -> float:
        return box[0] + (x - x0) / (x1 - x0) * (box[2] - box[0])

    def sy(y: float) -> float:
        return box[3] - (y - y0) / (y1 - y0) * (box[3] - box[1])

    parts = [f'<text x="{W / 2}" y="16" text-anchor="middle" class="ct">{as_text(title)}</text>',
             f'<line x1="{box[0]}" y1="{box[3]}" x2="{box[2]}" y2="{box[3]}" class="ax"/>',
             f'<line x1="{box[0]}" y1="{box[1]}" x2="{box[0]}" y2="{box[3]}" class="ax"/>']
    y_ticks = nice_ticks(y0, y1, most=5)
    for t, label in zip(y_ticks, tick_labels(y_ticks), strict=True):
        parts.append(f'<line x1="{box[0]}" y1="{sy(t):.1f}" x2="{box[2]}" y2="{sy(t):.1f}" class="grid"/>'
                     f'<text x="{box[0] - 4}" y="{sy(t) + 4:.1f}" text-anchor="end" class="tk">{label}</text>')
    x_ticks = nice_ticks(x0, x1, most=6, integer=integer)
    for t, label in zip(x_ticks, [str(int(t)) for t in x_ticks] if integer else tick_labels(x_ticks), strict=True):
        parts.append(f'<line x1="{sx(t):.1f}" y1="{box[3]}" x2="{sx(t):.1f}" y2="{box[3] + 3}" class="ax"/>'
                     f'<text x="{sx(t):.1f}" y="{box[3] + 14}" text-anchor="middle" class="tk xt">{label}</text>')
    parts.append(f'<text x="{box[2]}" y="{H - 4}" text-anchor="end" class="tk">{as_text(x_label)}</text>')
    legend = []
    for i, (name, pts) in enumerate(clean.items()):
        color = (colors or {}).get(name) or PALETTE[i % len(PALETTE)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        data = escape(json.dumps([[x, y] for x, y in pts], separators=(",", ":")))
        parts.append(f'<polyline class="series" fill="none" stroke="{color}" stroke-width="1.8" points="{path}" '
                     f'data-name="{as_text(name)}" data-xy="{data}"/>')
        if len(pts) == 1:
            parts.append(f'<circle cx="{sx(pts[0][0]):.1f}" cy="{sy(pts[0][1]):.1f}" r="3" fill="{color}"/>')
        note = f' <b class="lost">({lost[name]} NaN/inf not drawn)</b>' if lost[name] else ""
        legend.append(f'<span><i style="background:{color}"></i>{as_text(name)}{note}</span>')
    legend += [f'<span><i></i>{as_text(name)} <b class="lost">(all {n} NaN/inf, not drawn)</b></span>'
               for name, n in lost.items() if n and name not in clean]
    parts.append(f'<line class="guide" x1="0" y1="{box[1]}" x2="0" y2="{box[3]}" visibility="hidden"/>')
    frame = f' data-frame="{x0} {x1} {y0} {y1} {box[0]} {box[1]} {box[2]} {box[3]}"'
    return (f'<figure class="chart-box">{_svg(title, parts, frame)}'
            f'<figcaption class="legend">{"".join(legend)}</figcaption></figure>')


def bar_chart(
    title: str,
    bars: Sequence[tuple[str, float, tuple[float, float] | None]],
    *,
    y_max: float | None = None,
) -> str:
    """One SVG bar chart; each bar is (label, value, optional (lo, hi) interval drawn as an error bar).
    Each bar's ``<title>`` is its hover value."""
    if not bars:
        return ""
    top = y_max if y_max is not None else max(max(v, (ci or (v, v))[1]) for _, v, ci in bars) or 1.0
    integer = y_max is None and all(v == int(v) for _, v, _ in bars)

    def sy(y: float) -> float:
        return H - PAD_B - y / top * (H - PAD_T - PAD_B)

    parts = [
        f'<text x="{W / 2}" y="16" text-anchor="middle" class="ct">{as_text(title)}</text>',
        f'<line x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - PAD_R}" y2="{H - PAD_B}" class="ax"/>',
    ]
    ticks = nice_ticks(0.0, top, most=5, integer=integer)
    for t, label in zip(ticks, [str(int(t)) for t in ticks] if integer else tick_labels(ticks), strict=True):
        parts.append(f'<line x1="{PAD_L}" y1="{sy(t):.1f}" x2="{W - PAD_R}" y2="{sy(t):.1f}" class="grid"/>'
                     f'<text x="{PAD_L - 4}" y="{sy(t) + 4:.1f}" text-anchor="end" class="tk">{label}</text>')
    slot = (W - PAD_L - PAD_R) / len(bars)
    for i, (label, value, ci) in enumerate(bars):
        color = PALETTE[i % len(PALETTE)]
        x = PAD_L + i * slot + slot * 0.15
        bw = slot * 0.7
        hover = f"{label}: {value:.4g}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{sy(value):.1f}" width="{bw:.1f}" height="{max(sy(0) - sy(value), 0):.1f}" '
            f'fill="{color}"><title>{as_text(hover)}</title></rect>'
        )
        if ci is not None:
            cx = x + bw / 2
            parts.append(
                f'<line x1="{cx:.1f}" y1="{sy(ci[0]):.1f}" x2="{cx:.1f}" y2="{sy(ci[1]):.1f}" class="eb"/>'
                f'<line x1="{cx - 5:.1f}" y1="{sy(ci[0]):.1f}" x2="{cx + 5:.1f}" y2="{sy(ci[0]):.1f}" class="eb"/>'
                f'<line x1="{cx - 5:.1f}" y1="{sy(ci[1]):.1f}" x2="{cx + 5:.1f}" y2="{sy(ci[1]):.1f}" class="eb"/>'
            )
        parts.append(
            f'<text x="{x + bw / 2:.1f}" y="{H - PAD_B + 14}" text-anchor="middle" class="tk">{as_text(label if len(label) <= 14 else label[:13] + "…")}</text>'
        )
    return _svg(title, parts)
