"""Rules for the first hop in front of the engines whose fresh canary fails, walked from the engines
outwards (repro.core.ledger.walk_front): it answers nothing, it passes on an engine's refusal, it
answers an error status, or it withholds the request or the response."""

from __future__ import annotations

from repro.core.evidence import Fact, canary_ok, canary_timed_out, silent_page_text
from repro.core.next_actions import ADVICE, cut_stream_advice
from repro.core.rules.case import LOAD, Case, Finding

# Stages of this round's flow through the proxy at which the request had gone on to the upstream.
SENT_ON = ("forwarded", "response_headers", "held-response")


def walk_read(case: Case) -> list[Fact]:
    """How far this round got through the proxy, then each hop in front up to the first that fails."""
    stage = case.stage
    facts = [case.fact(case.first_proxy or "proxy", "this round's flow", stage)] if stage else []
    return facts + list(case.walk.facts)


def failed_text(case: Case) -> str:
    failing = case.walk.failing
    return f"a fresh request through {failing.name} failed ({failing.canary.outcome.error})"


def hop_answers_nothing(case: Case) -> Finding | None:
    """Needs: the failing hop's fresh canary connected and got no answer in time, and its metrics
    page went silent since the stall. Concludes hop-unresponsive there: a frozen or stopped process,
    not one that withholds on purpose ("stopped answering" only of a page seen answering before;
    one never seen answering leaves a wrong metrics URL possible: medium)."""
    failing, reading = case.walk.failing, case.walk.reading
    if failing is None or not canary_timed_out(failing.canary) or reading.went_silent is None:
        return None
    seen = reading.answered_t is not None
    return Finding("client", failing.name, "hop-unresponsive", case.confidence if seen else "medium",
                   f"{case.engines_clause}, but {failing.name} answers nothing: {failed_text(case)}, and its metrics "
                   f"page {silent_page_text(reading)} (a frozen or stopped process, not one that withholds "
                   "on purpose)")


def engine_refuses_through_hop(case: Case) -> Finding | None:
    """Needs: the failing hop answered its canary a 4xx, and an engine's own fresh request got the
    same. Concludes request-rejected at that engine, medium: it refuses what was sent (a path or API
    it does not serve) and the hop passes its answer on."""
    failing = case.walk.failing
    outcome = failing.canary.outcome if failing is not None else None
    if outcome is None or outcome.failure != "http" or outcome.status is None or not 400 <= outcome.status < 500:
        return None
    same = next((e for e in case.engines if e.canary is not None and e.canary.outcome.failure == "http"
                 and e.canary.outcome.status == outcome.status), None)
    if same is None:
        return None
    return Finding("client", same.name, "request-rejected", "medium",
                   f"a fresh request through {failing.name} and one straight to {same.name} are both "
                   f"answered HTTP {outcome.status} ({same.canary.outcome.error}): {same.name} refuses "
                   f"what was sent and {failing.name} passes its answer on",
                   advice=ADVICE["url" if outcome.status == 404 else "request"].format(hop=same.name))


def hop_passes_on_refusal_for_load(case: Case) -> Finding | None:
    """Needs: the failing hop answered its canary 429, 503 or 529 in an engine's own error JSON
    (CanaryOutcome.answer_role: nginx passes the engine's body on unchanged) or in words quoting its
    upstream's error (CanaryOutcome.relayed: LiteLLM's `OpenAIException - ...`). Concludes
    engine-saturated at the engine that wrote it (engine-overloaded when the words say busy), medium:
    it turns some requests away and not others (a limit by rate or by sender lets its own fresh
    canary through), and the hop passes its answer on. The engine is the only one behind the hop,
    or the only one whose own canary got the same; a quoted answer needs nothing but engines behind
    the hop (another proxy may have written what it quotes). Else hop-error, side unknown, low:
    which hop behind it wrote the answer is not shown."""
    failing = case.walk.failing
    outcome = failing.canary.outcome if failing is not None else None
    if outcome is None or outcome.failure != "http" or outcome.status not in LOAD \
            or (outcome.relayed is None and outcome.answer_role != "engine"):
        return None
    hops = case.behind(failing)
    engines = [h for h in hops if h.role == "engine"]
    same = [h for h in engines if h.canary is not None and h.canary.outcome.status == outcome.status]
    engine = engines[0] if len(engines) == 1 else same[0] if len(same) == 1 else None
    if outcome.relayed is not None:
        how = f"quoting its upstream's error ({outcome.relayed} provider)"
        engine = engine if len(engines) == len(hops) else None
    else:
        how = "in an engine's own error JSON"
    quoting = f"a fresh request through {failing.name} was answered HTTP {outcome.status}, {how}"
    if engine is None:
        suspects = tuple(h.name for h in (hops if outcome.relayed is not None else engines))
        return Finding("unknown", None, "hop-error", "low",
                       f"{case.engines_clause}, but {quoting}; which of {', '.join(suspects)} wrote it is not shown",
                       suspects=suspects)
    direct = f", while one straight to {engine.name} is served" if canary_ok(engine) else ""
    return Finding("server", engine.name, "engine-overloaded" if outcome.cause == "busy" else "engine-saturated",
                   "medium", f"{quoting}{direct}: {engine.name} turns some requests away, and {failing.name} "
                   "passes its answer on")


def hop_answers_error(case: Case) -> Finding | None:
    """Needs: the failing hop answered its canary an error status. Concludes hop-error there: it
    answered, so nothing was withheld."""
    failing = case.walk.failing
    outcome = failing.canary.outcome if failing is not None else None
    if outcome is None or outcome.failure != "http" or outcome.status is None:
        return None
    return Finding("client", failing.name, "hop-error", case.confidence,
                   f"{case.engines_clause}, but a fresh request through {failing.name} was answered "
                   f"HTTP {outcome.status} ({outcome.error})")


def hop_cuts_connection(case: Case) -> Finding | None:
    """Needs: the failing hop's fresh canary had its connection closed or reset under it (canary
    failure "reset": a 200 stream cut after its first events, or no answer before the close).
    Concludes connection-reset there, client side: the hop closes what it was given, it withholds
    nothing; as sure as the engines' own fresh canaries make it. A cut stream gets the advice on what
    closes streams (timeouts, buffer and body limits); a close before any answer, the kind's own."""
    failing = case.walk.failing
    outcome = failing.canary.outcome if failing is not None else None
    if outcome is None or outcome.failure != "reset":
        return None
    cut = outcome.status == 200
    events = f"{outcome.events} SSE event{'' if outcome.events == 1 else 's'}"
    how = (f"it cut the stream after {events}" if cut
           else "it closed the connection before any answer")
    return Finding("client", failing.name, "connection-reset", case.confidence,
                   f"{case.engines_clause}, but {failed_text(case)}: {how} ({failing.name} withholds nothing, "
                   "it closes the connection)",
                   advice=cut_stream_advice(failing.name, outcome.status))


def hop_withholds(case: Case) -> Finding | None:
    """Needs: any other failing hop. Concludes response-withheld when the round got bytes, its
    request went on past the proxy, or the hops' sockets show the answer back at the hop that holds
    it (hop_chain's answer-held: a frozen nginx with the engine's answer in its connection out);
    else request-withheld; at the hop behind it where the stuck request was followed through the
    hops' sockets, when it was (the failing hop only waits on it). Medium when its metrics were not
    read since the stall: a frozen process is not ruled out."""
    failing, reading = case.walk.failing, case.walk.reading
    if failing is None:
        return None
    chain = case.sockets.chain
    answer_back = chain is not None and chain.stop == "answer-held" \
        and chain.where in (failing.name, case.followed_past(failing.name))
    kind = "response-withheld" if case.stall.phase != "before-first-byte" or case.stage in SENT_ON \
        or answer_back else "request-withheld"
    confidence, caveat = case.confidence, ""
    if canary_timed_out(failing.canary) and reading.present is None:
        caveat = ("; its metrics were not read since the stall, so a frozen process is not ruled out"
                  if failing.samples else "; it has no metrics page, so a frozen process is not ruled out")
        confidence = "medium"
    sockets = case.sockets
    if (deeper := case.followed_past(failing.name)) is not None:
        return Finding("client", deeper, kind, confidence if sockets.chain.seen_to_the_end else "medium",
                       f"{case.engines_clause}, but {failed_text(case)}; {sockets.waiting}: "
                       f"{failing.name} only waits on it")
    return Finding("client", failing.name, kind, confidence,
                   f"{case.engines_clause}, but {failed_text(case)}: {failing.name} withholds the "
                   f"{'response' if kind == 'response-withheld' else 'request'}{caveat}")
