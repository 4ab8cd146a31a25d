"""Inline SVG charts for the HTML report: a line chart and a bar chart with error bars.

Plain strings, no plotting library and no JavaScript, so the page stays self-contained and
renders the same everywhere. Not a general plotting API: only what report.py draws.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

__all__ = ["line_chart", "bar_chart"]

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
W, H = 400, 220
PAD_L, PAD_R, PAD_T, PAD_B = 52, 12, 26, 30


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1000:
        return f"{v:.3g}"
    if a >= 1:
        return f"{v:.3g}"
    return f"{v:.2g}"


def _range(lo: float, hi: float) -> tuple[float, float]:
    if lo == hi:
        pad = abs(lo) * 0.1 or 1.0
        return lo - pad, hi + pad
    pad = (hi - lo) * 0.05
    return lo - pad, hi + pad


def _axes(title: str, x0: float, x1: float, y0: float, y1: float, *, int_x: bool = False) -> list[str]:
    parts = [
        f'<text x="{W / 2}" y="16" text-anchor="middle" class="ct">{escape(title)}</text>',
        f'<line x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - PAD_R}" y2="{H - PAD_B}" class="ax"/>',
        f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{H - PAD_B}" class="ax"/>',
    ]
    for i in range(5):
        frac = i / 4
        y = H - PAD_B - frac * (H - PAD_T - PAD_B)
        parts.append(f'<line x1="{PAD_L}" y1="{y:.1f}" x2="{W - PAD_R}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{PAD_L - 4}" y="{y + 4:.1f}" text-anchor="end" class="tk">{_fmt(y0 + frac * (y1 - y0))}</text>')
    for i in range(5):
        frac = i / 4
        x = PAD_L + frac * (W - PAD_L - PAD_R)
        xv = x0 + frac * (x1 - x0)
        label = str(round(xv)) if int_x else _fmt(xv)
        parts.append(f'<text x="{x:.1f}" y="{H - PAD_B + 14}" text-anchor="middle" class="tk">{label}</text>')
    return parts


def line_chart(title: str, series: Mapping[str, Sequence[tuple[float, float]]], *, x_label: str = "step") -> str:
    """One SVG line chart; ``series`` maps a legend name to (x, y) points. NaN/inf points are skipped."""
    clean = {
        name: [(float(x), float(y)) for x, y in pts if math.isfinite(x) and math.isfinite(y)]
        for name, pts in series.items()
    }
    clean = {k: v for k, v in clean.items() if v}
    if not clean:
        return ""
    xs = [x for pts in clean.values() for x, _ in pts]
    ys = [y for pts in clean.values() for _, y in pts]
    x0, x1 = (min(xs), max(xs)) if min(xs) != max(xs) else (min(xs) - 1, max(xs) + 1)
    y0, y1 = _range(min(ys), max(ys))

    def sx(x: float) -> float:
        return PAD_L + (x - x0) / (x1 - x0) * (W - PAD_L - PAD_R)

    def sy(y: float) -> float:
        return H - PAD_B - (y - y0) / (y1 - y0) * (H - PAD_T - PAD_B)

    parts = _axes(title, x0, x1, y0, y1, int_x=all(x == int(x) for x in xs))
    parts.append(f'<text x="{W - PAD_R}" y="{H - 4}" text-anchor="end" class="tk">{escape(x_label)}</text>')
    for i, (name, pts) in enumerate(sorted(clean.items())):
        color = PALETTE[i % len(PALETTE)]
        pts = sorted(pts)
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.8" points="{path}"/>')
        if len(pts) == 1:
            parts.append(f'<circle cx="{sx(pts[0][0]):.1f}" cy="{sy(pts[0][1]):.1f}" r="3" fill="{color}"/>')
        parts.append(
            f'<text x="{PAD_L + 6 + 84 * i}" y="{PAD_T + 10}" fill="{color}" class="lg">{escape(name)}</text>'
        )
    body = "".join(parts)
    return f'<svg class="chart" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{escape(title)}">{body}</svg>'


def bar_chart(
    title: str,
    bars: Sequence[tuple[str, float, tuple[float, float] | None]],
    *,
    y_max: float | None = None,
) -> str:
    """One SVG bar chart; each bar is (label, value, optional (lo, hi) interval drawn as an error bar)."""
    if not bars:
        return ""
    top = y_max if y_max is not None else max(max(v, (ci or (v, v))[1]) for _, v, ci in bars) or 1.0
    y0, y1 = 0.0, top

    def sy(y: float) -> float:
        return H - PAD_B - (y - y0) / (y1 - y0) * (H - PAD_T - PAD_B)

    parts = [
        f'<text x="{W / 2}" y="16" text-anchor="middle" class="ct">{escape(title)}</text>',
        f'<line x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - PAD_R}" y2="{H - PAD_B}" class="ax"/>',
    ]
    for i in range(5):
        frac = i / 4
        y = H - PAD_B - frac * (H - PAD_T - PAD_B)
        parts.append(f'<line x1="{PAD_L}" y1="{y:.1f}" x2="{W - PAD_R}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{PAD_L - 4}" y="{y + 4:.1f}" text-anchor="end" class="tk">{_fmt(frac * top)}</text>')
    slot = (W - PAD_L - PAD_R) / len(bars)
    for i, (label, value, ci) in enumerate(bars):
        color = PALETTE[i % len(PALETTE)]
        x = PAD_L + i * slot + slot * 0.15
        bw = slot * 0.7
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{sy(value):.1f}" width="{bw:.1f}" height="{max(sy(0) - sy(value), 0):.1f}" '
            f'fill="{color}"><title>{escape(label)}: {value:.4g}</title></rect>'
        )
        if ci is not None:
            cx = x + bw / 2
            parts.append(
                f'<line x1="{cx:.1f}" y1="{sy(ci[0]):.1f}" x2="{cx:.1f}" y2="{sy(ci[1]):.1f}" class="eb"/>'
                f'<line x1="{cx - 5:.1f}" y1="{sy(ci[0]):.1f}" x2="{cx + 5:.1f}" y2="{sy(ci[0]):.1f}" class="eb"/>'
                f'<line x1="{cx - 5:.1f}" y1="{sy(ci[1]):.1f}" x2="{cx + 5:.1f}" y2="{sy(ci[1]):.1f}" class="eb"/>'
            )
        parts.append(
            f'<text x="{x + bw / 2:.1f}" y="{H - PAD_B + 14}" text-anchor="middle" class="tk">{escape(label[:14])}</text>'
        )
    body = "".join(parts)
    return f'<svg class="chart" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{escape(title)}">{body}</svg>'
