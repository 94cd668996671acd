"""report.html's timeline as a plotly figure: a lane per conversation with its rounds, then a panel
per hop with its gauges as steps, its canaries, and the spans its metrics page did not answer.

Bounded however long the run: at most MAX_LANES conversations get a lane; past MAX_BARS rounds,
runs of consecutive completed rounds on a lane are drawn as one bar each (every failed, stalled or
unfinished round keeps its own bar, first-byte mark and no-progress stripe); each gauge is thinned
by plots.steps to about MAX_GAUGE_POINTS points (change points first, which loses nothing for a
step line, then each time bucket's lowest and highest).
"""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from repro.core import events as ev
from repro.core.text import number
from repro.reporting.plots import COLORS, base_layout, hover, steps
from repro.reporting.rejudge import Outage, Rejudged, RoundSpan, outage_title, verdict_title

MAX_LANES = 80
MAX_BARS = 3000
MAX_GAUGE_POINTS = 1500
MAX_VERDICT_LINES = 40
# A dash per gauge but running: two gauges often read the same (0 running, 0 queued; in-flight and
# held alike), and a solid line would hide the other under it.
GAUGES = (("running", "running", "solid"), ("queued", "queued", "longdash"), ("in_flight", "in flight", "dash"),
          ("held", "held", "dot"))
LANE_PX, HOP_PX, GAP_PX = 22, 170, 64


def lane_name(conv: int) -> str:
    return f"conv {conv}"


def _round_text(span: RoundSpan) -> str:
    parts = [f"conv {span.conv} round {span.round}: {span.status}", f"started {number(span.start)} s"]
    if span.first_byte is not None:
        parts.append(f"first byte after {number(round((span.first_byte - span.start) * 1000))} ms")
    if span.end is not None:
        parts.append(f"ended {number(span.end)} s ({number(round(span.end - span.start, 3))} s)")
    if span.last_progress is not None:
        parts.append(f"no progress from {number(span.last_progress)} s")
    if span.error:
        parts.append(span.error)
    return hover(*parts)


def bars(rounds: list[RoundSpan], end_t: float, budget: int = MAX_BARS) -> list[dict[str, Any]]:
    """The bars the timeline draws: each round its own, or, past `budget` rounds, runs of up to k
    consecutive completed rounds of a lane as one bar (k the smallest that fits the budget)."""
    problem = [r for r in rounds if r.status != "completed"]
    completed = len(rounds) - len(problem)
    group = 1 if len(rounds) <= budget else max(1, math.ceil(completed / max(1, budget - len(problem))))
    found: list[dict[str, Any]] = []
    pending: list[RoundSpan] = []

    def flush() -> None:
        if not pending:
            return
        first, last = pending[0], pending[-1]
        if len(pending) == 1:
            found.append({"span": first, "status": "completed", "start": first.start, "end": first.end,
                          "text": _round_text(first)})
        else:
            found.append({"span": None, "status": "completed", "conv": first.conv, "start": first.start,
                          "end": last.end, "text": hover(f"conv {first.conv} rounds {first.round}-{last.round}: "
                                                         f"{len(pending)} rounds completed (merged: a long run)")})
        pending.clear()

    for span in sorted(rounds, key=lambda r: (r.conv, r.round)):
        if pending and (span.conv != pending[0].conv or span.status != "completed" or len(pending) >= group):
            flush()
        if span.status == "completed":
            pending.append(span)
            continue
        found.append({"span": span, "status": span.status, "start": span.start,
                      "end": span.end if span.end is not None else end_t, "text": _round_text(span)})
    flush()
    for bar in found:
        bar.setdefault("conv", bar["span"].conv if bar["span"] else None)
    return found


def _hop_samples(data: Rejudged, hop: str) -> list[ev.ProbeSample]:
    return [s for s in data.log.events if isinstance(s, ev.ProbeSample) and s.hop == hop]


def timeline_figure(data: Rejudged) -> go.Figure:
    end = max(data.end_t, 0.001)
    convs = sorted({r.conv for r in data.rounds})[:MAX_LANES]
    lanes = set(convs)
    lane_px = max(90, LANE_PX * len(convs) + 30)
    heights = [lane_px] + [HOP_PX] * len(data.hops)
    # The lanes need no title (each is named "conv N"), which leaves the legend above them the room.
    titles = [""] + [f"{hop.name} ({hop.role}): gauges and canaries" for hop in data.hops]
    total = sum(heights) + GAP_PX * len(heights) + 60
    figure = make_subplots(rows=len(heights), cols=1, shared_xaxes=True, row_heights=heights,
                           vertical_spacing=GAP_PX / total, subplot_titles=titles)
    figure.update_annotations(font={"size": 13}, xanchor="left", x=0)  # the panels' titles, left as text reads
    shown: set[str] = set()

    def legend(name: str) -> dict[str, Any]:
        first = name not in shown
        shown.add(name)
        return {"name": name, "legendgroup": name, "showlegend": first}

    # Rounds: one bar trace per status, so the legend names the colours and hides a kind at a click.
    drawn = [b for b in bars([r for r in data.rounds if r.conv in lanes], end)]
    for status in ("completed", "failed", "stalled", "running"):
        of = [b for b in drawn if b["status"] == status]
        if of:
            figure.add_trace(go.Bar(
                # A problem round a few pixels wide at least, however short beside the run.
                orientation="h", base=[b["start"] for b in of],
                x=[max(b["end"] - b["start"], end / (2000 if status == "completed" else 300)) for b in of],
                y=[lane_name(b["conv"]) for b in of], width=0.7, marker={"color": COLORS[status]}, opacity=0.8,
                hovertext=[b["text"] for b in of], hoverinfo="text", **legend(status)), row=1, col=1)
    single = [b["span"] for b in drawn if b["span"] is not None]
    bytes_ = [s for s in single if s.first_byte is not None]
    if bytes_:
        figure.add_trace(go.Scatter(
            x=[s.first_byte for s in bytes_], y=[lane_name(s.conv) for s in bytes_], mode="markers",
            marker={"symbol": "line-ns-open", "size": 14, "color": COLORS["first byte"], "line": {"width": 2}},
            hovertext=[hover(f"conv {s.conv} round {s.round}: first byte at {number(s.first_byte)} s") for s in bytes_],
            hoverinfo="text", **legend("first byte")), row=1, col=1)
    stuck = [s for s in single if s.last_progress is not None]
    if stuck:
        figure.add_trace(go.Bar(
            orientation="h", base=[s.last_progress for s in stuck],
            x=[max((s.end if s.end is not None else end) - s.last_progress, end / 500) for s in stuck],
            y=[lane_name(s.conv) for s in stuck], width=0.25, marker={"color": COLORS["no progress"]},
            hovertext=[hover(f"conv {s.conv} round {s.round}: no progress from {number(s.last_progress)} s")
                       for s in stuck],
            hoverinfo="text", **legend("no progress")), row=1, col=1)
    marks = [(v, t) for v, t in zip(data.verdicts, data.verdict_times, strict=False) if v.conversation in lanes]
    if marks:
        figure.add_trace(go.Scatter(
            x=[t for _, t in marks], y=[lane_name(v.conversation) for v, _ in marks], mode="markers",
            marker={"symbol": "triangle-down", "size": 15, "color": COLORS["verdict"], "line": {"color": "#fff", "width": 1.5}},
            hovertext=[hover(verdict_title(v), f"reached at {number(t)} s, conversation {v.conversation} round {v.round}")
                       for v, t in marks],
            hoverinfo="text", **legend("verdict")), row=1, col=1)
        # The moment each verdict was reached, across the hops' panels: what each gauge read then.
        for t in sorted({t for _, t in marks})[:MAX_VERDICT_LINES]:
            figure.add_shape(type="line", x0=t, x1=t, xref="x", yref="paper", y0=0, y1=1,
                             line={"color": COLORS["verdict"], "width": 1, "dash": "dot"}, layer="below")
    figure.update_yaxes(type="category", categoryorder="array", categoryarray=[lane_name(c) for c in convs],
                        autorange="reversed", row=1, col=1)

    outages: dict[str, list[Outage]] = {}
    for outage in data.outages:
        outages.setdefault(outage.hop, []).append(outage)
    for row, hop in enumerate(data.hops, start=2):
        _hop_panel(figure, row, hop.name, _hop_samples(data, hop.name), outages.get(hop.name, []), data, legend)

    figure.update_layout(**base_layout(height=total, barmode="overlay", bargap=0.2, hovermode="closest"))
    figure.update_xaxes(showticklabels=True, ticksuffix=" s", range=[0, end * 1.02], showgrid=True, zeroline=False)
    figure.update_xaxes(title={"text": "time since the run started (s)"}, row=len(heights), col=1)
    return figure


def _hop_panel(figure: go.Figure, row: int, hop: str, samples: list[ev.ProbeSample], outages: list[Outage],
               data: Rejudged, legend) -> None:
    """A hop's gauges as steps (a value holds until the next sample; a break where the page did not
    answer or the gauge was not read), its canaries as dots on 0, its outages as bands."""
    top = 1.0
    drawn = 0
    for key, label, dash in GAUGES:
        points = [(s.t, getattr(s.snapshot, key) if s.snapshot.ok else None) for s in samples]
        if all(value is None for _, value in points):
            continue  # never read: no line (a gauge not read is not idle)
        drawn += 1
        top = max(top, *(value for _, value in points if value is not None))
        xs, ys = steps(points, MAX_GAUGE_POINTS)
        figure.add_trace(go.Scatter(
            x=xs, y=ys, mode="lines", line={"shape": "hv", "color": COLORS[f"gauge {label}"], "width": 2.5 if dash == "solid" else 2,
                                "dash": dash},
            connectgaps=False, hovertemplate=hover(f"{hop} {label}") + ": %{y} at %{x:.2f} s<extra></extra>",
            **legend(label)), row=row, col=1)
    canaries = [c for c in data.log.events if isinstance(c, ev.CanaryResult) and c.hop == hop]
    for ok in (True, False):
        of = [c for c in canaries if c.outcome.ok is ok]
        if of:
            name = "canary ok" if ok else "canary failed"
            figure.add_trace(go.Scatter(
                x=[c.t for c in of], y=[0] * len(of), mode="markers",
                marker={"size": 11, "color": COLORS[name], "symbol": "circle" if ok else "x",
                        "line": {"color": "#fff", "width": 1}},
                hovertext=[hover(f"{hop} canary {'ok' if ok else 'failed'} at {number(c.t)} s: "
                                 f"{c.outcome.error or c.outcome.status}") for c in of],
                hoverinfo="text", **legend(name)), row=row, col=1)
    if not drawn:  # said in the panel, which plotly draws only around a trace: an empty one
        figure.add_trace(go.Scatter(x=[], y=[], showlegend=False, hoverinfo="skip"), row=row, col=1)
        text = (f"no metrics sample of {hop} recorded" if not samples else
                f"no running, queued, in-flight or held count read from {hop}: not drawn, which is not idle")
        figure.add_annotation(text=hover(text), xref="x domain", yref="y domain", x=0.5, y=0.6, showarrow=False,
                              font={"color": "#777"}, row=row, col=1)
    high = top * 1.15 + 0.3
    for outage in outages:
        right = max(outage.end, outage.start + max(data.end_t, 0.001) / 400)
        figure.add_trace(go.Scatter(
            x=[outage.start, right, right, outage.start, outage.start], y=[0, 0, high, high, 0], mode="lines",
            fill="toself", fillcolor=COLORS["outage"], line={"width": 0}, hoveron="fills", hoverinfo="text",
            text=hover(outage_title(outage)), **legend("metrics page not answering")), row=row, col=1)
    axis: dict[str, Any] = {"title": {"text": "count"}, "range": [-0.12 * high, high], "zeroline": True,
                            "tickformat": ",~r", "rangemode": "normal"}
    if top <= 6:
        axis.update(tick0=0, dtick=1)  # whole counts: no 0.5 running
    figure.update_yaxes(**axis, row=row, col=1)
