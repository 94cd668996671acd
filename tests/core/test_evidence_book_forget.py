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
