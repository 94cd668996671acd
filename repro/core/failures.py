"""A round that failed rather than stalled: how to say what happened, and which hop produced an
HTTP status (read by the rules in repro.core.rules.failed and repro.core.rules.refusals)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from repro.core import events as ev
from repro.core.error_shapes import DIALECT_OF_ORIGIN, Said, read_answer
from repro.core.evidence import Evidence, HopEvidence
from repro.core.hop import origin_of

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
    """A round refused with HTTP 400 whose request carried `tools` (the driver counts them in
    `tool_definitions`): a server without a tool-call parser refuses those, whatever else is right.
    A failure that does not say (an older log: the field is None) is not read as carrying tools."""
    return (failure.failure == "http" and failure.status == 400
            and failure.tool_definitions is not None and failure.tool_definitions > 0)


# --- which hop answered ------------------------------------------------------------------------


@dataclass(frozen=True)
class Answerer:
    """The hop that answered a failed round's HTTP status, and the signal that decided it."""

    hop: HopEvidence | None
    signal: str  # what decided, said for the evidence ("the body: nginx's error page (...)")
    sure: bool  # a signal that names this hop, not only a hop of its role
    said: Said


def _page_dialect(hop: HopEvidence) -> str | None:
    """The dialect of the hop's own metrics page, when it was read at all."""
    return next((s.snapshot.dialect for s in reversed(hop.samples) if s.snapshot.ok
                 and s.snapshot.dialect != "unknown"), None)


def _hop_url(hop: HopEvidence) -> str:
    return hop.canary.outcome.url if hop.canary is not None else next((s.snapshot.url for s in hop.samples), "")


def answerer(failure: ev.RoundFailed, evidence: Evidence) -> Answerer | None:
    """Which hop answered a failed round's HTTP status, from evidence, in this order: the body's
    shape (an engine's error JSON, a proxy's page, a gateway's JSON) placed on the hop whose own
    metrics page shows that kind of server, or the one hop of that role; then the fresh canary that
    reproduces the status; then an engine's Server header (uvicorn) on an answer of no known shape.
    The Server header of a proxy is never enough: nginx sets its own on every answer it passes on."""
    if failure.failure != "http" or failure.status is None:
        return None
    said = read_answer(failure.status, failure.answer, failure.server)
    hops = evidence.hops
    role = said.role
    if role is None and said.origin is None and (failure.server or "").lower().startswith("uvicorn"):
        role = "engine"  # uvicorn serves the engines; a proxy of ours never says uvicorn of its own answer
        said = replace(said, shape=f"{said.shape}, Server: {failure.server[:40]}")
    if role is not None:
        found = _placed(said, role, hops)
        if found is not None:
            return found
    for hop in hops:
        counted = haproxy_answered_itself(hop, failure)
        if counted is not None:
            return Answerer(hop, f"{counted} (the body: {said.shape})", True, said)
    for hop in reversed(hops):
        if hop.canary is not None and hop.canary.outcome.status == failure.status:
            return Answerer(hop, f"its fresh canary got the same HTTP {failure.status}", True, said)
    return Answerer(None, "", False, said)


def _placed(said: Said, role: str, hops: tuple[HopEvidence, ...]) -> Answerer | None:
    body = f"the body: {said.shape}"
    if said.worker:
        worker = origin_of(said.worker)
        routed = next((h for h in hops if h.role == "engine" and origin_of(_hop_url(h)) == worker), None)
        if routed is not None:
            return Answerer(routed, f"{body}; x-smg-routed-worker-id: {said.worker[:60]}", True, said)
    dialect = DIALECT_OF_ORIGIN.get(said.origin or "")
    if dialect is not None:
        shown = [h for h in hops if _page_dialect(h) == dialect]
        if len(shown) == 1:
            return Answerer(shown[0], f"{body}; its own metrics page is {dialect}'s", True, said)
    of_role = [h for h in hops if (h.role == "engine") == (role == "engine")]
    if len(of_role) == 1:
        where = "the only engine" if role == "engine" else "the only hop in front of the engines"
        return Answerer(of_role[0], f"{body}; {of_role[0].name} is {where}", True, said)
    given = [h for h in of_role if h.role == role]  # a gateway's JSON behind nginx: the one hop given as a router
    if role != "engine" and len(given) == 1:
        return Answerer(given[0], f"{body}; {given[0].name} is the only {role} given", True, said)
    if of_role:
        return Answerer(of_role[0], f"{body}; which of {', '.join(h.name for h in of_role)} wrote it is not shown",
                        False, said)
    return None


RESPONSES = "haproxy_{}_http_responses_total{{code={}xx}}"


def haproxy_answered_itself(hop: HopEvidence, failure: ev.RoundFailed) -> str | None:
    """HAProxy's own counters, read on its page before the round and after it failed: its frontends
    count every answer, its backends only the servers' answers. The frontends' count of the status
    class rose while the backends' did not: HAProxy answered a request itself, and this round's
    answer, had it come from a server, would have moved the backends'. None: not shown (another
    round's answer in the same window, no sample on either side, not an HAProxy page)."""
    if failure.status is None:
        return None
    status_class = failure.status // 100
    started = failure.t - failure.duration_s
    readable = [s for s in hop.samples if s.snapshot.ok and s.snapshot.dialect == "haproxy"]
    before = next((s for s in reversed(readable) if s.t <= started), None)
    after = next((s for s in readable if s.t >= failure.t), None)
    if before is None or after is None:
        return None
    counts = []
    for scope in ("frontend", "backend"):
        name = RESPONSES.format(scope, status_class)
        was, now = before.snapshot.series.get(name), after.snapshot.series.get(name)
        if was is None or now is None:
            return None
        counts.append(now - was)
    if counts[0] >= 1 and counts[1] == 0:
        return (f"its frontends' {status_class}xx count rose by {counts[0]:g} and its backends' did not "
                f"(between {before.t:.1f} s and {after.t:.1f} s)")
    return None


def quoted(message: str) -> str:
    """A server's own words, on one line and at most 240 characters, in quotes."""
    flat = " ".join(message.split())
    return f'"{flat[:240]}{"..." if len(flat) > 240 else ""}"'
