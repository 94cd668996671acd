"""What every rule of the judging reads and returns: the `Case` (the evidence, and what is derived
from it once: each engine's state, the in-flight ledger, the walk along the hops in front), a
rule's `Finding`, and the `Rule` itself as the table in repro.core.classify lists it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from repro.core import events as ev
from repro.core.engine_state import ENGINE_KIND, EngineState, assess_engine
from repro.core.evidence import Evidence, Fact, HopEvidence, Reading, fact
from repro.core.failures import Answerer, answerer
from repro.core.harness import SocketReading, socket_facts
from repro.core.kinds import Confidence, Kind, Side
from repro.core.ledger import flow_stage, held_by, own_sample, walk_front

# Statuses for load: an engine turns requests away with them, and a gateway passes them on as they came.
LOAD = (429, 503, 529)
Cleared = tuple[str, str]  # (hop, what was seen of it): a ruled-out line before the blamed hop is left out


@dataclass(frozen=True)
class Finding:
    """What a rule concludes: the verdict's own fields, the evidence entries and ruled-out lines the
    rule read for it (added to those read on the way), and, for a harness that sits idle, how long."""

    side: Side
    where: str | None
    kind: Kind
    confidence: Confidence
    summary: str
    facts: tuple[Fact, ...] = ()
    cleared: tuple[Cleared, ...] = ()
    stalled_for: float | None = None
    advice: str | None = None  # the closing advice (repro.core.next_actions), said after the summary
    # Hops a verdict that names no `where` says may be at fault (one of them wrote an answer, which
    # is not shown): never also ruled out, whatever was said of them on the way.
    suspects: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rule:
    """One step of the judging: `decide` returns a finding or None (the next rule is tried);
    `reads` the evidence entries it reads on the way and `clears` what it rules out on the way, both
    kept in the verdict of whichever rule concludes, this one or a later one (the hop a verdict
    blames is left out of its ruled-out lines)."""

    decide: Callable[[Case], Finding | None]
    reads: Callable[[Case], list[Fact]] | None = None  # None: reads nothing on the way
    clears: Callable[[Case], list[Cleared]] | None = None  # None: rules nothing out on the way

    @property
    def name(self) -> str:
        return self.decide.__name__


@dataclass(frozen=True)
class Walk:
    """The hops in front of the engines, walked from the engines outwards up to the first whose
    fresh canary fails (`failing`, None: none does), and the evidence entries read on the way."""

    failing: HopEvidence | None
    reading: Reading | None
    facts: tuple[Fact, ...]


class Case:
    """One stalled or failed round as the rules read it. Each derived reading is computed once, when
    a rule first asks for it: pure functions of the evidence, no clock, no socket."""

    def __init__(self, evidence: Evidence) -> None:
        self.evidence = evidence
        self.stall: ev.RoundStalled = evidence.stall
        self.failure: ev.RoundFailed | None = evidence.failure
        self.first: HopEvidence | None = evidence.hops[0] if evidence.hops else None
        self.first_hop = self.first.name if self.first is not None else "connection"
        self.engines = [h for h in evidence.hops if h.role == "engine"]
        self.front = [h for h in evidence.hops if h.role != "engine"]
        # A loop that lagged less than half the trigger cannot explain a silence of the whole trigger.
        self.lag_limit = max(250.0, evidence.stall_after * 1000 / 2)

    def failed(self, *kinds: str | None) -> bool:
        """The round failed, in one of these ways (repro.core.kinds.RoundFailure)."""
        return self.failure is not None and self.failure.failure in kinds

    @cached_property
    def sockets(self) -> SocketReading:
        return socket_facts(self.evidence, self.first_hop)

    @cached_property
    def answer(self) -> Answerer | None:
        """Which hop answered a failed round's HTTP status (None: not an HTTP failure)."""
        return answerer(self.failure, self.evidence) if self.failure is not None else None

    @cached_property
    def states(self) -> list[EngineState]:
        return [assess_engine(h, self.stall, self.evidence.stall_after) for h in self.engines]

    @cached_property
    def faulty(self) -> list[EngineState]:
        return [s for s in self.states if s.status in ENGINE_KIND]

    @cached_property
    def engines_serve(self) -> bool:
        """Said only when every engine's own fresh canary succeeded."""
        return bool(self.states) and all(s.canary_ok for s in self.states)

    @property
    def engines_clause(self) -> str:
        return ("engines serve fresh requests" if self.engines_serve
                else "no engine hop was given" if not self.states
                else "not every engine's fresh canary ran")

    @property
    def confidence(self) -> Confidence:
        """As sure as the engines' own fresh canaries make a verdict in front of them."""
        return "high" if self.engines_serve else "medium"

    @cached_property
    def held_by(self) -> dict[str, float]:
        return held_by(self.evidence, self.states)

    @cached_property
    def stage(self) -> str | None:
        return flow_stage(self.evidence.flows)

    @cached_property
    def walk(self) -> Walk:
        failing, reading, facts = walk_front(self.front, self.stall, self.held_by)
        return Walk(failing, reading, tuple(facts))

    @cached_property
    def every_path(self) -> bool:
        """Every hop's fresh canary ran and answered."""
        return all(h.canary is not None and h.canary.outcome.ok for h in self.evidence.hops)

    @property
    def any_canary(self) -> bool:
        return any(h.canary for h in self.evidence.hops)

    @cached_property
    def holder(self) -> HopEvidence | None:
        """The first hop in front the in-flight ledger shows holding requests."""
        return next((h for h in self.front if h.name in self.held_by), None)

    def behind(self, hop: HopEvidence) -> list[HopEvidence]:
        """The hops after `hop` in the order given: those its requests go on to."""
        names = [h.name for h in self.evidence.hops]
        return list(self.evidence.hops[names.index(hop.name) + 1:])

    @property
    def first_proxy(self) -> str | None:
        return next((h.name for h in self.evidence.hops if h.role == "proxy"), None)

    @property
    def paths(self) -> str:
        return "every fresh path answers" if self.every_path else (
            "every fresh canary that ran answered" if self.any_canary else "no canary ran")

    @property
    def ledger_hop(self) -> str | None:
        """The hop the ledger shows holding requests, else the proxy whose flow log saw this round."""
        return self.holder.name if self.holder is not None else (self.first_proxy if self.stage else None)

    def followed_past(self, hop: str) -> str | None:
        """The hop behind `hop` where the stuck request (triage --pid's harness, run's round) stopped,
        followed through the hops' sockets (repro.core.hop_chain); None when not followed past `hop`."""
        chain = self.sockets.chain
        if chain is None or chain.where == hop or hop not in [step.name for step in chain.steps]:
            return None
        return chain.where

    def own_sample(self, hop: HopEvidence) -> ev.ProbeSample | None:
        return own_sample(hop, self.stall.last_progress_t)

    def fact(self, hop: str, signal: str, value: str) -> Fact:
        """An evidence entry read at the stall."""
        return fact(hop, signal, value, self.stall.t)
