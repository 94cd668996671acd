"""`repro report RUN_DIR`: a recorded run re-judged offline (repro.reporting.rejudge) as one
self-contained report.html: the verdicts as text with their evidence first, then the timeline
drawn by plotly (repro.reporting.run_timeline; plotly.js inline, so the page needs no network and
can be attached to an incident ticket), then the round table; every round as rounds.csv beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from repro.core.verdict import Verdict
from repro.io.rotating_log import RangeLog
from repro.reporting.csv_export import write_csv
from repro.reporting.html import CSS, html_number, html_text
from repro.reporting.plots import figure_div, plotly_script
from repro.reporting.range_report import range_text
from repro.reporting.rejudge import Rejudged, RoundSpan, rejudge
from repro.reporting.run_timeline import MAX_BARS, MAX_LANES, timeline_figure
from repro.reporting.terminal import group_by_cause, rounds_named

ROUNDS_CSV = "rounds.csv"
ROUND_COLUMNS = ("conv", "round", "status", "start_s", "first_byte_s", "ttft_s", "end_s", "duration_s",
                 "last_progress_s", "stalled_at_s", "error")


def round_row(span: RoundSpan) -> dict[str, Any]:
    """A round as rounds.csv holds it: times in seconds since the run started, as the log has them."""
    def t(value: float | None) -> float | None:  # to the microsecond, as a clock reads
        return None if value is None else round(value, 6)

    return {"conv": span.conv, "round": span.round, "status": span.status, "start_s": t(span.start),
            "first_byte_s": t(span.first_byte), "end_s": t(span.end), "last_progress_s": t(span.last_progress),
            "stalled_at_s": t(span.stalled_at), "error": span.error,
            "ttft_s": None if span.first_byte is None else round(span.first_byte - span.start, 6),
            "duration_s": None if span.end is None else round(span.end - span.start, 6)}


def verdict_html(verdict: Verdict) -> str:
    evidence = "".join(f"<li><b>{html_text(e.get('hop'))}</b> {html_text(e.get('signal'))}: {html_text(e.get('value'))}</li>"
                       for e in verdict.evidence)
    ruled = "".join(f"<li>{html_text(r)}</li>" for r in verdict.ruled_out)
    # What was not observed (triage's phase and silence) is left out, never written as a dash.
    details = [f"{html_text(verdict.confidence)} confidence"]
    if verdict.phase is not None:
        details.append(html_text(verdict.phase))
    details.append(f"conversation {html_number(verdict.conversation)} round {html_number(verdict.round)}")
    if verdict.stalled_for_s is not None:
        details.append(f"stalled {html_number(verdict.stalled_for_s)} s")
    return (
        f'<div class="verdict {html_text(verdict.side)}"><b>{html_text(verdict.side)}-side</b>'
        + (f" at <b>{html_text(verdict.where)}</b>" if verdict.where else "")
        + f": <code>{html_text(verdict.kind)}</code> ({', '.join(details)})<br>{html_text(verdict.said)}"
        + (f"<br>Evidence:<ul>{evidence}</ul>" if evidence else "")
        + (f"Ruled out:<ul>{ruled}</ul>" if ruled else "")
        + "</div>"
    )


def render_html(data: Rejudged, csv_name: str = ROUNDS_CSV) -> str:
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
    conversations = len({r.conv for r in data.rounds})
    thinned = (f" This run has {len(data.rounds)} rounds: runs of completed rounds are drawn as one bar each, every "
               "other round on its own." if len(data.rounds) > MAX_BARS else "")
    if conversations > MAX_LANES:
        thinned += f" The first {MAX_LANES} of its {conversations} conversations have a lane; rounds.csv has them all."
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>repro report: {html_text(data.log.path.parent.name)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{CSS}</style>{plotly_script()}</head><body>
<h1>repro report: {html_text(data.log.path.parent.name)}</h1>
<p>Target <code>{html_text(config.get('target') or config.get('base_url'))}</code>, model <code>{html_text(config.get('model'))}</code>,
{html_number(config.get('conversations'))} conversations x {html_number(config.get('rounds'))} rounds, stall trigger {html_number(config.get('stall_after'))} s.
{counts + "." if counts else ""}</p>{range_html(data)}{notes}
<h2>Verdicts (re-judged from the log)</h2>{verdicts}
<h2>Timeline</h2>
<p>A lane per conversation: rounds as bars (blue tick: first byte; dark red: no progress; purple triangle
and dotted line: the moment a verdict was reached), then a panel per hop: its running, queued, in-flight and
held counts as steps (a value holds until the next sample; no line where the gauge was not read), canaries
as dots on 0 (green ok, red cross failed) and red bands where the hop's metrics page did not answer. Hover
for values; drag to zoom, double-click to zoom out; click a legend entry to hide it.{thinned}</p>
{figure_div(timeline_figure(data), "timeline")}
<h2>Rounds</h2>
<p>Every round, with its times, as <a href="{csv_name}">{csv_name}</a> beside this page.</p>
<table><tr><th>round</th><th>done</th><th>failed</th><th>stalled</th><th>TTFT p50 ms</th><th>TTFT p95 ms</th>
<th>ITL p50 ms</th><th>max gap ms</th></tr>{rows}</table>
</body></html>
"""


def range_html(data: Rejudged) -> str:
    """What a report of a rotating log's range covers (repro.reporting.range_report); nothing for a run."""
    log = data.log
    if not isinstance(log, RangeLog):
        return ""
    segments = log.segments
    named = segments[0] if len(segments) == 1 else f"{segments[0]} to {segments[-1]}" if segments else "none"
    context = (f" {html_number(log.margin / 60)} minutes either side were read as context for the judging."
               if log.margin else "")
    return (f'<p class="range">This report covers {html_text(range_text(log))}, read from '
            f"{html_number(len(segments))} segment{'' if len(segments) == 1 else 's'} ({html_text(named)}). "
            f"Only verdicts reached within it are shown.{context}</p>")


def write_report(run_dir: Path, out: Path | None = None) -> tuple[Path, Rejudged]:
    """report.html (or `out`) and rounds.csv beside it."""
    return write_rejudged(rejudge(run_dir), out)


def write_rejudged(data: Rejudged, out: Path | None = None) -> tuple[Path, Rejudged]:
    """A run (or a range of a rotating log) re-judged, as report.html (or `out`) and rounds.csv beside it."""
    target = out or (data.log.path.parent / "report.html")
    write_csv(target.parent / ROUNDS_CSV, ROUND_COLUMNS, (round_row(r) for r in data.rounds))
    target.write_text(render_html(data), encoding="utf-8")
    return target, data
