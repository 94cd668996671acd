"""Memory stays flat in a long run: what the run keeps per connection must not grow with the
number of connections ever made (faults, keep-alive expiry and retries make new ones all run long).

Found by benchmarks/soak.py: RSS grew ~5 MB per 1000 rounds through the whole 20 000-round soak,
and nearly all of the growth was EvidenceBook.flows (one deque of flow records per client
address ever seen)."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from repro.core import events as ev
from repro.core.evidence_book import EvidenceBook
from repro.core.hop import Hop

# tracemalloc makes the 2 500 connections ~10 s alone; more on a loaded machine.
pytestmark = pytest.mark.timeout(180)

FLOW_EVENTS = ("request_seen", "forwarded", "response_headers", "events_forwarded", "events_forwarded",
               "events_forwarded", "released", "closed")


def feed_connections(book: EvidenceBook, first: int, count: int, requests: int = 8) -> None:
    """`count` client connections, each carrying `requests` rounds before it is cut or expires."""
    for n in range(first, first + count):
        client = f"127.0.0.1:{10000 + n}"
        for r in range(requests):
            for i, name in enumerate(FLOW_EVENTS):
                book.add(ev.ProxyFlow(t=n * 0.1 + r * 0.01 + i * 0.001, data={
                    "flow": f"flow-{n}-{r}", "client": client, "event": name, "stage": "response", "fault": None,
                    "status": 200, "events": i}))


def retained(book_ops) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        book = EvidenceBook([Hop("proxy", "http://127.0.0.1:1", None, "proxy")], stall_after=1.0)
        book_ops(book)
        gc.collect()
        size, _ = tracemalloc.get_traced_memory()
        return size
    finally:
        tracemalloc.stop()


def test_the_evidence_book_does_not_grow_with_the_number_of_connections_ever_made():
    warm = retained(lambda book: feed_connections(book, 0, 500))
    # Four times the connections, all under MAX_CONNECTIONS_TRACKED: only forgetting closed ones
    # keeps this flat (the cap alone would let it grow 4x).
    long = retained(lambda book: feed_connections(book, 0, 2_000))
    assert long < 1.25 * warm, f"{warm >> 10} KiB after 500 connections, {long >> 10} KiB after 2 000"
