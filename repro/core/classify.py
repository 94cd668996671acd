"""Judge a stall: which side, which hop, what kind, how sure, and what was ruled out.

`classify(evidence) -> Verdict` is pure: plain data in, plain data out, no clocks or sockets,
so it is tested on hand-built evidence and re-run offline by `repro report` on a recorded log.

How it decides, in order (each step says why it trusts what it trusts):
1. The driver's own health. A client whose event loop lags cannot read what arrives: a
   client-side verdict on positive evidence, before blaming anything downstream.
2. Each engine's state, from several signals, never one gauge: progress counters over the
   window (token counts and the inter-token-latency histogram count move while tokens flow),
   the running/queued gauges (discounted when the probe marked them stale: SGLang refreshes
   them only on prefill or every 40 decode steps; vLLM can keep them non-zero after aborts),
   and a fresh-connection canary straight to the engine with its /health. An engine that
   answers /health but never generates is server-side (sglang#33858), even when it looks idle.
3. With every engine healthy, the stall is in front of them. Canaries through each hop find
   the first hop that fails a fresh request; the in-flight ledger (proxy held flows, router
   active requests) and the proxy's flow log for this round's own connection say whether the
   request or the response is being withheld. Every fresh path working while the round's
   reused connection stays stuck is a connection-level wedge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from repro.core import events as ev
from repro.core.text import number
from repro.core.verdict import Verdict


@dataclass(frozen=True)
class HopEvidence:
    """One hop around the stall: its probe samples over the window and a fresh canary."""

    name: str
    role: str  # proxy | router | engine
    samples: tuple[ev.ProbeSample, ...] = ()  # oldest first
    canary: ev.CanaryResult | None = None  # fresh connection straight to this hop


@dataclass(frozen=True)
class Evidence:
    stall: ev.RoundStalled  # stalled_for_s counts up to the moment the evidence was collected
    hops: tuple[HopEvidence, ...]  # ordered from the client side, the first is what the driver talks to
    stall_after: float
    driver_in_flight: int = 1
    loop_lag_p99_ms: float | None = None
    flows: tuple[dict[str, Any], ...] = ()  # the proxy flow-log records of this round's connection


# --- engine state -----------------------------------------------------------------------------

PROGRESS_COUNTERS = ("itl_count", "gen_tokens_total")


@dataclass
class EngineState:
    name: str
    status: str  # idle | moving | hung | saturated | slow | frontend-lost | unreachable | unknown
    running: float | None = None
    queued: float | None = None
    progress: float | None = None  # tokens (or ITL observations) per second over the window
    stale: bool = False
    canary_ok: bool | None = None
    notes: list[str] = field(default_factory=list)
    evidence: list[dict[str, Any]] = field(default_factory=list)


def _latest_ok(samples: Sequence[ev.ProbeSample]) -> ev.ProbeSample | None:
    for sample in reversed(samples):
        if sample.snapshot.ok:
            return sample
    return None


def _progress_rate(samples: Sequence[ev.ProbeSample], since: float) -> float | None:
    """Counter movement per second across the samples taken since the round stopped progressing.
    None when fewer than two readable samples cover that span."""
    usable = [s for s in samples if s.snapshot.ok]
    window = [s for s in usable if s.t >= since]
    if len(window) < 2:
        # Fall back to the last two samples: a short window still says whether tokens flow.
        window = usable[-2:]
    if len(window) < 2:
        return None
    first, last = window[0], window[-1]
    span = last.t - first.t
    if span <= 0:
        return None
    for counter in PROGRESS_COUNTERS:
        a, b = getattr(first.snapshot, counter), getattr(last.snapshot, counter)
        if a is not None and b is not None:
            return max(0.0, (b - a) / span)
    return None


def _recent_seconds_per_token(samples: Sequence[ev.ProbeSample]) -> float | None:
    """Mean inter-token latency over the last span in which the ITL histogram moved.

    Tells an engine that is slow per token (each step slower than the trigger, so a window can
    hold no token at all) from one that stopped: a hang keeps the last healthy mean."""
    usable = [s.snapshot for s in samples
              if s.snapshot.ok and s.snapshot.itl_count is not None and s.snapshot.itl_sum is not None]
    for newer, older in zip(reversed(usable), list(reversed(usable))[1:]):
        count = newer.itl_count - older.itl_count
        if count > 0:
            return max(0.0, (newer.itl_sum - older.itl_sum) / count)
    return None


def _canary_text(canary: ev.CanaryResult | None) -> str:
    if canary is None:
        return "no canary"
    outcome = canary.outcome
    if outcome.ok:
        return f"fresh canary {outcome.status or 200} in {outcome.total_s:.2f} s"
    return f"fresh canary failed ({outcome.error or 'status ' + str(outcome.status)})"


def _health_ok(canary: ev.CanaryResult | None) -> bool | None:
    if canary is None or canary.outcome.health_status is None:
        return None
    return canary.outcome.health_status == 200


def _connect_failed(canary: ev.CanaryResult | None) -> bool:
    return canary is not None and canary.outcome.failure == "connect"


def assess_engine(hop: HopEvidence, stall: ev.RoundStalled, stall_after: float) -> EngineState:
    latest = _latest_ok(hop.samples)
    state = EngineState(name=hop.name, status="unknown")
    canary = hop.canary
    state.canary_ok = None if canary is None else canary.outcome.ok
    if canary is not None:
        state.evidence.append({"hop": hop.name, "signal": "canary", "value": _canary_text(canary),
                               "at": canary.t})
    if _connect_failed(canary):
        state.status = "unreachable"
        return state
    if latest is not None:
        state.running, state.queued = latest.snapshot.running, latest.snapshot.queued
        state.stale = bool(latest.snapshot.stale)
        state.progress = _progress_rate(hop.samples, stall.last_progress_t)
        state.evidence.append({"hop": hop.name, "signal": "running/queued",
                               "value": f"{number(state.running, "?")} running, {number(state.queued, "?")} queued"
                                        + (" (stale gauge)" if state.stale else ""),
                               "at": latest.t})
        if state.progress is not None:
            state.evidence.append({"hop": hop.name, "signal": "token progress",
                                   "value": f"{state.progress:.1f}/s", "at": latest.t})
    elif hop.samples:
        state.notes.append(f"metrics unreadable ({hop.samples[-1].snapshot.error})")
    busy = (state.running or 0) > 0 or (state.queued or 0) > 0
    moving = state.progress is not None and state.progress > 0
    canary_failed = state.canary_ok is False

    if moving:
        per_request_interval = state.running / state.progress if state.progress and state.running else None
        if (state.queued or 0) > 0:
            # Tokens move but requests wait: the stalled round is most likely one of the waiting.
            state.status = "saturated"
            canary_wait = canary.outcome.total_s if canary is not None else 0.0
            if not canary_failed and canary_wait < stall_after / 2:
                state.notes.append(f"a fresh request was served in {canary_wait:.2f} s, so the queue moves")
                state.stale = True  # lowers confidence: the queue gauge may lag (SGLang refresh cadence)
        elif per_request_interval is not None and per_request_interval >= stall_after / 2:
            # Each running request gets a token less often than half the trigger. (With nothing
            # running, a trickle of tokens is a canary or a short request, not slowness.)
            state.status = "slow"
        else:
            state.status = "moving"
        return state
    if canary_failed:
        health = _health_ok(canary)
        if health is False:
            state.status = "unreachable"
        elif busy:
            per_token = _recent_seconds_per_token(hop.samples)
            if per_token is not None and per_token >= stall_after / 2:
                state.status = "slow"
                state.evidence.append({"hop": hop.name, "signal": "recent inter-token latency",
                                       "value": f"{per_token:.2f} s per token", "at": stall.t})
            else:
                state.status = "hung"
        else:
            state.status = "frontend-lost"
        return state
    if state.canary_ok:
        # A fresh request went through: whatever the gauges say, the engine serves.
        if busy and state.progress is not None:
            state.notes.append(
                f"gauges say {number(state.running, "?")} running/{number(state.queued, "?")} queued, but no token moved "
                "and a fresh request was served: the gauges are stale (SGLang refresh cadence, "
                "or vLLM gauges kept after aborted requests)"
            )
        state.status = "idle"
        return state
    # No canary: gauges and counters alone.
    if latest is None:
        return state
    if busy and state.progress == 0 and not state.stale:
        state.status = "hung"
    elif not busy:
        state.status = "idle"
    return state


ENGINE_KIND = {
    "hung": "engine-hung",
    "saturated": "engine-saturated",
    "slow": "engine-slow",
    "frontend-lost": "engine-frontend-lost",
    "unreachable": "engine-unreachable",
}


# --- the ledger in front of the engines --------------------------------------------------------


def _flow_stage(flows: Iterable[dict[str, Any]]) -> str | None:
    """How far this round's request got through the proxy, from its flow log: the last stage seen."""
    order = ("request_seen", "held", "forwarded", "response_headers", "events_forwarded", "released", "closed")
    stage = None
    for record in flows:
        name = record.get("event")
        if name == "held":
            stage = f"held-{record.get('stage', 'request')}"
        elif name == "released":
            stage = name  # an admin release ends the hold; what follows is ordinary forwarding
        elif name in order and (stage is None or not stage.startswith("held")):
            stage = name
    return stage


def classify(evidence: Evidence) -> Verdict:
    stall = evidence.stall
    ruled_out: list[str] = []
    facts: list[dict[str, Any]] = []

    def verdict(side: str, where: str | None, kind: str, confidence: str, summary: str) -> Verdict:
        return Verdict(
            side=side, where=where, kind=kind, confidence=confidence, phase=stall.phase, conversation=stall.conv,
            round=stall.round, stalled_for_s=round(stall.stalled_for_s, 3), evidence=facts, ruled_out=ruled_out,
            summary=summary,
        )

    lag = evidence.loop_lag_p99_ms
    lag_limit = max(250.0, evidence.stall_after * 1000 / 4)
    if lag is not None:
        facts.append({"hop": "client", "signal": "event-loop lag p99", "value": f"{lag:.0f} ms", "at": stall.t})
        if lag >= lag_limit:
            return verdict("client", "client", "client-overloaded", "high",
                           f"the driver's own event loop lagged {lag:.0f} ms (p99): it could not read what arrived")
        ruled_out.append(f"client: event-loop lag p99 {lag:.0f} ms, below {lag_limit:.0f} ms")

    engines = [h for h in evidence.hops if h.role == "engine"]
    states = [assess_engine(h, stall, evidence.stall_after) for h in engines]
    for state in states:
        facts.extend(state.evidence)

    faulty = [s for s in states if s.status in ENGINE_KIND]
    if faulty:
        worst = faulty[0]
        kind = ENGINE_KIND[worst.status]
        confidence = "high"
        # A failed fresh canary is positive evidence of its own; without one, a verdict resting
        # on gauges known to go stale is less sure.
        if worst.canary_ok is None or (worst.stale and worst.canary_ok is not False):
            confidence = "medium"
        for state in states:
            if state is not worst:
                ruled_out.append(f"{state.name}: {state.status}")
        _rule_out_front(evidence, ruled_out)
        others = f" (also {', '.join(s.name for s in faulty[1:])})" if len(faulty) > 1 else ""
        reasons = {
            "hung": "holds requests but no token moves, and a fresh request gets no token",
            "saturated": "tokens move but requests queue, and a fresh request waits in the queue",
            "slow": "tokens move, but slower per request than the stall trigger",
            "frontend-lost": "answers /health yet never answers a fresh request, while its gauges show idle (sglang#33858)",
            "unreachable": "refuses or drops fresh connections",
        }
        notes = ("; " + "; ".join(worst.notes)) if worst.notes else ""
        return verdict("server", worst.name, kind, confidence,
                       f"{worst.name} {reasons[worst.status]}{others}{notes}")

    for state in states:
        detail = f"{state.name}: {state.status}"
        if state.running is not None:
            detail += f", {number(state.running, "?")} running, {number(state.queued, "?")} queued"
        if state.progress is not None:
            detail += f", tokens {state.progress:.1f}/s"
        detail += f"; {_canary_text(_canary_of(evidence, state.name))}"
        if state.notes:
            detail += f" ({'; '.join(state.notes)})"
        ruled_out.append(detail)
    engines_known = any(s.status in ("idle", "moving") for s in states)

    front = [h for h in evidence.hops if h.role != "engine"]
    held_by = _held_by(evidence, states)
    stage = _flow_stage(evidence.flows)
    if stage:
        facts.append({"hop": _first_proxy_name(evidence) or "proxy", "signal": "this round's flow",
                      "value": stage, "at": stall.t})

    # Walk from the engines outwards: the first hop in front whose fresh canary fails holds requests.
    failing = None
    for hop in reversed(front):
        canary = hop.canary
        if canary is not None:
            facts.append({"hop": hop.name, "signal": "canary", "value": _canary_text(canary), "at": canary.t})
        if hop.name in held_by:
            facts.append({"hop": hop.name, "signal": "holds requests", "value": number(held_by[hop.name]),
                          "at": stall.t})
        if canary is not None and not canary.outcome.ok:
            failing = hop
            break
    confidence = "high" if engines_known else "medium"

    if failing is not None:
        kind = "response-withheld" if stall.phase != "before-first-byte" or stage in (
            "forwarded", "response_headers", "held-response") else "request-withheld"
        for hop in front:
            if hop is not failing and _canary_ok(hop):
                ruled_out.append(f"{hop.name}: {_canary_text(hop.canary)}")
        return verdict("client", failing.name, kind, confidence,
                       f"engines serve fresh requests, but a fresh request through {failing.name} fails: "
                       f"{failing.name} withholds the {'response' if kind == 'response-withheld' else 'request'}")

    for hop in front:
        if _canary_ok(hop):
            ruled_out.append(f"{hop.name}: {_canary_text(hop.canary)}")

    holder = next((h for h in front if h.name in held_by), None)
    where = holder.name if holder is not None else (_first_proxy_name(evidence) if stage else None)
    if stall.phase == "before-first-byte" and stage not in ("response_headers", "held-response"):
        if not engines_known and not front:
            return verdict("unknown", None, "no-evidence", "low",
                           "no hop could be read and no canary ran: nothing to judge by")
        reused = "its reused keep-alive connection" if stall.reused else "its connection"
        return verdict(
            "client", where or "connection", "connection-wedged",
            confidence if stall.reused or where else "medium",
            f"every fresh path answers, but this round is stuck on {reused}"
            + (f" ({stall.local})" if stall.local else "")
            + (f"; {where} holds it" if where else "")
            + ": a connection-level wedge, not the engine",
        )
    return verdict(
        "client", where or "connection", "response-withheld", confidence,
        "the engines finished and serve fresh requests, but this round's response stopped "
        + ("after its last event (the end of the body never came)" if stall.phase == "after-last-event"
           else "mid-stream")
        + (f": {where} withholds it" if where else ""),
    )


def _held_by(evidence: Evidence, states: Sequence[EngineState]) -> dict[str, float]:
    """The in-flight ledger in front of the engines: how many requests each hop holds that the
    next hop does not have. A proxy reports its held flows itself; a router holds what its
    workers' active counts exceed the engines' own running + queued by."""
    held: dict[str, float] = {}
    engines_total = sum((s.running or 0) + (s.queued or 0) for s in states if s.running is not None)
    for hop in evidence.hops:
        latest = _latest_ok(hop.samples)
        if latest is None:
            continue
        snapshot = latest.snapshot
        if hop.role == "proxy" and snapshot.held:
            held[hop.name] = float(snapshot.held)
        elif hop.role == "router" and snapshot.in_flight is not None and states:
            excess = float(snapshot.in_flight) - engines_total
            if excess > 0 and all(s.status == "idle" for s in states):
                held[hop.name] = excess
    return held


def _first_proxy_name(evidence: Evidence) -> str | None:
    return next((h.name for h in evidence.hops if h.role == "proxy"), None)


def _canary_ok(hop: HopEvidence) -> bool:
    return hop.canary is not None and hop.canary.outcome.ok


def _canary_of(evidence: Evidence, name: str) -> ev.CanaryResult | None:
    return next((h.canary for h in evidence.hops if h.name == name), None)


def _rule_out_front(evidence: Evidence, ruled_out: list[str]) -> None:
    for hop in evidence.hops:
        if hop.role != "engine" and _canary_ok(hop):
            ruled_out.append(f"{hop.name}: {_canary_text(hop.canary)}")
