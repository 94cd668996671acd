"""`repro harness`'s table: one row per fault, what the harness did, at 80 columns; its JSON; its
HTML page. Every cell comes from the run's record (repro.core.harness_runs); a moment not seen
is `-`, never guessed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from repro.core.harness_outcome import HarnessOutcome
from repro.core.harness_runs import FaultRun
from repro.reporting.html import CSS, html_text

WIDTH = 80
COLUMNS = (("fault", 16), ("outcome", 14), ("noticed", 8))  # then "what it did", the rest of the line
HEADINGS = ("fault", "outcome", "noticed", "what it did")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def what_it_did(run: FaultRun) -> str:
    """One phrase: how it went on, the error it gave, or that it waited."""
    facts, reading = run.facts, run.reading
    went_on = f", went on over a {facts.how}" if facts.how else ""
    if reading.outcome is HarnessOutcome.HUNG:
        retried = f", {facts.retries} request(s) after the fault" if facts.retries else ""
        return f"still waiting at {run.fault.limit_s:g} s: no idle timeout{retried}"
    if reading.outcome is HarnessOutcome.RECOVERED:
        if not run.met_fault:
            return f"exit 0 in {run.took_s:.1f} s, {facts.requests} requests"
        if facts.how and facts.next_request_at is not None and facts.fault_at is not None:
            went_on += f" {facts.next_request_at - facts.fault_at:.1f} s after"
        return f"exit 0 at {run.took_s:.1f} s{went_on}"
    if reading.outcome is HarnessOutcome.FAILED_SILENTLY:
        return f"exit 0 without the final answer{went_on}"
    return f"exit {reading.exit_code}: {reading.last_line or '(printed nothing)'}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def table_lines(runs: Sequence[FaultRun]) -> list[str]:
    """The table, each line at most WIDTH columns."""
    rest = WIDTH - sum(width + 1 for _, width in COLUMNS)

    def row(cells: Sequence[str]) -> str:
        fixed = "".join(f"{_cut(cell, width):<{width}} " for cell, (_, width) in zip(cells, COLUMNS, strict=False))
        return (fixed + _cut(cells[-1], rest)).rstrip()

    lines = [row(HEADINGS)]
    lines += [row((run.fault.name, run.label, _seconds(run.noticed_after_s), what_it_did(run))) for run in runs]
    return lines


def heading_lines(argv: Sequence[str], faults: int, bound_s: float) -> list[str]:
    """What is about to run and its bound, printed before the first fault starts."""
    command = _cut(" ".join(argv), WIDTH - len("repro harness: "))
    return [f"repro harness: {command}",
            _cut(f"{faults} fault(s), one run each; at most {bound_s / 60:.0f} min in all", WIDTH)]


def sweep_json(argv: Sequence[str], runs: Sequence[FaultRun], *, api: str, bound_s: float,
               interrupted: bool, versions: dict[str, str] | None = None) -> dict[str, Any]:
    return {"command": list(argv), "api": api, "bound_s": round(bound_s, 1), "interrupted": interrupted,
            **({"versions": versions} if versions else {}), "runs": [run.to_json() for run in runs]}


def sweep_html(argv: Sequence[str], runs: Sequence[FaultRun], *, title: str = "repro harness") -> str:
    """A self-contained page: the command, then the table with every fact of each run."""
    headings = ("fault", "played by", "spec", "outcome", "fault at", "noticed after", "went on",
                "requests", "took", "what it did")
    rows = []
    for run in runs:
        cells = (run.fault.name, run.fault.played_by, run.fault.spec or "-", run.label, _seconds(run.fault_at_s),
                 _seconds(run.noticed_after_s), run.facts.how or "-", run.facts.requests, _seconds(run.took_s),
                 what_it_did(run))
        rows.append("<tr>" + "".join(f"<td>{html_text(cell)}</td>" for cell in cells) + "</tr>")
    head = "<tr>" + "".join(f"<th>{html_text(h)}</th>" for h in headings) + "</tr>"
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html_text(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{html_text(title)}</h1>"
            f"<p><code>{html_text(' '.join(argv))}</code></p>"
            f"<div class='scroll'><table class='text'>{head}{''.join(rows)}</table></div></body></html>\n")
