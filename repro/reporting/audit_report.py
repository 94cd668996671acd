"""`repro audit` as printed: the load it will send (before it starts), then the table of hops, how
each measurement was obtained, the findings with their next actions and the notes to check.

Every line fits the width given (80 columns on a terminal as on-call has it) and is wrapped at
spaces only, a number never parted from its unit ("20 s", "18.7 MiB"): the text is wrapped here,
so rich prints lines that already fit and has nothing left to fold.
"""

from __future__ import annotations

import re
import textwrap

from rich.console import Group
from rich.markup import escape

from repro.core.audit_findings import Finding, Note
from repro.core.audit_measurements import (
    BodySeen,
    CancelSeen,
    Growth,
    HopAudit,
    IdleStreamSeen,
    KeepAliveSeen,
    kib,
)
from repro.reporting.fit import Col, fitted_table

NBSP = "\u00a0"
# A number and the unit after it: glued before wrapping, so no line ends between them.
NUMBER_UNIT = re.compile(r"(?<=\d) (?=(?:s|ms|B|KiB|MiB|GiB|min|h)\b)")


def wrapped(text: str, width: int, *, indent: int = 0, hanging: int = 2) -> list[str]:
    """`text` in lines of at most `width` columns, broken at spaces between words only (never inside
    a word, nor between a number and its unit); lines after the first indented `hanging` more."""
    glued = NUMBER_UNIT.sub(NBSP, text)
    lines = textwrap.wrap(glued, width, initial_indent=" " * indent, subsequent_indent=" " * (indent + hanging),
                          break_long_words=False, break_on_hyphens=False)
    return [line.replace(NBSP, " ") for line in lines] or [""]


def load_lines(hops: int, requests: int, detail: str, upload: int, time_text: str, *, width: int = 80) -> list[str]:
    """The load `repro audit` may send, printed before anything is sent."""
    return (wrapped(f"audit load: {hops} hop(s); at most {requests} requests, at most {kib(upload)} uploaded",
                    width)
            + wrapped(f"requests: {detail}", width, indent=2)
            + wrapped(f"time: {time_text}", width, indent=2))


def seconds_text(audit: HopAudit) -> str:
    if audit.keepalive_seen is KeepAliveSeen.CLOSED and audit.keepalive_timeout_s is not None:
        return f"{audit.keepalive_timeout_s:.1f} s"
    return f"open at {audit.keepalive_limit_s:g} s" if audit.keepalive_seen is KeepAliveSeen.STILL_OPEN \
        else "not measured"


def body_text(audit: HopAudit) -> str:
    if audit.body_seen is BodySeen.LIMIT and audit.max_body_bytes is not None:
        return kib(audit.max_body_bytes)
    return {BodySeen.REFUSES_ALL: "refuses all", BodySeen.NO_LIMIT: f"none up to {kib(audit.body_cap_bytes)}"}.get(
        audit.body_seen, "not measured")


def cancel_text(audit: HopAudit) -> str:
    """How soon the hop let go of a cancelled stream: "0.2 s", "kept", or "-" (not measured)."""
    if audit.cancel_seen is CancelSeen.RELEASED and audit.cancel_release_s is not None:
        return f"{audit.cancel_release_s:.1f} s"
    return "kept" if audit.cancel_seen is CancelSeen.KEPT else "-"


def idle_cut_text(audit: HopAudit) -> str:
    if audit.idle_stream_seen is IdleStreamSeen.CUT and audit.idle_stream_cut_s is not None:
        return f"{audit.idle_stream_cut_s:.1f} s"
    return "none" if audit.idle_stream_seen is IdleStreamSeen.NOT_CUT else "-"


def lines(text: str, width: int, *, indent: int = 0, hanging: int = 2, style: str = "") -> list[str]:
    """`wrapped`, each line escaped for rich (and styled when `style` is given)."""
    out = [escape(line) for line in wrapped(text, width, indent=indent, hanging=hanging)]
    return [f"[{style}]{line}[/]" for line in out] if style else out


def audit_report(audits: list[HopAudit], findings: list[Finding], costs: dict, growth: Growth, horizon: int, *,
                 width: int, notes: list[Note] | None = None, unmeasured: list[str] | None = None,
                 not_measurable: list[str] | None = None) -> Group:
    """The table of hops (fitted to `width`), how each measurement was obtained, the findings and
    their next actions, the notes to check and what was not measured."""
    rows = []
    for a in audits:
        spent = costs.get(a.name, {})
        cost = sum(c.get("requests", 0) for c in spent.values())
        rows.append([escape(a.name), a.role, seconds_text(a), body_text(a),
                     str(a.context_tokens) if a.context_tokens else "-", cancel_text(a), idle_cut_text(a), str(cost)])
    columns = [Col("hop", shrink=True), Col("role"), Col("keep-alive", "right"), Col("max body", "right"),
               Col("context", "right"), Col("cancel", "right"), Col("idle cut", "right"), Col("reqs", "right")]
    parts: list = [fitted_table(columns, rows, width=width, title="audit, client side first")]
    for a in audits:
        parts += lines(a.name, width, style="bold")
        how = [f"keep-alive: {a.keepalive_how}", f"body: {a.body_how}"]
        how += [f"context: {a.context_how}"] if a.role == "engine" else []
        how += [f"cancel: {a.cancel_how}", f"idle stream: {a.idle_stream_how}"]
        for line in how:
            parts += lines(line, width, indent=2)
    parts += lines(f"growth: {kib(growth.per_round_bytes)} a round from {kib(growth.first_bytes)} ({growth.how}); "
                   f"horizon {horizon} rounds", width)
    if not findings:
        parts.append("[bold green]no finding[/]")
    for f in findings:
        color = {"server": "red", "client": "yellow"}.get(f.side, "white")
        parts += lines(f"{f.side.upper()}-SIDE at {f.where}: {f.kind}", width, style=f"bold {color}")
        for line in f.evidence:
            parts += lines(line, width, indent=2)
        if f.next_action is not None:
            parts += lines(f"next: {f.next_action.do}", width, indent=2)
            parts += lines(f"confirm: {f.next_action.confirm}", width, indent=2)
    for n in notes or []:
        parts += lines(f"to check at {n.where}: {n.kind} resting on {n.assumed}'s upstream pool, assumed (not a "
                       "finding: no exit status)", width, style="bold")
        for line in n.evidence:
            parts += lines(line, width, indent=2)
        parts += lines(f"check: {n.check.do}", width, indent=2)
        parts += lines(f"then: {n.check.confirm}", width, indent=2)
    for line in unmeasured or []:
        parts += lines(f"not measured: {line}", width, style="yellow")
    for line in not_measurable or []:
        parts += lines(f"not measurable here: {line}", width)
    return Group(*parts)
