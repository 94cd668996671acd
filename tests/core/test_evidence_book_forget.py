"""EvidenceBook.forget: what the book keeps per conversation goes once that conversation is over,
and nothing of the others does (`repro watch` starts conversations for ever)."""

from __future__ import annotations

import pytest

from repro.core import events as ev
from repro.core.evidence_book import EvidenceBook
from repro.core.hop import Hop

pytestmark = pytest.mark.timeout(30)


def test_forget_drops_the_conversations_named_and_keeps_the_others():
    book = EvidenceBook([Hop("engine-0", "http://127.0.0.1:1")], stall_after=2.0)
    for conv in (0, 1, 2):
        book.add(ev.RoundStarted(t=1.0, conv=conv, round=1, prompt_chars=10, messages=1, worker=0))
        book.add(ev.RoundConnected(t=1.1, conv=conv, round=1, local="127.0.0.1:5000", reused=False, pool_wait_s=0.0))
    book.add(ev.RoundDone(t=2.0, conv=0, round=1, status=200, reply_chars=5, duration_s=1.0, events=3, max_gap_s=0.1))
    book.forget(iter([0, 1]))  # any iterable, read once
    assert set(book.sent) == {2} and set(book.worker_of) == {2} and book.answered == {}
    assert set(book.connected) == {(2, 1)}


def test_a_page_seen_answering_once_is_said_to_have_stopped_in_every_later_verdict_of_the_watch():
    """nginx read for 10 s, then frozen for minutes: stalls of rounds begun long after the freeze
    (a watch's later verdicts of one incident) have windows with no answered read of its page.
    Each verdict still says it stopped answering, and when it last did; never "never seen"."""
    from repro.core.canary_outcome import CanaryOutcome
    from repro.core.classify import classify
    from repro.core.snapshot import Snapshot

    hops = [Hop("nginx", "http://127.0.0.1:1", metrics_url="http://127.0.0.1:1/nginx_status", role="proxy"),
            Hop("engine-0", "http://127.0.0.1:2", role="engine")]
    book = EvidenceBook(hops, stall_after=2.0)
    # The header: t=0 was 2026-12-06 03:00:00 UTC, so "when" can be said on the wall clock.
    book.add(ev.RunStarted(t=1.0, config={}, versions={}, monotonic_origin=0.0, wall_clock_origin=1796526001.0))

    def read(hop: str, t: float, ok: bool) -> None:
        snap = Snapshot(hop=hop, ok=ok, in_flight=0 if ok and hop == "nginx" else None,
                        running=0 if ok and hop == "engine-0" else None, queued=0 if ok and hop == "engine-0" else None,
                        error=None if ok else "timeout: no complete metrics page")
        book.add(ev.ProbeSample(t=t, hop=hop, snapshot=snap))

    t = 0.0
    while t <= 10.0:  # both pages answer for 10 s
        read("nginx", t, True)
        read("engine-0", t, True)
        t += 0.5
    summaries = []
    for stall_t in (14.0, 60.0, 120.0, 300.0):  # one incident's verdicts; the freeze began at 10.2 s
        while t <= stall_t + 1.0:
            read("nginx", t, False)
            read("engine-0", t, True)
            t += 0.5
        for hop, ok in (("nginx", False), ("engine-0", True)):
            book.add(ev.CanaryResult(t=stall_t + 0.9, hop=hop, outcome=CanaryOutcome(
                hop=hop, url="http://127.0.0.1:1", ok=ok, failure=None if ok else "timeout", status=200 if ok else None,
                total_s=0.01 if ok else 1.0, error=None if ok else "no answer in 1 s", health_status=200 if ok else None)))
        stall = ev.RoundStalled(t=stall_t, conv=0, round=1, phase="before-first-byte", stalled_for_s=2.0,
                                started_t=stall_t - 2.0, last_progress_t=stall_t - 2.0, in_flight=1)
        verdict = classify(book.evidence_for(stall, until=stall_t + 1.0, canaries_since=stall_t))
        assert (verdict.side, verdict.where, verdict.kind) == ("client", "nginx", "hop-unresponsive"), verdict.summary
        summaries.append(verdict.summary)
        page = [e["value"] for e in verdict.evidence if e["hop"] == "nginx" and e["signal"] == "metrics page"]
        assert page == [f"stopped answering (last answered at 03:00:10 UTC, {stall_t - 2.0 - 10.0:.1f} s before "
                        "the stall) (timeout: no complete metrics page)"], page
        assert verdict.confidence == "high", verdict
    for summary, stall_t in zip(summaries, (14.0, 60.0, 120.0, 300.0), strict=True):
        assert "never seen answering" not in summary
        assert f"stopped answering (last answered at 03:00:10 UTC, {stall_t - 12.0:.1f} s before the stall)" \
            in summary, summary
    assert set(book.page_answered) == {"nginx", "engine-0"}  # one record a hop: bounded


def test_a_page_never_seen_answering_in_the_watch_is_said_so():
    from repro.core.snapshot import Snapshot

    book = EvidenceBook([Hop("nginx", "http://127.0.0.1:1", role="proxy")], stall_after=2.0)
    for t in (1.0, 2.0, 3.0):
        book.add(ev.ProbeSample(t=t, hop="nginx", snapshot=Snapshot(hop="nginx", ok=False, error="refused")))
    stall = ev.RoundStalled(t=3.0, conv=0, round=1, phase="before-first-byte", stalled_for_s=2.0,
                            started_t=1.0, last_progress_t=1.0, in_flight=1)
    evidence = book.evidence_for(stall, until=3.5)
    assert evidence.hops[0].page_answered_t is None
