"""The live judge's one way out: each verdict leaves as the ev.VerdictReached it emits, and nothing
else (no list of its own, no callback), for a stall and for a failed round alike."""

from __future__ import annotations

import inspect

import pytest

from repro.core import events as ev
from repro.core.evidence_book import EvidenceBook
from repro.core.hop import Hop
from repro.judging.live_judge import LiveJudge

HOPS = [Hop("engine-0", "http://127.0.0.1:9")]


def judge_and_events() -> tuple[LiveJudge, list[ev.Event]]:
    book = EvidenceBook(HOPS, stall_after=1.0)
    events: list[ev.Event] = []

    def emit(event: ev.Event) -> None:
        events.append(event)
        book.add(event)

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
