"""bench.html's charts as plotly figures, from bench.json's rows: throughput against concurrency with
its confidence interval, B against A with the interval of each level's difference, throughput
against TTFT p95 and against ITL p95 (the curve a capacity plan reads: what latency each rate
costs), and the latency quantiles against concurrency. One colour per deployment throughout.
"""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go

from repro.core.bench_stats import CONFIDENCE, t_quantile
from repro.core.text import number
from repro.reporting.plots import DEPLOYMENT_COLORS, base_layout, hover, level_axis

HEIGHT = 380
QUANTILE_DASH = {"p50": "solid", "p95": "dash", "p99": "dot"}


def throughput_ci(windows: list[dict[str, Any]], level: int, deployment: str) -> tuple[float, float] | None:
    """The 95% CI of a level's mean output tokens/s over its valid windows (Student's t: the windows
    are the independent draws; the sub-windows of one window share its conditions); None with fewer
    than 2 windows, where the spread between windows was not measured."""
    values = [w["output_tokens_per_s"] for w in windows
              if w.get("concurrency") == level and w.get("deployment") == deployment and not w.get("invalid")
              and w.get("output_tokens_per_s") is not None]
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = t_quantile(1 - (1 - CONFIDENCE) / 2, len(values) - 1) * sd / math.sqrt(len(values))
    return round(mean - half, 2), round(mean + half, 2)


def _by_deployment(per_level: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(per_level, key=lambda r: r["concurrency"]):
        found.setdefault(row["deployment"], []).append(row)
    return found


def _color(index: int) -> str:
    return DEPLOYMENT_COLORS[index % len(DEPLOYMENT_COLORS)]


def throughput_figure(per_level: list[dict[str, Any]], windows: list[dict[str, Any]]) -> go.Figure:
    figure = go.Figure()
    for index, (name, rows) in enumerate(_by_deployment(per_level).items()):
        cis = [throughput_ci(windows, r["concurrency"], name) for r in rows]
        y = [r["output_tokens_per_s"] for r in rows]
        labels = [hover(f"{name}, c={r['concurrency']}: {number(r['output_tokens_per_s'])} tokens/s"
                 + (f" (95% CI {number(ci[0])}..{number(ci[1])}, {r['windows']} windows)" if ci
                    else f" ({r['windows']} window: no CI)")) for r, ci in zip(rows, cis, strict=True)]
        figure.add_trace(go.Scatter(
            x=[r["concurrency"] for r in rows], y=y, mode="lines+markers", name=name,
            line={"color": _color(index), "width": 2}, marker={"size": 8},
            error_y={"type": "data", "symmetric": False, "visible": any(cis), "thickness": 1.5, "width": 6,
                     "array": [None if ci is None or v is None else ci[1] - v for ci, v in zip(cis, y, strict=True)],
                     "arrayminus": [None if ci is None or v is None else v - ci[0] for ci, v in zip(cis, y, strict=True)]},
            hovertext=labels, hoverinfo="text"))
    figure.update_layout(**base_layout(height=HEIGHT, title="Output throughput (bars: 95% CI over the windows)"))
    figure.update_xaxes(**level_axis(r["concurrency"] for r in per_level))
    figure.update_yaxes(title={"text": "output tokens/s"}, rangemode="tozero", tickformat=",~r")
    return figure


def delta_figure(levels: list[dict[str, Any]], noise_pct: float) -> go.Figure:
    """B vs A at each level, with its bootstrap CI as the error bar and the noise band shaded: a
    level is significant when its whole bar lies outside the band."""
    figure = go.Figure()

    def color(row: dict[str, Any]) -> str:
        if row.get("significant") is None:
            return "#9e9e9e"
        if row["significant"]:
            return "#2e7d32" if (row.get("delta_pct") or 0) > 0 else "#c62828"
        return "#546e7a"

    rows = [r for r in levels if r.get("delta_pct") is not None]
    figure.add_hrect(y0=-noise_pct, y1=noise_pct, fillcolor="#cfd8dc", opacity=0.5, line_width=0, layer="below")
    figure.add_hline(y=0, line={"color": "#78909c", "width": 1})
    figure.add_trace(go.Scatter(
        x=[r["concurrency"] for r in rows], y=[r["delta_pct"] for r in rows], mode="markers+lines", name="B vs A",
        line={"color": "#90a4ae", "width": 1, "dash": "dot"},
        marker={"size": 11, "color": [color(r) for r in rows], "symbol": "diamond"},
        error_y={"type": "data", "symmetric": False, "thickness": 2, "width": 8, "color": "#37474f",
                 "array": [None if r["ci_high_pct"] is None else r["ci_high_pct"] - r["delta_pct"] for r in rows],
                 "arrayminus": [None if r["ci_low_pct"] is None else r["delta_pct"] - r["ci_low_pct"] for r in rows]},
        hovertext=[hover(f"c={r['concurrency']}: {r['verdict']}") for r in rows], hoverinfo="text"))
    figure.update_layout(**base_layout(height=HEIGHT, showlegend=False,
                                       title=f"B vs A, output tokens/s (bars: 95% CI; band: noise ±{noise_pct:g}%)"))
    figure.update_xaxes(**level_axis(r["concurrency"] for r in levels))
    # The band and every bar whole in view, with a margin: a cut bar would hide where its CI ends.
    ends = [noise_pct, -noise_pct, 0.0] + [v for r in rows for v in (r["ci_low_pct"], r["ci_high_pct"], r["delta_pct"])
                                           if v is not None]
    pad = (max(ends) - min(ends)) * 0.1 or 1.0
    figure.update_yaxes(title={"text": "B vs A (%)"}, ticksuffix="%", tickformat="+~r", zeroline=False,
                        range=[min(ends) - pad, max(ends) + pad])
    return figure


def latency_figure(per_level: list[dict[str, Any]], key: str, title: str) -> go.Figure:
    """A latency's p50, p95 and p99 against concurrency: a colour per deployment, a dash per quantile."""
    figure = go.Figure()
    for index, (name, rows) in enumerate(_by_deployment(per_level).items()):
        for quantile, dash in QUANTILE_DASH.items():
            figure.add_trace(go.Scatter(
                x=[r["concurrency"] for r in rows], y=[r[key].get(quantile) for r in rows], mode="lines+markers",
                name=f"{name} {quantile}", line={"color": _color(index), "dash": dash, "width": 2},
                marker={"size": 6}, hovertemplate=f"{name} {quantile}, c=%{{x}}: %{{y:,.1f}} ms<extra></extra>"))
    figure.update_layout(**base_layout(height=HEIGHT, title=title))
    figure.update_xaxes(**level_axis(r["concurrency"] for r in per_level))
    figure.update_yaxes(title={"text": "ms"}, rangemode="tozero", tickformat=",~r")
    return figure


def throughput_latency_figure(per_level: list[dict[str, Any]], key: str, label: str) -> go.Figure:
    """Throughput against a latency's p95, a curve per deployment through its levels (labelled c=N):
    further right costs latency, higher gives tokens; B's curve above and left of A's is better."""
    figure = go.Figure()
    for index, (name, rows) in enumerate(_by_deployment(per_level).items()):
        known = [r for r in rows if r[key].get("p95") is not None and r["output_tokens_per_s"] is not None]
        figure.add_trace(go.Scatter(
            x=[r[key]["p95"] for r in known], y=[r["output_tokens_per_s"] for r in known], mode="lines+markers+text",
            name=name, text=[f"c={r['concurrency']}" for r in known], textposition="top left",
            textfont={"size": 10, "color": _color(index)}, line={"color": _color(index), "width": 2},
            marker={"size": 8}, hovertemplate=f"{name} %{{text}}: %{{y:,.0f}} tokens/s at {label} p95 "
                                              "%{x:,.1f} ms<extra></extra>"))
    figure.update_layout(**base_layout(height=HEIGHT, title=f"Output throughput against {label} p95"))
    figure.update_xaxes(title={"text": f"{label} p95 (ms)"}, tickformat=",~r")
    figure.update_yaxes(title={"text": "output tokens/s"}, rangemode="tozero", tickformat=",~r")
    return figure
