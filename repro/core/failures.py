"""A round that failed rather than stalled: how to say what happened, which hop produced an HTTP
status, and the verdict when no engine is at fault (a faulty engine is judged before)."""

from __future__ import annotations

from repro.core import events as ev
from repro.core.evidence import Evidence, canary_ok, canary_text, read_hop
from repro.core.verdict import Verdict

FAILURE_WORDS = {
    "connect": "the connection was refused or failed",
    "connect-timeout": "no connection within the connect timeout",
    "reset": "the connection was reset",
    "early-close": "the peer closed the connection",
    "truncated": "the stream ended before its last event",
    "stream": "the stream carried an error",
    "timeout": "no byte within the read deadline",
    "deadline": "the round deadline passed",
    "client-wait": "the round deadline passed while the client itself held it",
    "tls": "the TLS handshake failed",
}


def failure_text(failure: ev.RoundFailed) -> str:
    if failure.failure == "http":
        what = f"HTTP {failure.status}"
    else:
        what = FAILURE_WORDS.get(failure.failure or "", f"the round failed ({failure.error[:120]})")
    text = f"round failed: {what} {failure.phase} after {failure.duration_s:.1f} s"
    if failure.reused and failure.idle_s is not None:
        text += f", on a connection reused after {failure.idle_s:.1f} s idle"
    if failure.server:
        text += f" (Server: {failure.server[:40]})"
    if failure.via:
        text += f" (Via: {failure.via[:60]})"
    if carried_tools(failure):
        text += " (the request carried tool definitions)"
    return text


def carried_tools(failure: ev.RoundFailed) -> bool:
    """A refused round whose request carried `tools` (the driver says so in its error): a server
    without a tool-call parser refuses those, whatever else is right."""
    return failure.failure == "http" and "tool definitions" in failure.error


def producer(failure: ev.RoundFailed, evidence: Evidence) -> str | None:
    """Which hop answered a failed round's HTTP status: the hop whose own page's dialect the Server
    header names, else the innermost hop whose fresh canary got the same status."""
    if failure.failure != "http" or failure.status is None:
        return None
    server = (failure.server or "").lower()
    since = evidence.stall.last_progress_t
    if server:
        for hop in evidence.hops:
            reading = read_hop(hop, since)
            present = reading.present or reading.history
            if present is not None and present.snapshot.dialect != "unknown" and present.snapshot.dialect in server:
                return hop.name
    for hop in reversed(evidence.hops):
        if hop.canary is not None and hop.canary.outcome.status == failure.status:
            return hop.name
    return None


def failure_verdict(evidence: Evidence, failure: ev.RoundFailed, verdict, engines_serve: bool, engines_clause: str,
                     ruled_out: list[str]) -> Verdict | None:
    """A failed round whose engines are not at fault (a faulty engine was judged before). None:
    judge it as a stall."""
    hops = evidence.hops
    front = [h for h in hops if h.role != "engine"]
    first = hops[0] if hops else None
    confidence = "high" if engines_serve else "medium"
    for hop in front:
        if canary_ok(hop):
            ruled_out.append(f"{hop.name}: {canary_text(hop.canary)}")
    kind = failure.failure
    if kind in ("connect", "connect-timeout"):
        if first is None or first.role == "engine":
            return verdict("unknown", "connection", "connection-reset", "low",
                           f"{engines_clause}, yet this round could not connect; a fresh connection works")
        refused = first.canary is not None and first.canary.outcome.failure == "connect"
        return verdict("client", first.name, "hop-unreachable", "high" if refused else "medium",
                       f"{engines_clause}, but {first.name} took no connection"
                       + (f"; a fresh one fails too ({first.canary.outcome.error})" if refused else ""))
    if kind == "http":
        answered_by = producer(failure, evidence)
        hop = next((h for h in hops if h.name == answered_by), None)
        if hop is None:
            hop = front[0] if front else first
        if hop is None:
            return None
        same = hop.canary is not None and hop.canary.outcome.status == failure.status
        if hop.role == "engine":
            engine_kind = "engine-saturated" if failure.status in (429, 503) else "engine-error"
            return verdict("server", hop.name, engine_kind, "high" if same else "medium",
                           f"{hop.name} answered HTTP {failure.status}"
                           + ("; a fresh request gets the same" if same else "; a fresh request is served"))
        return verdict("client", hop.name, "hop-error", confidence if (same or answered_by) else "medium",
                       f"{engines_clause}, but {hop.name} answered HTTP {failure.status}"
                       + ("; a fresh request through it gets the same" if same else "")
                       + ("" if answered_by else f" (no Server header or canary named the hop: {hop.name} is the "
                                              "first in front of the engines)"))
    if kind in ("reset", "early-close", "truncated", "stream"):
        failing = next((h for h in reversed(front) if h.canary is not None and not h.canary.outcome.ok), None)
        if failing is not None:
            return verdict("client", failing.name, "hop-error", confidence,
                           f"{engines_clause}, but a fresh request through {failing.name} fails too "
                           f"({failing.canary.outcome.error})")
        every_path = all(h.canary is not None and h.canary.outcome.ok for h in hops)
        if (kind in ("reset", "early-close") and failure.reused and failure.phase == "before-first-byte"
                and failure.idle_s is not None and failure.idle_s >= 0.5 and every_path and first is not None):
            return verdict("client", first.name, "keepalive-race", confidence,
                           f"{engines_clause} and every fresh path answers, but this round's connection was reused "
                           f"after {failure.idle_s:.1f} s idle and {first.name} closed it as the request went out: "
                           "a keep-alive race (the client kept the connection longer than the server does)")
        if kind == "stream" and len([h for h in hops if h.role == "engine"]) == 1 and not front:
            engine = next(h for h in hops if h.role == "engine")
            return verdict("server", engine.name, "engine-error", "medium",
                           f"{engine.name} sent an error inside the stream; a fresh request is served")
        where = first.name if first is not None else "connection"
        return verdict("client", where, "connection-reset", "medium" if not every_path else confidence,
                       f"{engines_clause}"
                       + (" and every fresh path answers" if every_path else "")
                       + f", but this round's connection broke ({FAILURE_WORDS.get(kind or '', kind)})")
    return None
