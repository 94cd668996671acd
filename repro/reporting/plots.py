"""What repro's HTML charts share: plotly figures embedded in one self-contained page.

Plotly (plotly.py, MIT, plotly.js bundled in the wheel) rather than Vega-Lite rendered to SVG: the
people reading a report zoom into a stall and hover a round to read its numbers, and only a chart
that runs in the page does that; plotly.js is one inline <script> (about 4.8 MB, written once per
page) that needs no network, no CDN and no build step, and draws a responsive SVG.

One look for every chart: the legend above the plot (it never covers a line), axes titled with
their unit, ticks that plotly picks as round numbers, hover values rounded to what they mean.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

# Every chart: drawn at the width of its box (which follows the window), no plotly logo (a link to
# an outside site), no box or lasso select (they select nothing here), the PNG button kept (for
# the incident ticket).
CONFIG = {"responsive": True, "displaylogo": False,
          "modeBarButtonsToRemove": ["select2d", "lasso2d"]}

COLORS = {
    "completed": "#4caf50", "failed": "#e53935", "stalled": "#fb8c00", "running": "#90a4ae",
    "first byte": "#1e88e5", "no progress": "#b71c1c", "verdict": "#4a148c",
    "gauge running": "#2e7d32", "gauge queued": "#ef6c00", "gauge in flight": "#1565c0", "gauge held": "#b71c1c",
    "canary ok": "#43a047", "canary failed": "#e53935", "outage": "rgba(229,115,115,0.35)",
}
DEPLOYMENT_COLORS = ("#1e88e5", "#e53935", "#43a047", "#8e24aa")


def plotly_script() -> str:
    """plotly.js inline, once per page: the page draws with no network."""
    return f'<script type="text/javascript">{get_plotlyjs()}</script>'


def hover(*lines: object) -> str:
    """Lines of a hover label: plotly reads a label as HTML (<br> breaks a line), so a log's text (an
    error such as "<errno 111>") is escaped to show as written."""
    return "<br>".join(html.escape(str(line), quote=False) for line in lines)


def base_layout(*, height: int, title: str | None = None, **extra: Any) -> dict[str, Any]:
    """The layout every chart starts from: no fixed width (the box's), the legend in a row above
    the plot area, room for it, plain white."""
    layout: dict[str, Any] = {
        "height": height, "autosize": True, "template": "plotly_white",
        "margin": {"l": 64, "r": 44, "t": 72 if title else 40, "b": 56},
        # The zoom buttons down the right edge, in the margin kept for them: along the top they
        # would sit on the legend's last entries.
        "modebar": {"orientation": "v"},
        "legend": {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.0, "yanchor": "bottom"},
        "hoverlabel": {"namelength": -1}, "font": {"family": "system-ui, sans-serif", "size": 12},
    }
    if title:
        layout["title"] = {"text": title, "x": 0, "xanchor": "left", "y": 0.98, "yanchor": "top",
                           "font": {"size": 14}, "pad": {"b": 30}}
        layout["legend"]["y"] = 1.02
    layout.update(extra)
    return layout


def figure_div(figure: go.Figure, div_id: str) -> str:
    """A figure as a <div> and the script that draws it (plotly.js itself comes once, in the head)."""
    return figure.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=CONFIG,
                          default_width="100%", default_height=f"{figure.layout.height or 400}px")


def steps(points: Sequence[tuple[float, float | None]], limit: int) -> tuple[list[float], list[float | None]]:
    """A gauge's samples for a step line (line_shape "hv": a value holds until the next sample),
    at most about `limit` points.

    First lossless: only the samples where the value changes are kept (and the last, so the line
    reaches it); a None (a gap: the gauge not read) is kept as the break it is. If still over the
    limit, the time is cut into limit/2 buckets and each keeps its lowest and its highest sample, in
    time order: a spike or a drop to 0 stays visible however long the run."""
    kept: list[tuple[float, float | None]] = []
    for index, (t, value) in enumerate(points):
        if not kept or value != kept[-1][1] or index == len(points) - 1:
            kept.append((t, value))
    if len(kept) > limit and kept:
        start, end = kept[0][0], kept[-1][0]
        buckets = max(1, limit // 2)
        width = (end - start) / buckets or 1.0
        grouped: dict[int, list[tuple[float, float | None]]] = {}
        for point in kept:
            grouped.setdefault(min(buckets - 1, int((point[0] - start) / width)), []).append(point)
        thinned: list[tuple[float, float | None]] = []
        for bucket in sorted(grouped):
            group = grouped[bucket]
            if any(value is None for _, value in group):  # a gap in the bucket: keep the break itself
                thinned.append(next(p for p in group if p[1] is None))
            read = [p for p in group if p[1] is not None]
            if read:
                chosen = {min(read, key=lambda p: p[1]), max(read, key=lambda p: p[1])}
                thinned.extend(sorted(chosen))
        thinned.sort(key=lambda p: p[0])
        kept = thinned
    return [t for t, _ in kept], [value for _, value in kept]


def level_axis(levels: Iterable[int]) -> dict[str, Any]:
    """An x axis of concurrency levels: each swept level a tick; logarithmic where they double (2, 4,
    8 ... spread evenly), linear otherwise."""
    found = sorted(set(levels))
    axis: dict[str, Any] = {"title": {"text": "concurrency (conversations in flight)"}, "tickmode": "array",
                            "tickvals": found, "ticktext": [str(level) for level in found]}
    if found and found[0] > 0 and found[-1] / found[0] >= 8:
        axis["type"] = "log"
        axis["range"] = padded_log_range(found)
    else:
        spread = (found[-1] - found[0]) if len(found) > 1 else max(1, found[0] if found else 1)
        pad = spread * 0.08 or 1
        axis["range"] = [found[0] - pad, found[-1] + pad] if found else None
    return axis


def padded_log_range(values: Sequence[float]) -> list[float] | None:
    """A log axis range (in log10 units, as plotly takes it) with a margin, so end points are not cut."""
    positive = [v for v in values if v > 0]
    if not positive:
        return None
    low, high = math.log10(min(positive)), math.log10(max(positive))
    pad = max(0.05, (high - low) * 0.08)
    return [low - pad, high + pad]
