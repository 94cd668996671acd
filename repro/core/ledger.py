"""The hops in front of the engines, read at the stall: the in-flight ledger (how many requests
each holds that the hops behind it do not), how far this round's request got through the proxy
(its flow log), and the walk from the engines outwards to the first hop whose fresh canary fails."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from repro.core import events as ev
from repro.core.engine_state import EngineState
from repro.core.evidence import Evidence, Fact, HopEvidence, Reading, canary_facts, fact, metrics_facts, read_hop
from repro.core.text import number

FLOW_ORDER = ("request_seen", "held", "forwarded", "response_headers", "events_forwarded", "released", "closed")


def flow_stage(flows: Iterable[dict[str, Any]]) -> str | None:
    """How far this round's request got through the proxy, from its flow log: the last stage seen."""
    stage = None
    held = False
    for record in flows:
        name = record.get("event")
        if name == "held":
            stage, held = f"held-{record.get('stage', 'request')}", True
        elif name == "released":
            stage, held = name, False  # an admin release ends the hold; what follows is ordinary forwarding
        elif name in FLOW_ORDER and not held:
            stage = name
    return stage


def own_sample(hop: HopEvidence, since: float) -> ev.ProbeSample | None:
    """The hop's latest readable sample since the stall, if it is the hop's own page: an engine's
    page passed through a proxy says nothing of the proxy."""
    present = read_hop(hop, since).present
    if present is None or (hop.role != "engine" and present.snapshot.is_engine_page):
        return None
    return present


def held_by(evidence: Evidence, states: Sequence[EngineState]) -> dict[str, float]:
    """The in-flight ledger in front of the engines, from samples read since the stall: how many
    requests each hop holds that the hops behind it do not have. Walked from the engines outwards,
    and only while every engine's gauges, read since the stall, show idle (else a count in front
    may be requests the engines are busy with). Repro's own proxy reports its held flows itself."""
    held: dict[str, float] = {}
    since = evidence.stall.last_progress_t
    engines_idle = bool(states) and all(s.reading.idle for s in states)
    behind: float | None = 0.0 if engines_idle else None
    for hop in reversed([h for h in evidence.hops if h.role != "engine"]):
        present = own_sample(hop, since)
        if present is None:
            behind = None  # a hop not read: what it holds is unknown, so is what the next one exceeds
            continue
        snapshot = present.snapshot
        if snapshot.held:
            held[hop.name] = float(snapshot.held)
        elif snapshot.in_flight is not None and behind is not None and snapshot.in_flight > behind:
            held[hop.name] = float(snapshot.in_flight) - behind
        behind = float(snapshot.in_flight) if snapshot.in_flight is not None and behind is not None else None
    return held


def hop_facts(hop: HopEvidence, reading: Reading, stall: ev.RoundStalled, held: dict[str, float]) -> list[Fact]:
    """What was read of one hop in front: its fresh canary, its own metrics page (an engine's page
    passed through is said to be one), and what the ledger shows it holding."""
    facts = canary_facts(hop.name, hop.canary)
    if reading.present is not None and reading.present.snapshot.is_engine_page:
        facts.append(fact(hop.name, "metrics page", f"an engine's page passed through "
                          f"({reading.present.snapshot.dialect}): not counted as {hop.name}'s own",
                          reading.present.t))
    elif hop.samples:
        facts.extend(metrics_facts(hop.name, reading, True, stall)[:1])
    if hop.name in held:
        facts.append(fact(hop.name, "holds requests", number(held[hop.name]), stall.t))
    return facts


def walk_front(front: Sequence[HopEvidence], stall: ev.RoundStalled,
               held: dict[str, float]) -> tuple[HopEvidence | None, Reading | None, list[Fact]]:
    """From the engines outwards, the first hop in front whose fresh canary fails (it holds
    requests), its reading, and what was read of each hop up to it."""
    facts: list[Fact] = []
    for hop in reversed(front):
        reading = read_hop(hop, stall.last_progress_t)
        facts += hop_facts(hop, reading, stall, held)
        if hop.canary is not None and not hop.canary.outcome.ok:
            return hop, reading, facts
    return None, None, facts
