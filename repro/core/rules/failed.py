"""Rules for a round that failed while no engine is at fault (an engine at fault was judged
before): it could not connect, a hop or an engine answered an HTTP status, or its connection
broke. What the round's own failure shows, before the walk along the hops in front."""

from __future__ import annotations

from urllib.parse import urlsplit

from repro.core.error_shapes import Said
from repro.core.evidence import Fact, HopEvidence, fact
from repro.core.failures import FAILURE_WORDS, quoted
from repro.core.next_actions import ADVICE, cut_stream_advice
from repro.core.rules.case import LOAD, Case, Finding

BROKE = ("reset", "early-close", "truncated", "stream")

# --- it could not connect ---------------------------------------------------------------------


def round_could_not_connect(case: Case) -> Finding | None:
    """Needs: a connect failure where the round talks straight to an engine (or no hop was given)
    whose fresh canary answers. Concludes connection-reset, side unknown, low: a fresh connection
    works, so nothing places the one that failed."""
    if not case.failed("connect", "connect-timeout") or (case.first is not None and case.first.role != "engine"):
        return None
    return Finding("unknown", "connection", "connection-reset", "low",
                   f"{case.engines_clause}, yet this round could not connect; a fresh connection works")


def hop_took_no_connection(case: Case) -> Finding | None:
    """Needs: a connect failure to the first hop, a hop in front of the engines. Concludes
    hop-unreachable there: high when its fresh canary fails to connect too (refused: nothing
    listens at that host and port, a stopped hop or a mistyped port), else medium."""
    first = case.first
    if not case.failed("connect", "connect-timeout") or first is None or first.role == "engine":
        return None
    refused = first.canary is not None and first.canary.outcome.failure == "connect"
    nothing = (f": nothing listens on {urlsplit(first.canary.outcome.url).netloc} (connection refused), "
               f"{first.name} is down or the port is wrong" if refused and first.canary.outcome.refused else "")
    return Finding("client", first.name, "hop-unreachable", "high" if refused else "medium",
                   f"{case.engines_clause}, but {first.name} took no connection"
                   + (nothing or f"; a fresh one fails too ({first.canary.outcome.error})" if refused else ""))


# --- a hop or an engine answered an HTTP status -----------------------------------------------


def relays(case: Case) -> HopEvidence | None:
    """The hop in front that answered a failed round's status for load in words quoting its
    upstream's error (error_shapes Said.relayed: LiteLLM's `{Provider}Exception - ...`): it passed
    on what the hop behind it answered, and limited nothing itself. None: no such answer."""
    found = case.answer if case.failed("http") else None
    if found is None or found.hop is None or found.hop.role == "engine" or found.said.relayed is None \
            or case.failure.status not in LOAD:
        return None
    return found.hop


def relayed_from(case: Case) -> HopEvidence | None:
    """The engine whose answer the relaying hop passed on: with only engines behind it, the only one,
    or the only one whose fresh canary got the same status. None: not relayed, or which hop is not
    shown (a proxy or router behind it may have answered; several engines, no canary to tell)."""
    gateway = relays(case)
    if gateway is None:
        return None
    hops = case.behind(gateway)
    if not hops or any(h.role != "engine" for h in hops):
        return None
    same = [h for h in hops if same_status(case, h)]
    return hops[0] if len(hops) == 1 else same[0] if len(same) == 1 else None


def answered_read(case: Case) -> list[Fact]:
    """The hop that answered a failed round's status, and the signal that decided it; a gateway's
    answer quoting its upstream's: whose words it quotes, and the hop they are placed on."""
    found = case.answer if case.failed("http") else None
    if found is None or found.hop is None:
        return []
    facts = [fact(found.hop.name, "answered by", found.signal, case.failure.t)]
    gateway = relays(case)
    if gateway is not None:
        engine = relayed_from(case)
        upstream = engine.name if engine is not None else f"not shown which of {', '.join(h.name for h in case.behind(gateway))}"
        facts.append(fact(gateway.name, "passed on", f"its upstream's HTTP {case.failure.status}, quoting its "
                          f"{found.said.relayed} provider's error: {upstream}", case.failure.t))
    return facts


def answered_hop(case: Case) -> HopEvidence | None:
    """The hop that answered the round's status: the one evidence shows (for a gateway passing on its
    engine's answer for load, that engine), else the first in front of the engines, else the first
    hop. None: not an HTTP failure, or no hop was given."""
    if not case.failed("http"):
        return None
    if case.answer is not None and case.answer.hop is not None:
        return relayed_from(case) or case.answer.hop
    return case.front[0] if case.front else case.first


def same_status(case: Case, hop: HopEvidence) -> bool:
    """A fresh request to the hop got the round's own status."""
    return hop.canary is not None and hop.canary.outcome.status == case.failure.status


def placed(case: Case, hop: HopEvidence) -> bool:
    """The answer is placed on the hop: a fresh request gets the same, or the evidence named it (a
    gateway quoting its upstream's answer names the hop behind it, not itself)."""
    if same_status(case, hop):
        return True
    if case.answer is None or case.answer.hop is None:
        return False
    return relays(case) is None or hop.name != case.answer.hop.name


def passed_on(case: Case, hop: HopEvidence) -> str:
    """", passed on by litellm quoting it" when the engine's answer came through a gateway's words."""
    gateway = relays(case)
    return f", passed on by {gateway.name} quoting it" if gateway is not None and gateway.name != hop.name else ""


def rate_limited(case: Case) -> Finding | None:
    """Needs: an HTTP 429 a limiter wrote, placed on it (a hop in front, or the OpenAI API's quota;
    an engine turning requests away was judged before; a gateway quoting its upstream's 429 limits
    nothing itself). Concludes rate-limited at that hop: fewer requests fix it."""
    hop = answered_hop(case)
    said = case.answer.said if hop is not None and case.answer is not None else None
    if hop is None or case.failure.status != 429 or said is None or not placed(case, hop) \
            or (hop.role == "engine" and said.origin != "openai"):
        return None
    words = f": {quoted(said.message)}" if said.message else ""
    return Finding("client", hop.name, "rate-limited", case.confidence if case.answer.sure else "medium",
                   f"{case.engines_clause}, but {hop.name} limits the request rate: HTTP 429{retry_words(said)}{words}",
                   advice=ADVICE["rate-limited"].format(hop=hop.name))


def retry_words(said: Said) -> str:
    return f" (Retry-After: {said.retry_after[:20]})" if said.retry_after else ""


def rate_limit_not_placed(case: Case) -> Finding | None:
    """Needs: an HTTP 429 answered in front of the engines that nothing placed: no body of a known
    shape, counter or canary named its writer, or a gateway quoted its upstream's 429 with more than
    one hop behind it that may have written it. Concludes rate-limited, side unknown, low: the hop
    that answered may limit the rate itself or pass on a limit behind it (an engine's limit by
    rate or by sender lets a later fresh request through), and naming one would be a guess."""
    hop = answered_hop(case)
    if hop is None or case.failure.status != 429 or hop.role == "engine" or placed(case, hop):
        return None
    said = case.answer.said
    words = f": {quoted(said.message)}" if said.message else ""
    gateway = relays(case)
    which = (f", quoting its upstream ({said.relayed} provider){words}; the limit is behind it, and which of "
             f"{', '.join(h.name for h in case.behind(gateway))} wrote it is not shown" if gateway is not None else
             f"{words}; neither its body nor a hop's counters nor a fresh request placed it: {hop.name}'s own "
             f"limit, or one behind it whose answer {hop.name} passed on")
    return Finding("unknown", None, "rate-limited", "low",
                   f"{case.engines_clause}, but {hop.name} answered HTTP 429{retry_words(said)}{which}",
                   advice=ADVICE["rate-limited"].format(hop="the limiting hop"), suspects=suspects(case, hop))


def suspects(case: Case, hop: HopEvidence) -> tuple[str, ...]:
    """The hops one of which wrote an answer not placed: the one that answered and every hop behind
    it; for a gateway quoting its upstream's answer, only the hops behind it."""
    behind = tuple(h.name for h in case.behind(hop))
    return behind if relays(case) is not None else (hop.name, *behind)


def fresh_clause(same: bool) -> str:
    return "; a fresh request gets the same" if same else "; a fresh request is served"


def engine_says_overloaded(case: Case) -> Finding | None:
    """Needs: an HTTP status an engine answered in words that say it is overloaded (error_shapes
    cause "busy": the Messages API's 529 overloaded_error, vLLM's 503 "currently busy", SGLang's
    "queue is full"; or a gateway quoting them). Concludes engine-overloaded there, by its own
    words; high when a fresh request gets the same."""
    hop = answered_hop(case)
    said = case.answer.said if hop is not None and case.answer is not None else None
    if hop is None or hop.role != "engine" or said is None or said.cause != "busy":
        return None
    same = same_status(case, hop)
    words = f", saying it is overloaded: {quoted(said.message)}" if said.message else ""
    return Finding("server", hop.name, "engine-overloaded", "high" if same else "medium",
                   f"{hop.name} answered HTTP {case.failure.status}{words}{passed_on(case, hop)}" + fresh_clause(same))


def engine_answered_status(case: Case) -> Finding | None:
    """Needs: an HTTP status an engine answered (itself, or through a gateway quoting it). Concludes
    engine-saturated for 429, 503 and 529 (the Messages API's "overloaded", inferred from the status
    alone), engine-error for any other; high when a fresh request gets the same."""
    hop = answered_hop(case)
    if hop is None or hop.role != "engine":
        return None
    status, same = case.failure.status, same_status(case, hop)
    return Finding("server", hop.name, "engine-saturated" if status in (429, 503, 529) else "engine-error",
                   "high" if same else "medium",
                   f"{hop.name} answered HTTP {status}{passed_on(case, hop)}" + fresh_clause(same))


def gateway_status_of_only_hop(case: Case) -> Finding | None:
    """Needs: a 502 or 504 no body, counter or canary placed, with one hop in front of the engines.
    Concludes hop-error there, medium: a gateway's status (an engine answers neither: it is the
    upstream these speak of), and one hop stands in front to have made it."""
    hop = answered_hop(case)
    if hop is None or placed(case, hop) or case.failure.status not in (502, 504) or len(case.front) != 1:
        return None
    return Finding("client", hop.name, "hop-error", "medium",
                   f"{case.engines_clause}, but {hop.name} answered HTTP {case.failure.status}, a gateway's status, "
                   f"and it is the only hop in front of the engines (no body or canary named it)")


def status_not_placed(case: Case) -> Finding | None:
    """Needs: an HTTP status no body of a known shape, no counter and no canary placed (or a gateway
    quoting its upstream's, with more than one hop behind it). Concludes hop-error, side unknown,
    low: the hop in front may have made it or passed on an engine's answer to this one request;
    naming it would be a guess, and a wrong side is the worst answer."""
    hop = answered_hop(case)
    if hop is None or placed(case, hop):
        return None
    gateway = relays(case)
    how = (f"{gateway.name} quoted its upstream's answer ({case.answer.said.relayed} provider) and which hop "
           f"behind it wrote it is not shown" if gateway is not None else
           f"neither its body nor a hop's counters nor a fresh request placed the answer "
           f"(the first hop in front of the engines is {hop.name})")
    return Finding("unknown", None, "hop-error", "low",
                   f"{case.engines_clause}, but this round was answered HTTP {case.failure.status} and {how}",
                   suspects=suspects(case, hop))


def hop_answered_status(case: Case) -> Finding | None:
    """Needs: an HTTP status placed on a hop in front of the engines. Concludes hop-error there."""
    hop = answered_hop(case)
    if hop is None:
        return None
    same = same_status(case, hop)
    return Finding("client", hop.name, "hop-error", case.confidence,
                   f"{case.engines_clause}, but {hop.name} answered HTTP {case.failure.status}"
                   + ("; a fresh request through it gets the same" if same else ""))


# --- its connection broke ---------------------------------------------------------------------


def fresh_request_fails_too(case: Case) -> Finding | None:
    """Needs: a connection that broke (reset, closed early, truncated, an error in the stream) and
    a hop in front whose fresh canary fails too. Concludes at the one nearest the engines:
    connection-reset when its canary's connection was closed under it too (a hop that cuts streams,
    with what to check there when it cut one mid-way), else hop-error."""
    if not case.failed(*BROKE):
        return None
    failing = next((h for h in reversed(case.front) if h.canary is not None and not h.canary.outcome.ok), None)
    if failing is None:
        return None
    outcome = failing.canary.outcome
    cut = outcome.failure == "reset"
    return Finding("client", failing.name, "connection-reset" if cut else "hop-error", case.confidence,
                   f"{case.engines_clause}, but a fresh request through {failing.name} fails too "
                   f"({outcome.error})",
                   advice=cut_stream_advice(failing.name, outcome.status) if cut else None)


def keepalive_race(case: Case) -> Finding | None:
    """Needs: a reset or early close before the first byte on a connection reused after at least
    0.5 s idle, while every fresh path answers. Concludes keepalive-race at the first hop: the
    client kept the connection longer than the server does."""
    failure, first = case.failure, case.first
    if not (case.failed("reset", "early-close") and failure.reused and failure.phase == "before-first-byte"
            and failure.idle_s is not None and failure.idle_s >= 0.5 and case.every_path and first is not None):
        return None
    return Finding("client", first.name, "keepalive-race", case.confidence,
                   f"{case.engines_clause} and every fresh path answers, but this round's connection was reused "
                   f"after {failure.idle_s:.1f} s idle and {first.name} closed it as the request went out: "
                   "a keep-alive race (the client kept the connection longer than the server does)")


def engine_stream_error(case: Case) -> Finding | None:
    """Needs: an error inside the stream, with one engine and no hop in front. Concludes
    engine-error there, medium: a fresh request is served."""
    if not case.failed("stream") or len(case.engines) != 1 or case.front:
        return None
    engine = case.engines[0]
    return Finding("server", engine.name, "engine-error", "medium",
                   f"{engine.name} sent an error inside the stream; a fresh request is served")


def connection_broke(case: Case) -> Finding | None:
    """Needs: any other broken connection. Concludes connection-reset at the first hop, as sure as
    the engines' canaries when every fresh path answers, else medium."""
    if not case.failed(*BROKE):
        return None
    where = case.first.name if case.first is not None else "connection"
    return Finding("client", where, "connection-reset", case.confidence if case.every_path else "medium",
                   f"{case.engines_clause}"
                   + (" and every fresh path answers" if case.every_path else "")
                   + f", but this round's connection broke ({FAILURE_WORDS[case.failure.failure]})")
