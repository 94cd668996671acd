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
