"""The live judge's one way out: each verdict leaves as the ev.VerdictReached it emits, and nothing
else (no list of its own, no callback), for a stall and for a failed round alike."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.classify import classify
from repro.core.evidence_book import EvidenceBook
from repro.core.hop import Hop
from repro.live.live_judge import LiveJudge

HOPS = [Hop("engine-0", "http://127.0.0.1:9")]


def recorder(book: EvidenceBook) -> tuple[list[ev.Event], Callable[[ev.Event], None]]:
    """The events a judge emits, kept in order, and fed to its book as a session feeds it."""
    events: list[ev.Event] = []

    def emit(event: ev.Event) -> None:
        events.append(event)
        book.add(event)

    return events, emit


def judge_and_events() -> tuple[LiveJudge, list[ev.Event]]:
    book = EvidenceBook(HOPS, stall_after=1.0)
    events, emit = recorder(book)
    return LiveJudge(book, emit=emit, now=lambda: 2.0, sample_all=None, canary=None, canary_timeout=0.2), events


@pytest.mark.anyio
async def test_a_stall_verdict_leaves_only_as_the_event_the_judge_emits():
    judge, events = judge_and_events()
    await judge.stalled(ev.RoundStalled(t=1.5, conv=3, round=2, phase="before-first-byte", stalled_for_s=1.5,
                                started_t=0.0, last_progress_t=0.0))
    (reached,) = events
    assert isinstance(reached, ev.VerdictReached) and (reached.verdict.conversation, reached.verdict.round) == (3, 2)
    assert not hasattr(judge, "verdicts") and not hasattr(judge, "on_verdict")
    assert "on_verdict" not in inspect.signature(LiveJudge).parameters


@pytest.mark.anyio
async def test_a_failure_verdict_leaves_the_same_way():
    judge, events = judge_and_events()
    await judge.failed(ev.RoundFailed(t=1.5, conv=4, round=1, phase="before-first-byte", error="reset",
                                             failure="reset", duration_s=1.0))
    (reached,) = events
    assert isinstance(reached, ev.VerdictReached) and reached.verdict.outcome == "failed"


# --- evidence read after the fact is history --------------------------------------------------

class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def canary_entries(verdict) -> list[dict]:
    return [e for e in verdict.evidence if "canary" in str(e.get("signal", ""))]


@pytest.mark.anyio
async def test_a_failure_is_judged_by_canaries_sent_after_it_not_by_one_answered_just_before():
    """An engine answered a canary 0.4 s before it was stopped; the round that met the stopped
    engine must not read "a fresh connection works" from that answer (it did, once)."""
    book = EvidenceBook(HOPS, stall_after=1.0)
    clock = Clock(10.0)
    events, emit = recorder(book)

    sent_at: list[float] = []

    async def refused(hop: Hop) -> CanaryOutcome:
        sent_at.append(clock.t)
        clock.t += 0.01
        return CanaryOutcome(hop=hop.name, url=hop.url, failure="refused", error="connection refused")

    judge = LiveJudge(book, emit=emit, now=clock, sample_all=None, canary=refused, canary_timeout=0.5)
    emit(ev.CanaryResult(t=9.6, hop="engine-0", outcome=CanaryOutcome(hop="engine-0", url=HOPS[0].url, ok=True,
                                                                      status=200, total_s=0.01)))
    judge.wave.started_t = 9.59  # a wave (the watch's periodic canaries) began just before the failure
    await judge.failed(ev.RoundFailed(t=10.0, conv=1, round=3, phase="before-first-byte", error="reset",
                                      failure="reset", duration_s=0.2))
    assert sent_at == [10.0], "a new wave, begun after the failure"
    verdict = events[-1].verdict
    assert "fresh connection works" not in verdict.summary
    assert all(e.get("at", 10.0) >= 10.0 for e in canary_entries(verdict)), verdict.evidence


@pytest.mark.anyio
async def test_a_stall_that_resumes_while_judged_is_judged_on_what_was_read_before_it_resumed():
    """A hung engine is lifted while its stalled round is judged: the round gets bytes again, then
    the wave's canary answers. That answer is about a stack that moved on; read as "a fresh path
    works while this round is stuck" it put the engine's hang on the client (response-withheld)."""
    book = EvidenceBook(HOPS, stall_after=1.0)
    clock = Clock(12.0)
    events, emit = recorder(book)

    async def answers(hop: Hop) -> CanaryOutcome:
        # The fault was lifted: the round's stream moves on, then the canary answers.
        emit(ev.SSEReceived(t=12.2, conv=2, round=4, seq=7, chars=3))
        clock.t = 12.3
        return CanaryOutcome(hop=hop.name, url=hop.url, ok=True, status=200, total_s=0.05, events=2, done=True)

    judge = LiveJudge(book, emit=emit, now=clock, sample_all=None, canary=answers, canary_timeout=0.5)
    stall = ev.RoundStalled(t=12.0, conv=2, round=4, phase="mid-stream", stalled_for_s=3.0, started_t=8.0,
                            last_progress_t=9.0, events=6)
    emit(stall)
    await judge.stalled(stall)
    verdict = events[-1].verdict
    assert verdict.side != "client", verdict.summary
    assert canary_entries(verdict) == [] or all(e.get("at", 0) <= 12.2 for e in canary_entries(verdict))
    assert (verdict.side, verdict.kind) == ("unknown", "no-evidence")  # its only canary answered after 12.2


def test_the_book_caps_a_resumed_rounds_evidence_at_its_resumption():
    book = EvidenceBook(HOPS, stall_after=1.0)
    stall = ev.RoundStalled(t=12.0, conv=2, round=4, phase="mid-stream", stalled_for_s=3.0, started_t=8.0,
                            last_progress_t=9.0, events=6)
    ok = CanaryOutcome(hop="engine-0", url=HOPS[0].url, ok=True, status=200, total_s=0.05)
    book.add(stall)
    book.add(ev.CanaryResult(t=12.1, hop="engine-0", outcome=ok))
    book.add(ev.SSEReceived(t=12.2, conv=2, round=4, seq=7, chars=3))
    book.add(ev.SSEReceived(t=12.25, conv=9, round=1, seq=1, chars=3))  # another round's stream: no matter
    book.add(ev.CanaryResult(t=12.3, hop="engine-0", outcome=ok))
    assert book.evidence_for(stall, until=12.4).hops[0].canary.t == 12.1
    assert book.evidence_for(stall, until=12.4).stall.stalled_for_s == pytest.approx(3.2)
    book.add(ev.VerdictReached(t=12.4, verdict=classify(book.evidence_for(stall, until=12.4))))
    assert book.resumed == {} and book.flagged == {}  # bounded: forgotten once judged
