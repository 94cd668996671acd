"""The Messages and Responses stream readers on their own: SSE events in; reply, tool calls,
usage, done, keep-alives or failure out; the same at every chunk boundary as whole."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from repro.core.messages_events import MessagesReader
from repro.core.responses_events import ResponsesReader
from repro.core.sse import SSEDecoder, SSEEvent


def sse(kind: str, obj: dict) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(obj)}\n\n".encode()


def messages_body(text_pieces=("Hel", "lo"), tool=("toolu_1", "Read", ['{"file_', 'path": "a.txt"}']),
                  pings=2) -> bytes:
    out = [sse("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "m",
        "usage": {"input_tokens": 17, "output_tokens": 1}}})]
    out.append(sse("content_block_start", {"type": "content_block_start", "index": 0,
                                           "content_block": {"type": "text", "text": ""}}))
    for _ in range(pings):
        out.append(sse("ping", {"type": "ping"}))
    for piece in text_pieces:
        out.append(sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": piece}}))
    out.append(sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
    if tool:
        call_id, name, parts = tool
        out.append(sse("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
            "type": "tool_use", "id": call_id, "name": name, "input": {}}}))
        for part in parts:
            out.append(sse("content_block_delta", {"type": "content_block_delta", "index": 1,
                                                   "delta": {"type": "input_json_delta", "partial_json": part}}))
        out.append(sse("content_block_stop", {"type": "content_block_stop", "index": 1}))
    out.append(sse("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": "tool_use" if tool else "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 9}}))
    out.append(sse("message_stop", {"type": "message_stop"}))
    return b"".join(out)


def responses_body(text_pieces=("Hel", "lo"), call=("call_1", "read", ['{"path"', ': "a.txt"}'])) -> bytes:
    created = {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}
    out = [sse("response.created", {"type": "response.created", "sequence_number": 0, "response": created}),
           sse("response.in_progress", {"type": "response.in_progress", "response": created}),
           sse("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": {
               "type": "message", "id": "msg_1", "role": "assistant", "content": []}})]
    for piece in text_pieces:
        out.append(sse("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "msg_1",
                                                      "output_index": 0, "content_index": 0, "delta": piece}))
    out.append(sse("response.output_text.done", {"type": "response.output_text.done", "item_id": "msg_1",
                                                 "output_index": 0, "text": "".join(text_pieces)}))
    if call:
        call_id, name, parts = call
        out.append(sse("response.output_item.added", {"type": "response.output_item.added", "output_index": 1, "item": {
            "type": "function_call", "id": "fc_1", "call_id": call_id, "name": name, "arguments": ""}}))
        for part in parts:
            out.append(sse("response.function_call_arguments.delta", {
                "type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 1, "delta": part}))
    done = dict(created, status="completed", usage={"input_tokens": 21, "output_tokens": 8, "total_tokens": 29})
    out.append(sse("response.completed", {"type": "response.completed", "response": done}))
    return b"".join(out)


def read_all(reader, body: bytes, cuts=()) -> tuple:
    decoder = SSEDecoder()
    chars = 0
    done = False
    failures = []
    start = 0
    for cut in [*sorted(cuts), len(body)]:
        got, done_here, failure = reader.feed(decoder.feed(body[start:cut]))
        start = cut
        chars += got
        done = done or done_here
        if failure:
            failures.append(failure)
    return (chars, done, failures, "".join(reader.reply), reader.tool_calls, reader.finish_reason,
            reader.prompt_tokens, reader.completion_tokens, reader.events, reader.keepalives)


def test_messages_text_tool_use_usage_and_stop():
    reader = MessagesReader()
    chars, done, failures, reply, calls, finish, prompt, completion, events, pings = read_all(reader, messages_body())
    assert (reply, finish, prompt, completion, done, failures) == ("Hello", "tool_use", 17, 9, True, [])
    assert calls == [{"id": "toolu_1", "type": "function",
                      "function": {"name": "Read", "arguments": '{"file_path": "a.txt"}'}}]
    assert chars == len("Hello") + len("Read") + len('{"file_path": "a.txt"}')
    assert pings == 2 and events == 11  # 13 events, of which the two pings are not progress


def test_messages_pings_alone_are_no_progress():
    reader = MessagesReader()
    body = sse("ping", {"type": "ping"}) * 3
    assert reader.feed(SSEDecoder().feed(body)) == (0, False, None)
    assert reader.events == 0 and reader.keepalives == 3


def test_messages_tool_use_without_input_fragments_is_the_empty_object():
    reader = MessagesReader()
    read_all(reader, messages_body(tool=("toolu_9", "Glob", [])))
    assert reader.tool_calls[0]["function"] == {"name": "Glob", "arguments": "{}"}


def test_messages_error_event_fails_the_stream_there():
    reader = MessagesReader()
    whole = messages_body()
    body = whole[:whole.index(b"event: ping")]
    error = sse("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    decoder = SSEDecoder()
    reader.feed(decoder.feed(body))
    chars, done, failure = reader.feed(decoder.feed(error + sse("message_stop", {"type": "message_stop"})))
    assert not done and failure.startswith("error event in stream: ") and "overloaded_error" in failure
    assert not reader.done  # the event after the error is not read


def test_messages_malformed_json_names_the_event():
    reader = MessagesReader()
    _, _, failure = reader.feed([SSEEvent(b'{"type": "ping"}'), SSEEvent(b"{nope")])
    assert failure.startswith("malformed JSON in SSE event #1: ")


def test_responses_text_function_call_usage_and_completed():
    reader = ResponsesReader()
    chars, done, failures, reply, calls, finish, prompt, completion, events, _ = read_all(reader, responses_body())
    assert (reply, finish, prompt, completion, done, failures) == ("Hello", "completed", 21, 8, True, [])
    assert calls == [{"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a.txt"}'}}]
    assert chars == len("Hello") + len("read") + len('{"path": "a.txt"}')
    assert reader.response_id == "resp_1" and events == 10


def test_responses_incomplete_is_done_with_its_reason():
    reader = ResponsesReader()
    body = responses_body(call=None).replace(b'"response.completed", "response": {"id": "resp_1", "object": "response", '
                                             b'"status": "completed"',
                                             b'"response.incomplete", "response": {"id": "resp_1", "object": '
                                             b'"response", "status": "incomplete", "incomplete_details": '
                                             b'{"reason": "max_output_tokens"}')
    assert b"response.incomplete" in body
    *_, finish, _, _, _, _ = read_all(reader, body)
    assert reader.done and finish == "max_output_tokens"


def test_responses_failed_and_error_events_fail_the_stream():
    failed = sse("response.failed", {"type": "response.failed", "response": {
        "id": "r", "status": "failed", "error": {"code": "server_error", "message": "boom"}}})
    reader = ResponsesReader()
    _, done, failure = reader.feed(SSEDecoder().feed(failed))
    assert not done and failure.startswith("response failed: ") and "server_error" in failure
    reader = ResponsesReader()
    error = sse("error", {"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": None})
    _, _, failure = reader.feed(SSEDecoder().feed(error))
    assert failure.startswith("error event in stream: ") and "rate_limit_exceeded" in failure


def test_a_terminal_event_without_the_end_of_the_body_is_done_but_the_body_is_not():
    # The reader says done at the terminal event; what the transport does next (the body's end
    # or nothing) is the round's after-last-event phase, decided by the client, not here.
    reader = ResponsesReader()
    body = responses_body()
    cut = body.index(b"event: response.completed")
    decoder = SSEDecoder()
    assert reader.feed(decoder.feed(body[:cut]))[1] is False
    assert reader.feed(decoder.feed(body[cut:]))[1] is True


def _every_boundary_agrees(make_reader, body: bytes):
    whole = read_all(make_reader(), body)
    for cut in range(1, len(body)):
        assert read_all(make_reader(), body, (cut,)) == whole, cut


def test_every_single_chunk_boundary_reads_the_same_as_whole():
    _every_boundary_agrees(MessagesReader, messages_body())
    _every_boundary_agrees(ResponsesReader, responses_body())


pieces = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8),
                  min_size=0, max_size=6)


@settings(max_examples=150, deadline=None)
@given(text=pieces, args=pieces, pings=st.integers(0, 3), data=st.data())
def test_any_split_of_any_stream_reads_the_same(text, args, pings, data):
    for make_reader, body in ((MessagesReader, messages_body(text, ("t1", "Read", args), pings)),
                              (ResponsesReader, responses_body(text, ("c1", "read", args)))):
        cuts = data.draw(st.lists(st.integers(1, max(1, len(body) - 1)), max_size=8))
        whole = read_all(make_reader(), body)
        assert read_all(make_reader(), body, cuts) == whole
        assert whole[3] == "".join(text) and whole[4][0]["function"]["arguments"] == ("".join(args) or (
            "{}" if make_reader is MessagesReader else ""))
