"""A round that failed rather than stalled: how to say what happened, which hop produced an HTTP
status, and the verdict when no engine is at fault (a faulty engine is judged before)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from repro.core import events as ev
from repro.core.error_shapes import DIALECT_OF_ORIGIN, Said, read_answer
from repro.core.evidence import Evidence, HopEvidence, canary_ok, canary_text, fact
from repro.core.hop import origin_of
from repro.core.next_actions import ADVICE, BODY_LIMIT_KNOB
from repro.core.ruled_out import RuledOut
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


def producer(failure: ev.RoundFailed, evidence: Evidence) -> str | None:
    """The name of the hop that answered a failed round's HTTP status, when evidence shows it."""
    found = answerer(failure, evidence)
    return found.hop.name if found is not None and found.hop is not None else None


def failure_verdict(evidence: Evidence, failure: ev.RoundFailed, verdict, engines_serve: bool, engines_clause: str,
                     ruled_out: RuledOut, facts: list) -> Verdict | None:
    """A failed round whose engines are not at fault (a faulty engine was judged before). None:
    judge it as a stall."""
    hops = evidence.hops
    front = [h for h in hops if h.role != "engine"]
    first = hops[0] if hops else None
    confidence = "high" if engines_serve else "medium"
    for hop in front:
        if canary_ok(hop):
            ruled_out.add(hop.name, canary_text(hop.canary))
    kind = failure.failure
    if kind in ("connect", "connect-timeout"):
        if first is None or first.role == "engine":
            return verdict("unknown", "connection", "connection-reset", "low",
                           f"{engines_clause}, yet this round could not connect; a fresh connection works")
        refused = first.canary is not None and first.canary.outcome.failure == "connect"
        # Refused: nothing listens at that host and port (a stopped hop, or a mistyped port).
        nothing = (f": nothing listens on {urlsplit(first.canary.outcome.url).netloc} (connection refused), "
                   f"{first.name} is down or the port is wrong" if refused and first.canary.outcome.refused else "")
        return verdict("client", first.name, "hop-unreachable", "high" if refused else "medium",
                       f"{engines_clause}, but {first.name} took no connection"
                       + (nothing or f"; a fresh one fails too ({first.canary.outcome.error})" if refused else ""))
    if kind == "http":
        found = answerer(failure, evidence)
        hop = found.hop if found is not None else None
        if hop is not None:
            facts.append(fact(hop.name, "answered by", found.signal, failure.t))
        if hop is None:
            hop = front[0] if front else first
        if hop is None:
            return None
        same = hop.canary is not None and hop.canary.outcome.status == failure.status
        said = found.said if found is not None else None
        if failure.status == 429 and said is not None and (hop.role != "engine" or said.origin == "openai"):
            # A limiter's answer (a gateway's, nginx's limit_req, the OpenAI API's quota): the engines
            # behind serve (an engine turning requests away was judged above). Fewer requests fix it.
            retry = f" (Retry-After: {said.retry_after[:20]})" if said.retry_after else ""
            words = f": {_quoted(said.message)}" if said.message else ""
            return verdict("client", hop.name, "rate-limited", confidence if found.sure else "medium",
                           f"{engines_clause}, but {hop.name} limits the request rate: HTTP 429{retry}{words}; "
                           + ADVICE["rate-limited"].format(hop=hop.name))
        if hop.role == "engine":
            # 529: the Messages API's "overloaded" (Anthropic's status, vLLM's anthropic entrypoint);
            # an engine's own busy words (error_shapes cause "busy") make it overloaded by cause.
            busy = said is not None and said.cause == "busy"
            engine_kind = ("engine-overloaded" if busy else "engine-saturated" if failure.status in (429, 503, 529)
                           else "engine-error")
            words = f", saying it is overloaded: {_quoted(said.message)}" if busy and said.message else ""
            return verdict("server", hop.name, engine_kind, "high" if same else "medium",
                           f"{hop.name} answered HTTP {failure.status}{words}"
                           + ("; a fresh request gets the same" if same else "; a fresh request is served"))
        named = found is not None and found.hop is not None
        if not (same or named) and failure.status in (502, 504) and len(front) == 1:
            # A gateway's status (an engine answers neither: it is the upstream these speak of), and
            # one hop stands in front of the engines to have made it.
            return verdict("client", hop.name, "hop-error", "medium",
                           f"{engines_clause}, but {hop.name} answered HTTP {failure.status}, a gateway's status, "
                           f"and it is the only hop in front of the engines (no body or canary named it)")
        if not (same or named):
            # No body of a known shape, no counter, no canary placed the answer: the hop in front
            # may have made it, or passed on an engine's answer to this one request. Naming it
            # would be a guess, and a wrong side is the worst answer this tool can give.
            return verdict("unknown", None, "hop-error", "low",
                           f"{engines_clause}, but this round was answered HTTP {failure.status} and neither its "
                           f"body nor a hop's counters nor a fresh request placed the answer "
                           f"(the first hop in front of the engines is {hop.name})")
        return verdict("client", hop.name, "hop-error", confidence,
                       f"{engines_clause}, but {hop.name} answered HTTP {failure.status}"
                       + ("; a fresh request through it gets the same" if same else ""))
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


# --- a request refused for what it is -----------------------------------------------------------

def refused_verdict(evidence: Evidence, failure: ev.RoundFailed, verdict, facts: list) -> Verdict | None:
    """A round refused for what it sent (a 4xx other than 429): too large for a hop, past the
    model's context, or rejected for its key, model, URL or tools. The answering hop is `where`;
    the side is the client's, whose change fixes it. None: not such a refusal."""
    if failure.failure != "http" or failure.status is None or not 400 <= failure.status < 500 or failure.status == 429:
        return None
    found = answerer(failure, evidence)
    said = found.said
    hop, signal = found.hop, found.signal
    if hop is None and evidence.hops:
        hop = evidence.hops[0]
        signal = f"the body ({said.shape}) and the canaries named no hop: {hop.name} is the first the round reached"
    name = hop.name if hop is not None else "client"
    confidence = "high" if found.sure else "medium"
    if hop is not None:
        facts.append(fact(name, "answered by", signal, failure.t))
    size = _request_size(evidence, failure, facts)
    if said.cause == "too-large":
        knob = BODY_LIMIT_KNOB.get(said.origin or "", f"{name}'s request-body limit")
        return verdict("client", name, "request-too-large", confidence,
                       f"{name} refused the request with HTTP 413 ({said.shape}): {size}; "
                       + ADVICE["request-too-large"].format(hop=name, knob=knob))
    if said.cause == "context":
        where = name
        if hop is not None and hop.role != "engine":
            engines = [h for h in evidence.hops if h.role == "engine"]
            where = engines[0].name if len(engines) == 1 else name  # a gateway quoting its engine's words
        stated = _context_numbers(said)
        if stated:
            facts.append(fact(where, "context", stated, failure.t))
        return verdict("client", where, "context-exceeded", confidence,
                       f"{where} refused the prompt with HTTP {failure.status}"
                       + (f" ({stated}, as its own text states)" if stated else "")
                       + f": {_quoted(said.message)}; {size}; " + ADVICE["context-exceeded"])
    if said.cause == "upstream-path":
        return verdict("client", name, "request-rejected", confidence,
                       f"{name} answered HTTP {failure.status}, quoting its upstream ({said.relayed} provider), "
                       f"which answered FastAPI's 404 for a path it does not serve: {_quoted(said.message)}; "
                       + ADVICE["upstream-path"].format(hop=name))
    cause = said.cause if said.cause in ("key", "model", "url", "tools") else "slow" if failure.status == 408 else "request"
    if cause == "request" and carried_tools(failure):
        cause = "tools"  # the one thing such a round added; a server without a tool parser refuses it
    words = f": {_quoted(said.message)}" if said.message else ""
    return verdict("client", name, "request-rejected", confidence,
                   f"{name} refused the request itself with HTTP {failure.status}{words}; "
                   + ADVICE[cause].format(hop=name))


def _quoted(message: str) -> str:
    flat = " ".join(message.split())
    return f'"{flat[:240]}{"..." if len(flat) > 240 else ""}"'


def _context_numbers(said: Said) -> str:
    parts = []
    if said.limit_tokens is not None:
        parts.append(f"context {said.limit_tokens} tokens")
    if said.prompt_tokens is not None:
        parts.append(f"prompt {'at least ' if said.at_least else ''}{said.prompt_tokens} tokens")
    elif said.prompt_chars is not None:
        parts.append(f"prompt {said.prompt_chars} characters")
    return ", ".join(parts)


def _request_size(evidence: Evidence, failure: ev.RoundFailed, facts: list) -> str:
    """What the round sent and how its conversation grew to it, from the run's own records: the
    request body's bytes, the messages' characters at each recent round start, the last round
    answered in full. Each number said is an evidence entry (hop "client": what we sent)."""
    sent = [s for s in evidence.sent if s.round <= failure.round]
    this = sent[-1] if sent and sent[-1].round == failure.round else None
    parts = []
    if failure.request_bytes is not None:
        parts.append(f"round {failure.round} of conversation {failure.conv} sent {failure.request_bytes:,} bytes")
        facts.append(fact("client", "request body", f"{failure.request_bytes:,} bytes",
                          this.t if this is not None else failure.t))
    else:
        parts.append(f"round {failure.round} of conversation {failure.conv}")
    if this is not None:
        parts[-1] += f" ({this.messages} messages, {this.prompt_chars:,} characters)"
        earlier = sent[-2] if len(sent) > 1 else None
        if earlier is not None and this.round > earlier.round:
            per_round = (this.prompt_chars - earlier.prompt_chars) / (this.round - earlier.round)
            facts.append(fact("client", "messages grew", f"{earlier.prompt_chars:,} characters at round "
                              f"{earlier.round}, {this.prompt_chars:,} at round {this.round}", this.t))
            parts.append(f"its messages grew by {per_round:,.0f} characters per round")
    answered = evidence.last_answered
    if answered is not None and answered == failure.round - 1:
        facts.append(fact("client", "last answered round", str(answered), failure.t))
        parts.append(f"round {answered} was answered, so the conversation crossed the limit at round {failure.round}")
    elif answered is not None and answered < failure.round:
        facts.append(fact("client", "last answered round", str(answered), failure.t))
        parts.append(f"its last answered round was {answered}")
    elif failure.round == 1 or (this is not None and this.messages <= 1):
        parts.append("its first round: the very first request was over the limit")
    return ", ".join(parts)
