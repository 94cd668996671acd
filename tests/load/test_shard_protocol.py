"""What a worker sends its parent beyond the streamed events: the first byte a stalled round gets
again, so that the parent, which judges the stall, bounds the evidence at that moment (a canary
answered after a lifted fault must not speak for a round that was no longer stuck)."""

from __future__ import annotations

import msgspec

from repro.core import events as ev
from repro.load.shard_protocol import FromWorker, ResumeWatch, encoder

STALL = ev.RoundStalled(t=5.0, conv=3, round=2, phase="mid-stream", stalled_for_s=2.0, started_t=1.0,
                        last_progress_t=3.0)


def test_only_the_first_byte_of_a_stalled_round_is_wanted():
    watch = ResumeWatch()
    sse = ev.SSEReceived(t=5.5, conv=3, round=2, seq=4, chars=2)
    assert not watch.wanted(sse)  # not stalled: the parent does not need it
    watch.sent(STALL)
    assert not watch.wanted(ev.SSEReceived(t=5.4, conv=4, round=2, seq=1))  # another round
    assert watch.wanted(sse)
    assert not watch.wanted(ev.SSEReceived(t=5.6, conv=3, round=2, seq=5))  # once
    watch.sent(STALL)
    assert watch.wanted(ev.FirstByte(t=5.7, conv=3, round=2, status=200))  # a stall before the headers
    watch.sent(STALL)
    watch.sent(ev.RoundAbandoned(t=6.0, conv=3, round=2, phase="mid-stream", stalled_for_s=3.0, duration_s=5.0))
    assert not watch.wanted(sse) and watch.stalled == set()  # ended: forgotten


def test_a_first_byte_crosses_the_pipe():
    decoded = msgspec.json.Decoder(FromWorker).decode(encoder.encode(ev.FirstByte(t=1.0, conv=1, round=1, status=200)))
    assert decoded == ev.FirstByte(t=1.0, conv=1, round=1, status=200)
