"""What a watch keeps stops at its cap: hops renamed every cycle leave no canary lists behind in
the books, and cleared incidents of ever new hops are forgotten oldest first."""

from __future__ import annotations

import pytest

from repro.core import events as ev
from repro.core.canary import CanaryOutcome
from repro.core.evidence_book import CANARIES_PER_HOP, EvidenceBook
from repro.core.hop import Hop
from repro.core.watch_status import CLEARED_INCIDENTS_KEPT, WatchStatus

pytestmark = pytest.mark.timeout(60)


def test_a_book_keeps_canaries_of_its_own_hops_only_and_the_last_few():
    book = EvidenceBook([Hop("engine-0", "http://127.0.0.1:1")], stall_after=1.0)
    for i in range(10 * CANARIES_PER_HOP):
        for hop in ("engine-0", f"renamed-{i}"):
            book.add(ev.CanaryResult(t=float(i), hop=hop, outcome=CanaryOutcome(hop=hop, url="http://127.0.0.1:1", ok=True, total_s=0.01)))
    assert set(book.canaries) == {"engine-0"}
    assert len(book.canaries["engine-0"]) == CANARIES_PER_HOP


def test_cleared_incidents_stop_at_their_cap_oldest_cleared_forgotten():
    status = WatchStatus(started_at=0.0)
    for i in range(3 * CLEARED_INCIDENTS_KEPT):
        status.verdict({"side": "server", "where": f"engine-{i}", "kind": "engine-hung", "summary": "s"}, at=i)
        status.conversation_completed(started_at=i + 0.5, at=i + 0.9)
    assert len(status.incidents) == CLEARED_INCIDENTS_KEPT
    assert min(i.cleared_at for i in status.incidents.values()) == pytest.approx(2 * CLEARED_INCIDENTS_KEPT + 0.9)


def test_verdict_series_stop_at_their_cap_and_a_hops_history_at_its_points():
    from repro.core.watch_status import HOP_POINTS_KEPT, VERDICT_SERIES_KEPT, HopState

    status = WatchStatus(started_at=0.0)
    for i in range(2 * VERDICT_SERIES_KEPT):
        status.verdict({"side": "server", "where": f"engine-{i}", "kind": "engine-hung", "summary": "s"}, at=i)
    assert len(status.verdict_counts) == VERDICT_SERIES_KEPT
    assert ("server", f"engine-{2 * VERDICT_SERIES_KEPT - 1}", "engine-hung") in status.verdict_counts
    hop = HopState(name="h", url="http://127.0.0.1:1")
    for i in range(2 * HOP_POINTS_KEPT):  # canaries every 0.1 s: within the hour, capped by count
        hop.canary(answered=True, seconds=0.01, reason=None, at=i * 0.1)
    assert len(hop.history) == HOP_POINTS_KEPT
