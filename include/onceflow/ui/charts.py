"""The Ledger view's charts: SVG drawn on the server, no JavaScript (the page stays one
request, readable where scripts are blocked).

Each chart is a few lines over the newest committed batches (views.history), x the seq:
records per second (records read over the seconds since the previous commit), the lag each
batch was planned at, and each phase's seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onceflow.ui.html import e

WIDTH, HEIGHT = 400, 150
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 52, 8, 22, 24

Point = tuple[float, float]
MARKED_UP_TO = 60  # points drawn as dots too, up to this many per line


def _short(v: float) -> str:
    """A value on an axis: 1.2k, 3.4M."""
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= div:
            return f"{v / div:.3g}{unit}"
    return f"{v:.3g}"


def line_chart(title: str, unit: str, series: Sequence[tuple[str, Sequence[Point]]]) -> str:
    """An SVG line chart of `series` (name, (x, y) points) with its title, y from 0 to the
    highest value, x from the first to the last point; a chart without points says so."""
    series = [(name, [(float(x), float(y)) for x, y in pts]) for name, pts in series]
    points = [pt for _, pts in series for pt in pts]
    head = (
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg"><title>{e(title)}</title>'
        f'<text class="chart-title" x="{PAD_LEFT}" y="14">{e(title)} ({e(unit)})</text>'
    )
    if not points:
        return (
            head + f'<text class="muted" x="{PAD_LEFT}" y="{HEIGHT / 2}">no data yet</text></svg>'
        )
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    top = max(p[1] for p in points) or 1.0
    inner_w, inner_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM

    def sx(x: float) -> float:
        return PAD_LEFT + (0.5 if x1 == x0 else (x - x0) / (x1 - x0)) * inner_w

    def sy(y: float) -> float:
        return PAD_TOP + inner_h * (1 - y / top)

    bottom = PAD_TOP + inner_h
    parts = [
        head,
        f'<line class="axis" x1="{PAD_LEFT}" y1="{bottom}" x2="{WIDTH - PAD_RIGHT}" y2="{bottom}"/>',
        f'<line class="axis" x1="{PAD_LEFT}" y1="{PAD_TOP}" x2="{PAD_LEFT}" y2="{bottom}"/>',
        f'<text class="tick" x="{PAD_LEFT - 4}" y="{PAD_TOP + 4}" text-anchor="end">'
        f"{_short(top)}</text>",
        f'<text class="tick" x="{PAD_LEFT - 4}" y="{bottom}" text-anchor="end">0</text>',
        f'<text class="tick" x="{PAD_LEFT}" y="{HEIGHT - 6}">seq {x0:.0f}</text>',
        f'<text class="tick" x="{WIDTH - PAD_RIGHT}" y="{HEIGHT - 6}" text-anchor="end">'
        f"seq {x1:.0f}</text>",
    ]
    for i, (name, pts) in enumerate(series):
        if not pts:
            continue
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        parts.append(
            f'<polyline class="series s{i}" data-series="{e(name)}" data-points="{len(pts)}" '
            f'fill="none" points="{path}"/>'
        )
        if len(pts) <= MARKED_UP_TO:  # few points: each one shown, a lone one too
            parts += [
                f'<circle class="s{i}" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2"/>' for x, y in pts
            ]
        if len(series) > 1:  # a legend when there is more than one line
            lx = PAD_LEFT + 8 + i * 90
            parts.append(f'<text class="legend s{i}" x="{lx}" y="{PAD_TOP + 10}">{e(name)}</text>')
    return "".join(parts) + "</svg>"


def history_charts(history: Sequence[dict[str, Any]]) -> str:
    """The three charts of a pipeline's newest committed batches (views.history)."""
    rate = [
        (b["seq"], (b["records_read"] or 0) / b["since_previous"])
        for b in history
        if b["since_previous"]
    ]
    lag = [(b["seq"], b["lag_at_plan"]) for b in history if b["lag_at_plan"] is not None]
    phases = [
        (name, [(b["seq"], b[key]) for b in history if b[key] is not None])
        for name, key in (
            ("plan", "plan_seconds"),
            ("process", "process_seconds"),
            ("commit", "commit_seconds"),
        )
    ]
    return (
        '<div class="charts">'
        + line_chart("records per second", "records/s", [("records/s", rate)])
        + line_chart("lag at plan", "records", [("lag", lag)])
        + line_chart("phase durations", "s", phases)
        + "</div>"
    )
