"""The OpenAI chunk reader on its own: SSE events in, reply pieces, finish reason, usage, done or failure."""

import json

from repro.core.openai_chunks import ChunkReader
from repro.core.sse import SSEDecoder, SSEEvent


def event(obj) -> SSEEvent:
    return SSEEvent(obj if isinstance(obj, bytes) else json.dumps(obj).encode())


def delta(**fields) -> SSEEvent:
    return event({"choices": [{"index": 0, "delta": fields, "finish_reason": None}]})


def test_content_and_reasoning_pieces_are_kept_in_order_and_counted():
    reader = ChunkReader()
    chars, done, failure = reader.feed([delta(reasoning_content="think "), delta(content="hello "),
                                        delta(content="", reasoning_content="more")])
    assert (chars, done, failure) == (len("think hello more"), False, None)
    assert reader.reply == ["think ", "hello ", "more"] and reader.events == 3
    chars, done, failure = reader.feed([delta(content="world"), delta(role="assistant")])
    assert (chars, done, failure) == (5, False, None)
    assert "".join(reader.reply) == "think hello moreworld" and reader.events == 5
    assert reader.finish_reason is None and reader.completion_tokens is None and not reader.done


def test_finish_reason_usage_and_done():
    reader = ChunkReader()
    finish = event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    usage = event({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})
    assert reader.feed([delta(content="a"), finish]) == (1, False, None)
    assert reader.feed([usage, event(b"[DONE]")]) == (0, True, None)
    assert reader.finish_reason == "length"
    assert (reader.prompt_tokens, reader.completion_tokens) == (11, 7)
    assert reader.done and reader.events == 4
    # A later read without [DONE] is not done itself, but the stream stays done.
    assert reader.feed([delta(content="late")]) == (4, False, None)
    assert reader.done


def test_unknown_fields_and_a_chunk_without_choices_are_fine():
    reader = ChunkReader()
    odd = event({"id": "x", "object": "chat.completion.chunk", "choices": [{"delta": None, "logprobs": {"a": 1}}]})
    assert reader.feed([odd, event({})]) == (0, False, None)
    assert reader.events == 2 and reader.reply == []


def test_malformed_json_stops_at_that_event_and_names_its_number():
    reader = ChunkReader()
    reader.feed([delta(content="ok ")])
    chars, done, failure = reader.feed([delta(content="x"), event(b"{not json"), delta(content="never")])
    assert chars == 1 and not done
    assert failure.startswith("malformed JSON in SSE event #3: "), failure
    assert reader.events == 3 and reader.reply == ["ok ", "x"]  # the event after the bad one is not read


def test_a_chunk_of_the_wrong_shape_is_malformed_too():
    reader = ChunkReader()
    _, _, failure = reader.feed([event({"choices": "not a list"})])
    assert failure.startswith("malformed JSON in SSE event #1: ")


def test_an_error_event_fails_the_stream_with_its_text_bounded():
    reader = ChunkReader()
    message = "upstream overloaded " + "x" * 500
    chars, done, failure = reader.feed([event(b"[DONE]"), event({"error": {"message": message}})])
    assert done and chars == 0
    assert failure.startswith("error event in stream: {'message': 'upstream overloaded x")
    assert len(failure) == len("error event in stream: ") + 200
    assert reader.events == 2 and reader.done


def test_a_whole_stream_through_the_sse_decoder():
    body = b"".join(b"data: " + e.data + b"\n\n" for e in [delta(content="hel"), delta(content="lo")])
    body += b": keep-alive\n\n" + b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
    body += b"data: [DONE]\n\n"
    decoder, reader = SSEDecoder(), ChunkReader()
    total = 0
    for i in range(0, len(body), 7):  # reads split anywhere
        events = decoder.feed(body[i:i + 7])
        if events:
            chars, _, failure = reader.feed(events)
            assert failure is None
            total += chars
    assert total == 5 and "".join(reader.reply) == "hello"
    assert reader.done and reader.events == 4 and reader.completion_tokens == 2
