"""`repro harness`'s table: one row per fault, what the harness did, at 80 columns; its JSON; its
HTML page. Every cell comes from a run's JSON (repro.core.harness_runs.FaultRun.to_json), so a
table can be made again from a saved sweep; a moment not seen is `-`, never guessed.

Under a hung row, repro's judgement of it (repro.core.hung_judgement): a line a verdict in the
verdict's own words (its side, where and kind), or that it found none, or why it could not judge."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from repro.core.harness_outcome import HarnessOutcome, mask_secrets
from repro.core.harness_runs import FINISHED, INTERRUPTED, FaultRun
from repro.reporting.html import CSS, html_text

WIDTH = 80
VERDICT_INDENT = "  "  # repro's judgement of a hung run, on lines of its own under the row
COLUMNS = (("fault", 16), ("outcome", 15), ("noticed", 8))  # then "what it did", the rest of the line
HEADINGS = ("fault", "outcome", "noticed", "what it did")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _short_s(value: float) -> str:
    """Seconds in few characters: a tenth below 100 s, whole seconds above."""
    return f"{value:.1f} s" if value < 100 else f"{value:.0f} s"


def what_it_did(run: Mapping[str, Any]) -> str:
    """One phrase: how it went on, the error it gave, or that it waited (from a run's JSON)."""
    outcome, how = run["outcome"], run.get("went_on")
    went_on = how or ""  # e.g. "new connection +3.4 s": how it went on, how long after the fault
    if how and run.get("retry_at_s") is not None and run.get("fault_at_s") is not None:
        went_on += f" +{_short_s(run['retry_at_s'] - run['fault_at_s'])}"
    if outcome == HarnessOutcome.HUNG.value:
        retries, through = run.get("requests_after_fault") or 0, run.get("through_after_fault") or 0
        if through:  # it went on, got answers, and was stuck again by the limit
            return f"{went_on}, stuck again"
        if retries:  # it went on asking, and never got through
            return f"{retries} retries, none through by {run['limit_s']:g} s"
        return f"silent at {run['limit_s']:g} s: no idle timeout"
    if outcome == INTERRUPTED:
        return f"stopped by you at {_short_s(run['took_s'])}"
    if outcome == FINISHED:
        return f"exit 0 in {run['took_s']:.1f} s, {run['requests']} requests"
    if outcome == HarnessOutcome.RECOVERED.value:
        done = f"done at {_short_s(run['took_s'])}"
        return f"{went_on}, {done}" if went_on else done
    if outcome == HarnessOutcome.FAILED_SILENTLY.value:
        return "exit 0 without the final answer"
    return f"exit {run['exit_code']}: {error_words(run.get('last_line') or '') or '(printed nothing)'}"


def error_words(line: str) -> str:
    """The words of a harness's last line: a JSON event's error message (opencode's `error`
    events, Claude Code's error results), else the line as printed (already masked)."""
    try:
        event = json.loads(line)
    except ValueError:
        return line
    found = _message(event)
    return found if found else line


def _message(value: Any, depth: int = 0) -> str | None:
    """The innermost `message` under data/error (opencode's error events), else an error
    result's text (Claude Code's `{"type": "result", "is_error": true, "result": ...}`)."""
    if depth > 8 or not isinstance(value, dict):
        return None
    for key in ("data", "error"):
        inner = _message(value.get(key), depth + 1)
        if inner:
            return inner
    for key in ("message", "result"):
        text = value.get(key)
        if isinstance(text, str) and text.strip() and (key == "message" or value.get("is_error") is True):
            return text
    return None


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def table_lines(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The table of runs (FaultRun.to_json() each), each line at most WIDTH columns."""
    rest = WIDTH - sum(width + 1 for _, width in COLUMNS)

    def row(cells: Sequence[str]) -> str:
        fixed = "".join(f"{_cut(cell, width):<{width}} " for cell, (_, width) in zip(cells, COLUMNS, strict=False))
        return (fixed + _cut(cells[-1], rest)).rstrip()

    lines = [row(HEADINGS)]
    for run in runs:
        lines.append(row((run["fault"], run["outcome"], _seconds(run.get("noticed_after_s")), what_it_did(run))))
        lines += [_cut(f"{VERDICT_INDENT}repro: {said}", WIDTH) for said in judgement_words(run)]
    return lines


def verdict_words(verdict: Mapping[str, Any]) -> str:
    """A verdict of a run's JSON as the table says it: `client side, at proxy: connection-wedged`."""
    where = f", at {verdict['where']}" if verdict.get("where") else ""
    return f"{verdict['side']} side{where}: {verdict['kind']}"


def judgement_words(run: Mapping[str, Any]) -> list[str]:
    """What repro's judgement of a hung run says, a phrase a line: each verdict's words, or that it
    reached none, or why it could not judge. Nothing for a run not judged (or judged and not hung)."""
    if run["outcome"] != HarnessOutcome.HUNG.value or run.get("judged_at_s") is None:
        return []
    if run.get("judging_error"):
        return [run["judging_error"]]
    verdicts = run.get("verdicts") or []
    if not verdicts:
        return [f"no verdict (judged at {_short_s(run['judged_at_s'])})"]
    return [verdict_words(verdict) for verdict in verdicts]


def shown_command(argv: Sequence[str]) -> str:
    """The command as printed anywhere: a key in its arguments masked."""
    return mask_secrets(" ".join(argv))


def heading_lines(argv: Sequence[str], faults: int, bound_s: float) -> list[str]:
    """What is about to run and its bound, printed before the first fault starts."""
    command = _cut(shown_command(argv), WIDTH - len("repro harness: "))
    return [f"repro harness: {command}",
            _cut(f"{faults} fault(s), one run each; at most {bound_s / 60:.0f} min in all", WIDTH)]


def sweep_json(argv: Sequence[str], runs: Sequence[FaultRun], *, api: str, bound_s: float,
               interrupted: bool) -> dict[str, Any]:
    return {"command": [mask_secrets(arg) for arg in argv], "api": api, "bound_s": round(bound_s, 1), "interrupted": interrupted,
            "runs": [run.to_json() for run in runs]}


def _verdict_cell(run: Mapping[str, Any]) -> str:
    """The HTML page's verdict cell: each verdict's words and its own summary; or what the table says."""
    verdicts = run.get("verdicts") or []
    if run["outcome"] == HarnessOutcome.HUNG.value and verdicts:
        return "; ".join(f"{verdict_words(v)}: {v['summary']}" for v in verdicts)
    return "; ".join(judgement_words(run)) or "-"


def sweep_html(argv: Sequence[str], runs: Sequence[Mapping[str, Any]], *, title: str = "repro harness") -> str:
    """A self-contained page: the command, then the table with every fact of each run (its JSON)."""
    headings = ("fault", "played by", "spec", "outcome", "fault at", "noticed after", "went on",
                "requests", "took", "what it did", "repro's verdict")
    rows = []
    for run in runs:
        cells = (run["fault"], run["played_by"], run["spec"] or "-", run["outcome"], _seconds(run.get("fault_at_s")),
                 _seconds(run.get("noticed_after_s")), run.get("went_on") or "-", run["requests"],
                 _seconds(run["took_s"]), what_it_did(run), _verdict_cell(run))
        rows.append("<tr>" + "".join(f"<td>{html_text(cell)}</td>" for cell in cells) + "</tr>")
    head = "<tr>" + "".join(f"<th>{html_text(h)}</th>" for h in headings) + "</tr>"
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html_text(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{html_text(title)}</h1>"
            f"<p><code>{html_text(shown_command(argv))}</code></p>"
            f"<div class='scroll'><table class='text'>{head}{''.join(rows)}</table></div></body></html>\n")
