"""`repro report RUN_DIR`: re-judge a recorded run offline and write a self-contained HTML report.

The re-judging feeds the log's events to the same EvidenceBook and classify() the live run
used. The HTML is one file with inline SVG and CSS and no script or external asset, so it
opens on an air-gapped laptop and can be attached to an incident ticket.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.core import events as ev
from repro.core.classify import classify
from repro.core.hop import Hop
from repro.core.verdict import Verdict
from repro.evidence import EvidenceBook
from repro.runlog import RunLog, read_run_log
from repro.verdict_view import group_by_cause, rounds_named

MAX_LANES = 80
COLORS = {"completed": "#4caf50", "failed": "#e53935", "stalled": "#fb8c00", "running": "#90a4ae"}


@dataclass
class RoundSpan:
    conv: int
    round: int
    start: float
    end: float | None = None
    first_byte: float | None = None
    status: str = "running"
    stalled_at: float | None = None
    last_progress: float | None = None
    error: str | None = None


@dataclass
class Rejudged:
    log: RunLog
    hops: list[Hop]
    rounds: list[RoundSpan]
    verdicts: list[Verdict]
    summary: dict[str, Any] | None
    end_t: float
    notes: list[str] = field(default_factory=list)


def rejudge(run_dir: Path) -> Rejudged:
    log = read_run_log(run_dir)
    header = log.header
    hops = list(header.hops) if header else []
    config = header.config if header else {}
    book = EvidenceBook(hops, stall_after=float(config.get("stall_after", 10.0)))
    rounds: dict[tuple[int, int], RoundSpan] = {}
    summary = None
    end_t = 0.0
    pending: dict[tuple[int, int], ev.RoundStalled] = {}  # stalls whose live verdict is not yet in the log
    verdicts: list[Verdict] = []
    for event in log.events:
        end_t = max(end_t, event.t)
        book.add(event)
        if isinstance(event, ev.RoundStarted):
            rounds[(event.conv, event.round)] = RoundSpan(event.conv, event.round, event.t)
        elif isinstance(event, ev.FirstByte):
            span = rounds.get((event.conv, event.round))
            if span:
                span.first_byte = event.t
        elif isinstance(event, (ev.RoundDone, ev.RoundFailed, ev.RoundAbandoned)):
            span = rounds.get((event.conv, event.round))
            if span:
                span.end = event.t
                span.status = {ev.RoundDone: "completed", ev.RoundFailed: "failed"}.get(type(event), "stalled")
                if isinstance(event, ev.RoundFailed):
                    span.error = event.error
        elif isinstance(event, ev.RoundStalled):
            pending[(event.conv, event.round)] = event
            span = rounds.get((event.conv, event.round))
            if span:
                span.stalled_at, span.last_progress = event.t, event.last_progress_t
        elif isinstance(event, ev.VerdictReached):
            # Judge the stall now, in replay order: the book holds exactly what the live judge saw.
            key = (event.verdict.conversation, event.verdict.round)
            stall = pending.pop(key, None)
            if stall is not None:
                verdicts.append(classify(book.evidence_for(stall, until=event.t,
                                                           canaries_since=stall.last_progress_t)))
        elif isinstance(event, ev.RunFinished):
            summary = event.summary
    for stall in pending.values():
        # No live verdict (a run cut short, or an older log): judge with everything recorded.
        verdicts.append(classify(book.evidence_for(stall, until=end_t, canaries_since=stall.last_progress_t)))
    notes = []
    if log.torn_last_line:
        notes.append("the log's last line was torn (the run was killed mid-write); everything before it was read")
    notes.extend(f"skipped unreadable {s}" for s in log.skipped[:5])
    if summary is None:
        notes.append("the run did not finish (no run_finished event): the report covers what was recorded")
    return Rejudged(log, hops, sorted(rounds.values(), key=lambda r: (r.conv, r.round)), verdicts,
                    summary, end_t, notes)


# --- HTML ---------------------------------------------------------------------------------------

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f4f4f4}.verdict{border-left:6px solid #e53935;padding:8px 12px;margin:10px 0;background:#fafafa}
.verdict.client{border-color:#fb8c00}.verdict.unknown{border-color:#9e9e9e}
.note{color:#8d6e63}code{background:#f2f2f2;padding:0 3px}
svg text{font:11px system-ui,sans-serif}
"""


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def timeline_svg(data: Rejudged, width: int = 1100) -> str:
    left, right = 110, 20
    end = max(data.end_t, 0.001)
    scale = (width - left - right) / end

    def x(t: float) -> float:
        return left + max(0.0, t) * scale

    convs = sorted({r.conv for r in data.rounds})[:MAX_LANES]
    lane_h = 16
    parts: list[str] = []
    y0 = 24
    for lane, conv in enumerate(convs):
        y = y0 + lane * lane_h
        parts.append(f'<text x="4" y="{y + 11}">conv {conv}</text>')
    lane_of = {conv: i for i, conv in enumerate(convs)}
    for span in data.rounds:
        if span.conv not in lane_of:
            continue
        y = y0 + lane_of[span.conv] * lane_h
        stop = span.end if span.end is not None else end
        color = COLORS.get(span.status, "#90a4ae")
        title = f"conv {span.conv} round {span.round}: {span.status}" + (f" ({span.error})" if span.error else "")
        parts.append(f'<rect x="{x(span.start):.1f}" y="{y + 2}" width="{max(1.0, x(stop) - x(span.start)):.1f}" '
                     f'height="{lane_h - 4}" fill="{color}" opacity="0.75"><title>{_esc(title)}</title></rect>')
        if span.first_byte is not None:
            parts.append(f'<line x1="{x(span.first_byte):.1f}" x2="{x(span.first_byte):.1f}" y1="{y + 1}" '
                         f'y2="{y + lane_h - 1}" stroke="#1e88e5" stroke-width="1.5"/>')
        if span.last_progress is not None:
            parts.append(f'<rect x="{x(span.last_progress):.1f}" y="{y + 5}" '
                         f'width="{max(2.0, x(stop) - x(span.last_progress)):.1f}" height="{lane_h - 10}" '
                         f'fill="#b71c1c"><title>stall: no progress from {span.last_progress:.2f} s</title></rect>')
    y = y0 + len(convs) * lane_h + 16
    # One chart per hop: running, queued and in-flight over time, canaries as marks.
    chart_h = 70
    for hop in data.hops:
        samples = [s for s in data.log.events if isinstance(s, ev.ProbeSample) and s.hop == hop.name]
        canaries = [c for c in data.log.events if isinstance(c, ev.CanaryResult) and c.hop == hop.name]
        values = [v for s in samples for v in (s.snapshot.running, s.snapshot.queued, s.snapshot.in_flight,
                                               s.snapshot.held) if v is not None]
        top = max(values + [1.0])
        parts.append(f'<text x="4" y="{y + 12}">{_esc(hop.name)}</text>'
                     f'<text x="4" y="{y + 26}" fill="#777">{_esc(hop.role)}, max {top:g}</text>')
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y + chart_h}" y2="{y + chart_h}" stroke="#ccc"/>')
        for key, color in (("running", "#43a047"), ("queued", "#fb8c00"), ("in_flight", "#1e88e5"), ("held", "#b71c1c")):
            points = [(x(s.t), y + chart_h - (getattr(s.snapshot, key) / top) * (chart_h - 6))
                      for s in samples if getattr(s.snapshot, key) is not None]
            if len(points) > 1:
                path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
                parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5">'
                             f'<title>{_esc(hop.name)} {key}</title></polyline>')
        for canary in canaries:
            ok = canary.outcome.ok
            parts.append(f'<circle cx="{x(canary.t):.1f}" cy="{y + chart_h - 4}" r="4" fill="{"#43a047" if ok else "#e53935"}">'
                         f'<title>canary {"ok" if ok else "failed"}: {_esc(canary.outcome.error or canary.outcome.status)}</title></circle>')
        y += chart_h + 16
    # Time axis.
    ticks = 8
    for i in range(ticks + 1):
        t = end * i / ticks
        parts.append(f'<text x="{x(t) - 8:.1f}" y="14" fill="#777">{t:.1f}s</text>')
    legend = ("completed", "failed", "stalled")
    lx = left
    for name in legend:
        parts.append(f'<rect x="{lx}" y="{y + 4}" width="10" height="10" fill="{COLORS[name]}"/>'
                     f'<text x="{lx + 14}" y="{y + 13}">{name}</text>')
        lx += 90
    for name, color in (("running", "#43a047"), ("queued", "#fb8c00"), ("in-flight", "#1e88e5"), ("held", "#b71c1c")):
        parts.append(f'<line x1="{lx}" x2="{lx + 12}" y1="{y + 9}" y2="{y + 9}" stroke="{color}" stroke-width="2"/>'
                     f'<text x="{lx + 16}" y="{y + 13}">{name}</text>')
        lx += 90
    height = y + 24
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">' + "".join(parts) + "</svg>")


def verdict_html(verdict: Verdict) -> str:
    evidence = "".join(f"<li><b>{_esc(e.get('hop'))}</b> {_esc(e.get('signal'))}: {_esc(e.get('value'))}</li>"
                       for e in verdict.evidence)
    ruled = "".join(f"<li>{_esc(r)}</li>" for r in verdict.ruled_out)
    return (
        f'<div class="verdict {_esc(verdict.side)}"><b>{_esc(verdict.side)}-side</b> at '
        f"<b>{_esc(verdict.where)}</b>: <code>{_esc(verdict.kind)}</code> ({_esc(verdict.confidence)} confidence, "
        f"{_esc(verdict.phase)}, conversation {verdict.conversation} round {verdict.round}, "
        f"stalled {verdict.stalled_for_s:g} s)<br>{_esc(verdict.summary)}"
        f"<br>Evidence:<ul>{evidence}</ul>Ruled out:<ul>{ruled}</ul></div>"
    )


def render_html(data: Rejudged) -> str:
    header = data.log.header
    config = header.config if header else {}
    summary = data.summary or {}
    rows = "".join(
        f"<tr><td>{r['round']}</td><td>{r['completed']}</td><td>{r['failed']}</td><td>{r['stalled']}</td>"
        f"<td>{_esc(r.get('ttft_p50_ms'))}</td><td>{_esc(r.get('ttft_p95_ms'))}</td><td>{_esc(r.get('itl_p50_ms'))}</td>"
        f"<td>{_esc(r.get('max_gap_ms'))}</td></tr>"
        for r in summary.get("per_round", [])
    )
    # One full verdict per cause, then which other rounds got the same: a mass hang is one finding.
    verdicts = "".join(
        verdict_html(group[0]) + (f'<p class="note">and {len(group) - 1} more verdict{"s" if len(group) > 2 else ""} '
                                  f"like this one: {_esc(rounds_named(group[1:]))}</p>" if len(group) > 1 else "")
        for group in group_by_cause(data.verdicts)
    ) or "<p>No stall: nothing to judge.</p>"
    notes = "".join(f'<p class="note">{_esc(n)}</p>' for n in data.notes)
    counts = ", ".join(f"{k.removeprefix('rounds_')} {summary[k]}" for k in
                       ("rounds_total", "rounds_completed", "rounds_stalled", "rounds_failed", "rounds_skipped")
                       if k in summary)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>repro report: {_esc(data.log.path.parent.name)}</title>
<style>{CSS}</style></head><body>
<h1>repro report: {_esc(data.log.path.parent.name)}</h1>
<p>Target <code>{_esc(config.get('target') or config.get('base_url'))}</code>, model <code>{_esc(config.get('model'))}</code>,
{_esc(config.get('conversations'))} conversations x {_esc(config.get('rounds'))} rounds, stall trigger {_esc(config.get('stall_after'))} s.
{_esc(counts)}.</p>{notes}
<h2>Verdicts (re-judged from the log)</h2>{verdicts}
<h2>Timeline</h2>
<p>A lane per conversation: rounds as bars (blue tick: first byte; dark red: no progress), then each hop's
running, queued, in-flight and held counts, with canaries as dots (green ok, red failed).</p>
{timeline_svg(data)}
<h2>Rounds</h2>
<table><tr><th>round</th><th>done</th><th>failed</th><th>stalled</th><th>TTFT p50 ms</th><th>TTFT p95 ms</th>
<th>ITL p50 ms</th><th>max gap ms</th></tr>{rows}</table>
</body></html>
"""


def write_report(run_dir: Path, out: Path | None = None) -> tuple[Path, Rejudged]:
    data = rejudge(run_dir)
    target = out or (data.log.path.parent / "report.html")
    target.write_text(render_html(data), encoding="utf-8")
    return target, data
