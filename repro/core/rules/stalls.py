"""Rules for a stall while no hop in front fails a fresh request: an engine that refuses what was
sent (triage), a harness that waits in its own code, a connection that may be stuck or idle, no
canary to judge by, the engines running the driver's rounds behind a hop that buffers, a
connection-level wedge, and a response that stopped."""

from __future__ import annotations

from repro.core.evidence import Fact, fact
from repro.core.harness import HARNESS
from repro.core.next_actions import ADVICE
from repro.core.rules.case import Case, Finding
from repro.core.text import number


def front_counts(case: Case) -> tuple[str, tuple[Fact, ...]]:
    """What the hops in front hold, as read (an idle harness's verdict): each hop's own in-flight
    count, with its evidence entry, or that it was not read."""
    said, facts = [], []
    for hop in case.front:
        own = case.own_sample(hop)
        if hop.name in case.held_by:
            said.append(f"{hop.name} holds {number(case.held_by[hop.name])} request(s), none of them this harness's")
        elif own is not None and own.snapshot.in_flight is not None:
            facts.append(fact(hop.name, "in flight", number(own.snapshot.in_flight), own.t))
            said.append(f"{hop.name} has {number(own.snapshot.in_flight)} in flight")
        else:
            said.append(f"{hop.name}'s counters were not read")
    return (", ".join(said) if said else "no hop stands in front of the engines"), tuple(facts)


def nothing_in_front(case: Case) -> bool:
    """No hop in front fails a fresh request, and neither the ledger nor the proxy's flow log shows
    this round's request in front."""
    return case.walk.failing is None and case.holder is None and not case.stage


def engine_refuses_fresh_requests(case: Case) -> Finding | None:
    """Needs: triage (no round of its own) and an engine whose fresh request gets a 4xx (the path,
    the model, the key), nothing held in front. Concludes request-rejected there, medium: not a
    hang, and not "every fresh path answers"."""
    rejecting = next((s for s in case.states if s.status == "rejects"), None)
    if rejecting is None or case.evidence.round_watched or not nothing_in_front(case):
        return None
    outcome = rejecting.canary.outcome
    return Finding("client", rejecting.name, "request-rejected", "medium",
                   f"a fresh request straight to {rejecting.name} is answered HTTP {outcome.status} "
                   f"({outcome.error}): {rejecting.name} refuses what was sent",
                   advice=ADVICE["url" if outcome.status == 404 else "request"].format(hop=rejecting.name))


def harness_idle(case: Case) -> Finding | None:
    """Needs: triage --pid's harness with no request outstanding on any connection while every hop
    serves fresh requests. Concludes harness-idle: it waits in its own code. An idle pooled
    connection names no hop; requests a hop holds are not this harness's when it surely has none."""
    idle = case.sockets.idle
    if (idle is None or case.walk.failing is not None or not case.every_path or case.stage
            or (case.holder is not None and idle.confidence != "high")):
        return None
    counts, facts = front_counts(case)
    return Finding("client", HARNESS, "harness-idle", idle.confidence,
                   f"{case.paths} and {counts}, but {idle.text}", facts=facts, stalled_for=idle.stalled_for_s)


def answer_stopped_or_idle(case: Case) -> Finding | None:
    """Needs: triage --pid: an answer began and stopped on a connection the harness's event loop
    watches, every hop serving. Concludes connection-wedged, low, at no hop: stuck at the hop or
    idle in the pool is not known, so neither the hop nor the harness is named."""
    unsure = case.sockets.unsure
    if not unsure or not case.every_path or not nothing_in_front(case):
        return None
    counts, facts = front_counts(case)
    return Finding("client", "connection", "connection-wedged", "low",
                   f"{case.paths} and {counts}, but {unsure}: no hop is named on that alone", facts=facts)


def no_canary_answered(case: Case) -> Finding | None:
    """Needs: no fresh canary read since the round stopped, nothing in front. Concludes no-evidence,
    side unknown: client side means "every fresh path works while this round is stuck", and nothing
    said so."""
    if case.any_canary or not nothing_in_front(case):
        return None
    stopped = "got no byte" if case.stall.phase == "before-first-byte" else "stopped mid-stream"
    return Finding("unknown", None, "no-evidence", "low",
                   f"this round {stopped} and no fresh canary answered since it stopped "
                   f"({case.engines_clause}): nothing places it")


def before_first_byte(case: Case) -> bool:
    """The round got no byte, and the proxy's flow log shows no response begun for it."""
    return (case.walk.failing is None and case.stall.phase == "before-first-byte"
            and case.stage not in ("response_headers", "held-response"))


def nothing_read(case: Case) -> Finding | None:
    """Needs: no byte, no hop in front, no engine's gauges read and no canary. Concludes
    no-evidence: nothing to judge by."""
    if not before_first_byte(case) or case.front or any(s.gauges_read or s.canary is not None for s in case.states):
        return None
    return Finding("unknown", None, "no-evidence", "low", "no hop could be read and no canary ran: nothing to judge by")


def engines_cover_the_driver(case: Case) -> tuple[str, int] | None:
    """(what the engines hold, rounds outstanding) when the engines, read since the stall, run at
    least as many requests as the driver has outstanding and tokens move: the request got through."""
    evidence, states = case.evidence, case.states
    if not evidence.round_watched:
        return None  # triage has no round of its own outstanding: the engines may run anyone's requests
    outstanding = max(evidence.driver_in_flight, evidence.stall.in_flight, 1)
    present = [s for s in states if s.reading.present is not None]
    if not present or len(present) < len(states):
        return None
    running = sum(s.reading.present.snapshot.running or 0 for s in present)
    if not any(s.status == "moving" for s in states) or running < outstanding:
        return None
    return ", ".join(f"{s.name} runs {number(s.reading.present.snapshot.running)}" for s in present), outstanding


def hop_buffers_response(case: Case) -> Finding | None:
    """Needs: no byte, while the engines, read since the stall, run at least the driver's
    outstanding rounds and move tokens, and nothing is held in front. Concludes response-withheld
    at the hop nearest the engines (a proxy that buffers whole bodies); high when its own in-flight
    count holds the rounds, else other clients' requests may be what the engines run."""
    covered = engines_cover_the_driver(case) if before_first_byte(case) else None
    if covered is None or not case.front or case.holder is not None:
        return None
    holding, outstanding = covered
    buffering = case.front[-1]
    own = case.own_sample(buffering)
    counted = own is not None and own.snapshot.in_flight is not None
    confirmed = own is not None and (own.snapshot.in_flight or 0) >= outstanding
    facts = (case.fact("client", "rounds outstanding", str(outstanding)),) + (
        (fact(buffering.name, "in flight", number(own.snapshot.in_flight), own.t),) if counted else ())
    return Finding("client", buffering.name, "response-withheld", "high" if confirmed else "medium",
                   f"{holding} and move tokens, covering the driver's {outstanding} outstanding "
                   f"round(s), yet this round received no byte: {buffering.name} withholds the "
                   "response (buffering whole bodies)"
                   + (f"; its own count shows {number(own.snapshot.in_flight)} in flight" if confirmed
                      else "" if counted else "; its own in-flight count was not read"), facts=facts)


def connection_wedged(case: Case) -> Finding | None:
    """Needs: no byte while fresh paths answer. Concludes connection-wedged at the hop holding the
    request (the ledger's, the one the harness's connections wait on, or the hop behind it where
    the request was followed through the hops' sockets), else at the connection: a connection-level
    wedge, not the engine."""
    if not before_first_byte(case):
        return None
    stall, sockets, where = case.stall, case.sockets, case.ledger_hop
    reused = "its reused keep-alive connection" if stall.reused else "its connection"
    if where is None and sockets.waiting_hop is not None:
        where = sockets.waiting_hop
        reused = (f"{reused} to {sockets.waiting_on} ({sockets.waiting})" if case.evidence.round_watched
                  else f"its established connections to {sockets.waiting_on or where} ({sockets.waiting})")
    elif where is not None and (deeper := case.followed_past(where)) is not None:
        reused, where = f"{reused} to {where} ({sockets.waiting})", deeper  # `where` only waits on it
    unseen = sockets.chain is not None and not sockets.chain.seen_to_the_end and where == sockets.waiting_hop
    sure = (stall.reused or where) and case.every_path and not unseen
    return Finding("client", where or "connection", "connection-wedged", case.confidence if sure else "medium",
                   f"{case.paths}, but this round is stuck on {reused}"
                   + (f" ({stall.local})" if stall.local else "")
                   + ((f"; it went on to {where}, not seen from here" if unseen else f"; {where} holds it")
                      if where else "")
                   + ": a connection-level wedge, not the engine")


def response_stopped(case: Case) -> Finding | None:
    """Needs: nothing (the last rule). Concludes response-withheld at the hop holding it, else at
    the connection: the round's response stopped mid-stream or after its last event (the end of the
    body never came)."""
    where = case.ledger_hop
    stopped = ("after its last event (the end of the body never came)" if case.stall.phase == "after-last-event"
               else "mid-stream")
    return Finding("client", where or "connection", "response-withheld",
                   case.confidence if case.every_path else "medium",
                   f"{case.engines_clause} and {case.paths}, but this round's response stopped {stopped}"
                   + (f": {where} withholds it" if where else ""))
