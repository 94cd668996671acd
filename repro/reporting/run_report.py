"""`repro report RUN_DIR`: re-judge a recorded run offline and write a self-contained HTML report.

The re-judging feeds the log's events to the same EvidenceBook and classify() the live run
used. The HTML is one file with inline SVG and CSS and no script or external asset, so it
opens on an air-gapped laptop and can be attached to an incident ticket.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.core import events as ev
from repro.core.classify import classify
from repro.core.evidence_book import EvidenceBook, with_client_fate
from repro.core.hop import Hop
from repro.core.text import number
from repro.core.verdict import Verdict
from repro.io.runlog import RunLog, read_run_log
from repro.reporting.html import CSS, html_number, html_text
from repro.reporting.terminal import group_by_cause, rounds_named

MAX_LANES = 80
COLORS = {"completed": "#4caf50", "failed": "#e53935", "stalled": "#fb8c00", "running": "#90a4ae"}
VERDICT_MARK = "#4a148c"  # deep purple: apart from every bar and stall colour it lands on
OUTAGE_FILL = "url(#outage-hatch)"  # light red, hatched: a hop's metrics page did not answer


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
class Outage:
    """A span in which a hop's metrics page did not answer: from its first failed sample to the
    next readable one, or to the end of the log (`recovered` False)."""

    hop: str
    start: float
    end: float
    errors: list[str]  # distinct error texts, in the order they came
    samples: int  # failed samples in the span
    recovered: bool

    @property
    def error(self) -> str:
        return "; ".join(self.errors) or "no error text recorded"


@dataclass
class Rejudged:
    log: RunLog
    hops: list[Hop]
    rounds: list[RoundSpan]
    verdicts: list[Verdict]
    summary: dict[str, Any] | None
    end_t: float
    notes: list[str] = field(default_factory=list)
    verdict_times: list[float] = field(default_factory=list)  # when each of `verdicts` was reached, same order
    outages: list[Outage] = field(default_factory=list)


def find_outages(events: list[Any], end_t: float) -> list[Outage]:
    """Each hop's spans of consecutive unreadable ProbeSamples (snapshot.ok False)."""
    by_hop: dict[str, list[ev.ProbeSample]] = {}
    for event in events:
        if isinstance(event, ev.ProbeSample):
            by_hop.setdefault(event.hop, []).append(event)
    outages: list[Outage] = []
    for hop, samples in by_hop.items():
        current: Outage | None = None
        for sample in sorted(samples, key=lambda s: s.t):  # stable: same-time samples keep log order
            if not sample.snapshot.ok:
                if current is None:
                    current = Outage(hop, sample.t, sample.t, [], 0, False)
                current.samples += 1
                error = sample.snapshot.error
                if error and error not in current.errors:
                    current.errors.append(error)
            elif current is not None:
                current.end, current.recovered = sample.t, True
                outages.append(current)
                current = None
        if current is not None:
            current.end = max(end_t, current.start)
            outages.append(current)
    return sorted(outages, key=lambda o: (o.start, o.hop))


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
    failed: dict[tuple[int, int], ev.RoundFailed] = {}  # failed rounds, likewise
    verdicts: list[Verdict] = []
    verdict_times: list[float] = []
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
            if isinstance(event, ev.RoundFailed):
                failed[(event.conv, event.round)] = event
        elif isinstance(event, ev.RoundStalled):
            pending[(event.conv, event.round)] = event
            span = rounds.get((event.conv, event.round))
            if span:
                span.stalled_at, span.last_progress = event.t, event.last_progress_t
        elif isinstance(event, ev.VerdictReached):
            # Judge the stall now, in replay order: the book holds exactly what the live judge saw.
            key = (event.verdict.conversation, event.verdict.round)
            failure = failed.pop(key, None) if event.verdict.outcome == "failed" else None
            stall = pending.pop(key, None) if failure is None else None
            if failure is not None:
                verdicts.append(classify(book.evidence_for_failure(failure, until=event.t)))
                verdict_times.append(event.t)
            elif stall is not None:
                verdicts.append(with_client_fate(classify(book.evidence_for(stall, until=event.t,
                                                                            canaries_since=stall.last_progress_t)),
                                                 book.client_fate(stall)))
                verdict_times.append(event.t)  # the re-judged verdict lands where the live one did
        elif isinstance(event, ev.RunFinished):
            summary = event.summary
    for stall in pending.values():
        # No live verdict (a run cut short, or an older log): judge with everything recorded.
        verdicts.append(with_client_fate(classify(book.evidence_for(stall, until=end_t,
                                                                    canaries_since=stall.last_progress_t)),
                                         book.client_fate(stall)))
        verdict_times.append(stall.t)  # no recorded verdict time: mark it at the stall
    notes = []
    if log.torn_last_line:
        notes.append("the log's last line was torn (the run was killed mid-write); everything before it was read")
    notes.extend(f"skipped unreadable {s}" for s in log.skipped[:5])
    if summary is None:
        notes.append("the run did not finish (no run_finished event): the report covers what was recorded")
    return Rejudged(log, hops, sorted(rounds.values(), key=lambda r: (r.conv, r.round)), verdicts,
                    summary, end_t, notes, verdict_times, find_outages(log.events, end_t))


# --- HTML ---------------------------------------------------------------------------------------

def _secs(t: float) -> str:
    return f"{number(t)} s"


def verdict_title(verdict: Verdict) -> str:
    """'client at proxy: connection-wedged': what a verdict mark on the timeline says."""
    return f"{verdict.side} at {verdict.where or '?'}: {verdict.kind}"


def outage_title(outage: Outage) -> str:
    until = f"to {_secs(outage.end)}" if outage.recovered else f"to the end of the log ({_secs(outage.end)})"
    count = f"{outage.samples} failed sample{'' if outage.samples == 1 else 's'}"
    return f"{outage.hop} metrics page did not answer from {_secs(outage.start)} {until}, {count}: {outage.error}"


HATCH = ('<defs><pattern id="outage-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
         'patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffcdd2"/>'
         '<line x1="0" y1="0" x2="0" y2="6" stroke="#e57373" stroke-width="2"/></pattern></defs>')


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
                     f'height="{lane_h - 4}" fill="{color}" opacity="0.75"><title>{html_text(title)}</title></rect>')
        if span.first_byte is not None:
            parts.append(f'<line x1="{x(span.first_byte):.1f}" x2="{x(span.first_byte):.1f}" y1="{y + 1}" '
                         f'y2="{y + lane_h - 1}" stroke="#1e88e5" stroke-width="1.5"/>')
        if span.last_progress is not None:
            parts.append(f'<rect x="{x(span.last_progress):.1f}" y="{y + 5}" '
                         f'width="{max(2.0, x(stop) - x(span.last_progress)):.1f}" height="{lane_h - 10}" '
                         f'fill="#b71c1c"><title>stall: no progress from {span.last_progress:.2f} s</title></rect>')
    # Each verdict where it was reached, on its conversation's lane.
    for verdict, t in zip(data.verdicts, data.verdict_times, strict=False):  # a hand-built Rejudged may lack times
        if verdict.conversation not in lane_of:
            continue
        y = y0 + lane_of[verdict.conversation] * lane_h
        vx = x(t)
        # A white edge keeps the mark legible on the dark-red stall stripe it usually lands on.
        parts.append(f'<g class="verdict-mark"><title>{html_text(verdict_title(verdict))}</title>'
                     f'<line x1="{vx:.1f}" x2="{vx:.1f}" y1="{y - 1}" y2="{y + lane_h + 1}" stroke="#fff" '
                     f'stroke-width="5"/><line x1="{vx:.1f}" x2="{vx:.1f}" y1="{y - 1}" y2="{y + lane_h + 1}" '
                     f'stroke="{VERDICT_MARK}" stroke-width="3"/><path d="M{vx - 5:.1f},{y - 4} L{vx + 5:.1f},{y - 4} '
                     f'L{vx:.1f},{y + 3} Z" fill="{VERDICT_MARK}" stroke="#fff" stroke-width="1" '
                     f'stroke-linejoin="round"/></g>')
    y = y0 + len(convs) * lane_h + 16
    # One chart per hop: running, queued and in-flight over time, canaries as marks.
    chart_h = 70
    outages: dict[str, list[Outage]] = {}
    for outage in data.outages:
        outages.setdefault(outage.hop, []).append(outage)
    for hop in data.hops:
        samples = [s for s in data.log.events if isinstance(s, ev.ProbeSample) and s.hop == hop.name]
        canaries = [c for c in data.log.events if isinstance(c, ev.CanaryResult) and c.hop == hop.name]
        values = [v for s in samples for v in (s.snapshot.running, s.snapshot.queued, s.snapshot.in_flight,
                                               s.snapshot.held) if v is not None]
        top = max(values + [1.0])
        parts.append(f'<text x="4" y="{y + 12}">{html_text(hop.name)}</text>'
                     f'<text x="4" y="{y + 26}" fill="#777">{html_text(hop.role)}, max {top:g}</text>')
        for outage in outages.get(hop.name, []):
            parts.append(f'<rect class="outage" x="{x(outage.start):.1f}" y="{y}" '
                         f'width="{max(2.0, x(outage.end) - x(outage.start)):.1f}" height="{chart_h}" '
                         f'fill="{OUTAGE_FILL}" stroke="#e57373"><title>{html_text(outage_title(outage))}</title></rect>')
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y + chart_h}" y2="{y + chart_h}" stroke="#ccc"/>')
        for key, color in (("running", "#43a047"), ("queued", "#fb8c00"), ("in_flight", "#1e88e5"), ("held", "#b71c1c")):
            # A line per stretch the page answered: no line drawn across a span it did not.
            segments: list[list[tuple[float, float]]] = [[]]
            for s in samples:
                value = getattr(s.snapshot, key)
                if not s.snapshot.ok:
                    if segments[-1]:
                        segments.append([])
                elif value is not None:
                    segments[-1].append((x(s.t), y + chart_h - (value / top) * (chart_h - 6)))
            for points in segments:
                label = f"<title>{html_text(hop.name)} {key}</title>"
                if len(points) > 1:
                    path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
                    parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5">'
                                 f'{label}</polyline>')
                elif points and len(segments) > 1:
                    parts.append(f'<circle cx="{points[0][0]:.1f}" cy="{points[0][1]:.1f}" r="1.5" fill="{color}">'
                                 f'{label}</circle>')
        for canary in canaries:
            ok = canary.outcome.ok
            parts.append(f'<circle cx="{x(canary.t):.1f}" cy="{y + chart_h - 4}" r="4" fill="{"#43a047" if ok else "#e53935"}">'
                         f'<title>canary {"ok" if ok else "failed"}: {html_text(canary.outcome.error or canary.outcome.status)}</title></circle>')
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
    parts.append(f'<line x1="{lx + 5}" x2="{lx + 5}" y1="{y + 2}" y2="{y + 16}" stroke="{VERDICT_MARK}" stroke-width="2.5"/>'
                 f'<text x="{lx + 14}" y="{y + 13}">verdict</text>')
    lx += 90
    parts.append(f'<rect x="{lx}" y="{y + 4}" width="10" height="10" fill="{OUTAGE_FILL}" stroke="#e57373"/>'
                 f'<text x="{lx + 14}" y="{y + 13}">metrics page not answering</text>')
    height = y + 24
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">' + HATCH + "".join(parts) + "</svg>")


def verdict_html(verdict: Verdict) -> str:
    evidence = "".join(f"<li><b>{html_text(e.get('hop'))}</b> {html_text(e.get('signal'))}: {html_text(e.get('value'))}</li>"
                       for e in verdict.evidence)
    ruled = "".join(f"<li>{html_text(r)}</li>" for r in verdict.ruled_out)
    return (
        f'<div class="verdict {html_text(verdict.side)}"><b>{html_text(verdict.side)}-side</b> at '
        f"<b>{html_text(verdict.where or '?')}</b>: <code>{html_text(verdict.kind)}</code> ({html_text(verdict.confidence)} confidence, "
        f"{html_text(verdict.phase)}, conversation {html_number(verdict.conversation)} round {html_number(verdict.round)}, "
        f"stalled {html_number(verdict.stalled_for_s)} s)<br>{html_text(verdict.summary)}"
        f"<br>Evidence:<ul>{evidence}</ul>Ruled out:<ul>{ruled}</ul></div>"
    )


def render_html(data: Rejudged) -> str:
    header = data.log.header
    config = header.config if header else {}
    summary = data.summary or {}
    columns = ("round", "completed", "failed", "stalled", "ttft_p50_ms", "ttft_p95_ms", "itl_p50_ms", "max_gap_ms")
    rows = "".join("<tr>" + "".join(f"<td>{html_number(r.get(c))}</td>" for c in columns) + "</tr>"
                   for r in summary.get("per_round") or [])
    # One full verdict per cause, then which other rounds got the same: a mass hang is one finding.
    verdicts = "".join(
        verdict_html(group[0]) + (f'<p class="note">and {len(group) - 1} more verdict{"s" if len(group) > 2 else ""} '
                                  f"like this one: {html_text(rounds_named(group[1:]))}</p>" if len(group) > 1 else "")
        for group in group_by_cause(data.verdicts)
    ) or "<p>No stall: nothing to judge.</p>"
    notes = "".join(f'<p class="note">{html_text(n)}</p>' for n in data.notes)
    counts = ", ".join(f"{k.removeprefix('rounds_')} {html_number(summary[k])}" for k in
                       ("rounds_total", "rounds_completed", "rounds_stalled", "rounds_failed", "rounds_skipped")
                       if k in summary)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>repro report: {html_text(data.log.path.parent.name)}</title>
<style>{CSS}</style></head><body>
<h1>repro report: {html_text(data.log.path.parent.name)}</h1>
<p>Target <code>{html_text(config.get('target') or config.get('base_url'))}</code>, model <code>{html_text(config.get('model'))}</code>,
{html_number(config.get('conversations'))} conversations x {html_number(config.get('rounds'))} rounds, stall trigger {html_number(config.get('stall_after'))} s.
{counts + "." if counts else ""}</p>{notes}
<h2>Verdicts (re-judged from the log)</h2>{verdicts}
<h2>Timeline</h2>
<p>A lane per conversation: rounds as bars (blue tick: first byte; dark red: no progress; purple mark: the
moment a verdict was reached), then each hop's running, queued, in-flight and held counts, with canaries as dots
(green ok, red failed) and hatched red bands where the hop's metrics page did not answer. Hover for details.</p>
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
