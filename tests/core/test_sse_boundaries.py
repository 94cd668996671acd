"""EventBoundaries (where events end, for the proxy) and SSEDecoder (the driver's events) agree.

Both read the same WHATWG line rules; here they get the same random streams (events with several
fields, comments, events without data, stray blank lines; LF, CRLF and CR line ends, one style
per stream or mixed) split at random points, and must agree chunk by chunk.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from repro.core.sse import EventBoundaries, SSEDecoder

ENDINGS = (b"\n", b"\r\n", b"\r")
payloads = st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"n").replace(b"\r", b"r"))


@st.composite
def sse_streams(draw):
    """(stream, [(end offset, data, offset of its CRLF's LF or None)] per dispatched event)."""
    mixed = draw(st.booleans())
    style = draw(st.sampled_from(ENDINGS))
    out = bytearray()
    events = []

    def line(text: bytes) -> int | None:
        """Append one line; returns where the LF of a CRLF line end is, if it has one."""
        ending = draw(st.sampled_from(ENDINGS)) if mixed else style
        if not text and ending == b"\n" and out.endswith(b"\r"):
            ending = b"\r\n"  # an LF right after a CR would only complete that CR's line end
        out.extend(text + ending)
        return len(out) - 1 if ending == b"\r\n" else None

    for _ in range(draw(st.integers(0, 6))):
        for _ in range(draw(st.integers(0, 1))):
            line(b"")  # a stray blank line: dispatches nothing
        data = []
        for _ in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(["data", "data-tight", "data-bare", "event", "id", "comment", "retry",
                                         "other"]))
            value = draw(payloads)
            if kind == "data":
                line(b"data: " + value)
                data.append(value)
            elif kind == "data-tight":
                line(b"data:" + value)
                data.append(value[1:] if value[:1] == b" " else value)
            elif kind == "data-bare":
                line(b"data")
                data.append(b"")
            elif kind == "event":
                line(b"event: x" + value)
            elif kind == "id":
                line(b"id: " + value)
            elif kind == "comment":
                line(b":" + value)
            elif kind == "retry":
                line(b"retry: 5")
            else:
                line(b"dat" + value.replace(b":", b"") + b"x: " + value)  # a field that only looks like data
        lf = line(b"")
        if data:
            events.append((len(out), b"\n".join(data), lf))
    return bytes(out), events


@st.composite
def chunked(draw):
    stream, events = draw(sse_streams())
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    return stream, events, chunks


@settings(max_examples=600, deadline=None)
@given(chunked())
def test_boundaries_and_decoder_agree(case):
    stream, events, chunks = case
    decoder, boundaries = SSEDecoder(), EventBoundaries()
    decoded, ends, start = [], [], 0
    for chunk in chunks:
        decoded += decoder.feed(chunk)
        found = boundaries.ends(chunk)
        assert all(a < b for a, b in zip([0, *found], found, strict=False)) and all(end <= len(chunk) for end in found)
        if start and stream[start - 1:start + 1] == b"\r\n" and chunk:
            assert boundaries.lf_rest == 1
        ends += [start + end for end in found]
        assert len(ends) == len(decoded)  # chunk by chunk, not only in total
        start += len(chunk)
    assert [e.data for e in decoded] == [data for _, data, _ in events]
    for found, (end, _, lf) in zip(ends, events, strict=True):
        # A CRLF split between its CR and LF ends at the CR: the event is complete there
        # (the decoder dispatches it), and the proxy cannot wait for the next chunk.
        split = lf is not None and lf in {sum(map(len, chunks[:k])) for k in range(1, len(chunks))}
        assert found == (end - 1 if split else end)
    for k, end in enumerate(ends, 1):  # a cut at the k-th end passes exactly k events
        assert len(SSEDecoder().feed(stream[:end])) == k


def test_cr_only_line_ends():
    stream = b"data: a\r\rdata: b\r\r"
    assert EventBoundaries().ends(stream) == [9, 18]
    assert len(SSEDecoder().feed(stream)) == 2


def test_crlf_split_between_cr_and_lf():
    boundaries = EventBoundaries()
    assert boundaries.ends(b"data: a\r\n\r") == [10]
    assert boundaries.ends(b"\ndata: b\r\n") == [] and boundaries.lf_rest == 1
    assert boundaries.ends(b"\r\n") == [2] and boundaries.lf_rest == 0


def test_offsets_within_and_across_chunks():
    boundaries = EventBoundaries()
    assert boundaries.ends(b"data: a\r\n\r\ndata: b\n\nda") == [11, 20]
    assert boundaries.ends(b"ta: c\n") == []
    assert boundaries.ends(b"\n") == [1]


def test_comments_and_events_without_data_are_not_events():
    stream = b": ping\n\nevent: x\n\n\n\ndata\n\n"
    assert EventBoundaries().ends(stream) == [len(stream)]
    assert len(SSEDecoder().feed(stream)) == 1
