"""The APIs after the first in `repro watch --api chat,messages`: each API's canaries kept apart,
judged on their own, into incidents that only that API's canaries clear; a hop's up or down
stays the first API's."""

from __future__ import annotations

import pytest

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.evidence_book import EvidenceBook
from repro.core.hop import Hop
from repro.core.watch_status import WatchStatus
from repro.live.evidence_wave import EvidenceWave
from repro.session.watch_apis import ApiCanaries
from repro.session.watch_progress import WatchProgress

pytestmark = pytest.mark.timeout(30)
HOPS = [Hop("litellm", "http://127.0.0.1:4000", role="router"), Hop("engine-0", "http://127.0.0.1:30000", role="engine")]


def canary(hop: str, api: str, t: float, ok: bool) -> ev.CanaryResult:
    status = None if ok else 404
    return ev.CanaryResult(t=t, hop=hop, outcome=CanaryOutcome(
        hop=hop, url=f"http://127.0.0.1:1/{api}", api=api, ok=ok, total_s=0.01, status=status,
        failure=None if ok else "http", error=None if ok else "HTTP 404"))


def books() -> tuple[EvidenceBook, ApiCanaries]:
    chat = EvidenceBook(HOPS, stall_after=2.0, api="chat")
    messages = EvidenceBook(HOPS, stall_after=2.0, api="messages")
    wave = EvidenceWave(HOPS, emit=messages.add, now=lambda: 0.0, sample_all=None, canary=None, canary_timeout=1.0)
    return chat, ApiCanaries("messages", messages, wave)


def test_each_book_keeps_its_own_apis_canaries_only():
    chat, messages = books()
    for book in (chat, messages.book):
        book.add(canary("litellm", "chat", 1.0, ok=True))
        book.add(canary("litellm", "messages", 1.0, ok=False))
    assert [c.outcome.api for c in chat.canaries["litellm"]] == ["chat"]
    assert [c.outcome.api for c in messages.book.canaries["litellm"]] == ["messages"]


def test_a_failed_messages_canary_is_a_verdict_of_messages_saying_chat_answers_in_the_same_wave():
    chat, messages = books()
    for hop in ("litellm", "engine-0"):
        chat.add(canary(hop, "chat", 5.1, ok=True))
    messages.book.add(canary("litellm", "messages", 5.2, ok=False))
    messages.book.add(canary("engine-0", "messages", 5.2, ok=True))
    assert messages.failed(HOPS, since=5.0) == ["litellm"]
    assert not messages.answered(HOPS, since=5.0)
    assert messages.failed(HOPS, since=6.0) == []  # nothing of a later wave read yet: no claim
    verdict = messages.judged(since=5.0, until=5.5, first=chat, first_api="chat")
    assert (verdict.side, verdict.where, verdict.kind) == ("client", "litellm", "hop-error")
    assert verdict.summary.startswith("messages (/v1/messages) canaries fail (chat, /v1/chat/completions, answers "
                                      "at every hop in the same wave): ")


def test_chat_not_read_in_the_same_wave_is_not_said_to_answer():
    chat, messages = books()
    chat.add(canary("litellm", "chat", 1.0, ok=True))  # an older wave's
    chat.add(canary("engine-0", "chat", 5.1, ok=True))
    messages.book.add(canary("litellm", "messages", 5.2, ok=False))
    messages.book.add(canary("engine-0", "messages", 5.2, ok=True))
    verdict = messages.judged(since=5.0, until=5.5, first=chat, first_api="chat")
    assert verdict.summary.startswith("messages (/v1/messages) canaries fail: ")


def test_an_apis_incident_clears_by_a_later_wave_of_that_api_not_when_a_conversation_completes():
    status = WatchStatus(started_at=0.0)
    status.watch_hops([(h.name, h.url, h.role) for h in HOPS])
    verdict = {"side": "client", "where": "litellm", "kind": "request-rejected", "summary": "messages ..."}
    status.verdict(verdict, at=10.0, api="messages")
    assert status.conversation_completed(started_at=11.0, at=20.0) == []  # a chat conversation: no proof
    assert status.api_wave_judged("responses", since=11.0, at=20.0, path={"litellm", "engine-0"}) == []
    assert status.api_wave_judged("messages", since=9.0, at=20.0, path={"litellm", "engine-0"}) == []  # before it
    assert status.api_wave_judged("messages", since=11.0, at=20.0, path={"engine-0"}) == []  # off its path
    cleared = status.api_wave_judged("messages", since=11.0, at=20.0, path={"litellm", "engine-0"})
    assert [(i.where, i.api, i.cleared_at) for i in cleared] == [("litellm", "messages", 20.0)]


def test_a_hop_is_up_or_down_by_the_first_apis_canaries_only():
    status = WatchStatus(started_at=0.0)
    status.watch_hops([(h.name, h.url, h.role) for h in HOPS])
    progress = WatchProgress(status, rounds=1, api="chat")
    progress.observe(canary("litellm", "chat", 1.0, ok=True), wall=1.0, segment="s")
    progress.observe(canary("litellm", "messages", 1.1, ok=False), wall=1.1, segment="s")
    assert status.hops["litellm"].up is True
    progress.observe(canary("litellm", "chat", 2.0, ok=False), wall=2.0, segment="s")
    assert status.hops["litellm"].up is False
