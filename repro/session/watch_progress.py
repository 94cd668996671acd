"""What a watch's status learns from each event: rounds by outcome, verdicts into incidents, hops
up or down from their canaries and scrapes, and each canary conversation's progress, whose last
round completed is what clears an incident (repro/core/watch_status.py says why).

The conversations in progress are this cycle's only: a cycle begins them, and ends them
(whatever they reached), so what is kept is bounded by one cycle's conversations.
"""

from __future__ import annotations

from dataclasses import dataclass

from repro.core import events as ev
from repro.core.watch_status import Incident, WatchStatus


@dataclass
class Conversation:
    """A canary conversation of the current cycle: the hops it goes through, when its first round
    started (wall clock), how many of its rounds completed."""

    path: frozenset[str]
    started_at: float | None = None
    completed: int = 0


def in_flight_of(sample: ev.ProbeSample) -> float | None:
    """A hop's requests in flight as its page says: the HTTP layer's open requests when it has the
    gauge, else an engine's batch plus its queue; None when not read (never 0 for "not read")."""
    snap = sample.snapshot
    if not snap.ok:
        return None
    if snap.in_flight is not None:
        return snap.in_flight
    if snap.running is not None:
        return snap.running + (snap.queued or 0.0)
    return None


class WatchProgress:
    """The status, fed events; `rounds`: a canary conversation's rounds (all completed: it clears)."""

    def __init__(self, status: WatchStatus, *, rounds: int, api: str | None = None) -> None:
        self.status = status
        self.rounds = rounds
        # The conversations' wire API: its canaries say whether a hop is up (another API's, with
        # --api chat,messages, are judged into incidents of their own: a hop that answers chat and
        # 404s messages is up, with an incident). None: any canary.
        self.api = api
        self.in_progress: dict[int, Conversation] = {}  # this cycle's conversations

    def begin(self, conversations: tuple[int, ...], path: frozenset[str]) -> None:
        for conv in conversations:
            self.in_progress[conv] = Conversation(path)

    def end(self, conversations: tuple[int, ...]) -> None:
        for conv in conversations:
            self.in_progress.pop(conv, None)

    def observe(self, event: ev.Event, *, wall: float, segment: str) -> list[Incident]:
        """Learn from one event at wall-clock `wall`; the incidents it cleared."""
        status = self.status
        kind = type(event)
        if kind is ev.RoundStarted:
            progress = self.in_progress.get(event.conv)
            if progress is not None and event.round == 1:  # each cycle's Driver numbers rounds from 1
                progress.started_at = wall
        elif kind is ev.RoundDone:
            status.round_ended("completed", at=wall)
            return self._completed(event.conv, wall)
        elif kind is ev.RoundFailed:
            status.round_ended("failed", at=wall)
        elif kind is ev.RoundAbandoned:
            status.round_ended("stalled", at=wall)
        elif kind is ev.VerdictReached:
            status.verdict(event.verdict.to_dict(), at=wall, segment=segment, api=event.api)
        elif kind is ev.CanaryResult:
            hop = status.hops.get(event.hop)
            if hop is not None and (self.api is None or event.outcome.api == self.api):
                outcome = event.outcome
                hop.canary(answered=outcome.ok, seconds=outcome.total_s, at=wall,
                           reason=outcome.error or (outcome.failure and str(outcome.failure)),
                           failure=outcome.failure, health_answered=outcome.health_status is not None)
                status.settle_up()
        elif kind is ev.ProbeSample:
            hop = status.hops.get(event.hop)
            if hop is not None:
                snap = event.snapshot
                hop.sampled(in_flight=in_flight_of(event), at=wall, answered=snap.ok,
                            reason=None if snap.ok else snap.error or "metrics not read")
                if hop.takes_canary:
                    status.settle_up()
        return []

    def _completed(self, conv: int, wall: float) -> list[Incident]:
        progress = self.in_progress.get(conv)
        if progress is None or progress.started_at is None:
            return []
        progress.completed += 1
        if progress.completed < self.rounds:
            return []
        del self.in_progress[conv]
        return self.status.conversation_completed(started_at=progress.started_at, at=wall, path=progress.path)
