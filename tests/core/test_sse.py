import random

from hypothesis import given, settings
from hypothesis import strategies as st

from repro.core.sse import SSEDecoder


def decode_all(chunks):
    decoder = SSEDecoder()
    events = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events, decoder


STREAM = (
    b": keep-alive\n\n"
    b'data: {"a": 1}\n\n'
    b"event: message\ndata: line one\ndata: line two\n\n"
    b"id: 7\ndata: x\n\n"
    b"data: [DONE]\n\n"
)


def test_whole_stream():
    events, decoder = decode_all([STREAM])
    assert [e.data for e in events] == [b'{"a": 1}', b"line one\nline two", b"x", b"[DONE]"]
    assert events[1].event == "message"
    assert events[2].id == "7"
    assert decoder.comments == 1


def test_every_split_point_gives_the_same_events():
    expected, _ = decode_all([STREAM])
    for cut in range(len(STREAM) + 1):
        events, _ = decode_all([STREAM[:cut], STREAM[cut:]])
        assert events == expected, cut


def test_byte_by_byte_and_merged():
    expected, _ = decode_all([STREAM])
    assert decode_all([bytes([b]) for b in STREAM])[0] == expected
    merged, _ = decode_all([STREAM * 3])
    assert [e.data for e in merged] == [e.data for e in expected] * 3
    assert merged[4].id == "7"  # the last event id persists, per the spec


def test_crlf_and_cr_line_endings_split_anywhere():
    lf_events, _ = decode_all([STREAM])
    for ending in (b"\r\n", b"\r"):
        stream = STREAM.replace(b"\n", ending)
        for cut in range(len(stream) + 1):
            assert decode_all([stream[:cut], stream[cut:]])[0] == lf_events, (ending, cut)


def test_no_space_after_colon_and_event_without_data():
    events, _ = decode_all([b"data:tight\n\nevent: ping\n\n"])
    assert [e.data for e in events] == [b"tight"]


def test_unterminated_event_is_pending_not_dispatched():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: [DONE]\n") == []
    assert decoder.pending == b"data: [DONE]\n"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.binary(min_size=0, max_size=40).filter(lambda b: b"\r" not in b and b"\n" not in b), max_size=8),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
    st.randoms(use_true_random=False),
)
def test_arbitrary_payloads_and_splits(payloads, ending, rng: random.Random):
    stream = b"".join(b"data: " + p + ending + ending for p in payloads)
    cuts = sorted(rng.randrange(len(stream) + 1) for _ in range(rng.randrange(5))) if stream else []
    chunks, last = [], 0
    for cut in cuts:
        chunks.append(stream[last:cut])
        last = cut
    chunks.append(stream[last:])
    events, _ = decode_all(chunks)
    # A payload that is empty still dispatches (one empty data line) per the spec.
    assert [e.data for e in events] == payloads


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=10))
def test_garbage_never_raises(chunks):
    events, _ = decode_all(chunks)
    assert all(isinstance(e.data, bytes) for e in events)
