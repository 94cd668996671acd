"""The SDK clients of the other wire APIs at a stream's edges: an `error` event after tokens is a
stream failure mid-stream (the anthropic SDK raises it as an APIStatusError carrying the stream's
200: never an HTTP answer before the first byte), and a stream that ends before its terminal event
is truncated. Real sockets on 127.0.0.1 only."""

from __future__ import annotations

import json

import anyio
import pytest

from repro.core import events as ev
from repro.load.driver import Driver, DriverConfig
from repro.load.prompts import PromptSource
from tests.support.hostile import SSE_HEADERS, chunk, hostile_server

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]


def named(event: str, data: dict) -> bytes:
    return chunk(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())


MESSAGE_START = named("message_start", {"type": "message_start", "message": {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": None,
    "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 0}}})
BLOCK = named("content_block_start", {"type": "content_block_start", "index": 0,
                                      "content_block": {"type": "text", "text": ""}})
DELTA = named("content_block_delta", {"type": "content_block_delta", "index": 0,
                                      "delta": {"type": "text_delta", "text": "hello"}})
OVERLOADED = named("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
CREATED = named("response.created", {"type": "response.created", "sequence_number": 0, "response": {
    "id": "resp_1", "object": "response", "created_at": 0, "model": "m", "output": [], "status": "in_progress",
    "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}})
TEXT = named("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": 1,
                                            "item_id": "m1", "output_index": 0, "content_index": 0, "delta": "hello",
                                            "logprobs": []})
RESPONSE_ERROR = named("error", {"type": "error", "sequence_number": 2, "code": "server_error",
                                 "message": "the engine failed", "param": None})


def serving(*parts: bytes):
    async def behaviour(reader, writer, index) -> bool:
        writer.write(SSE_HEADERS + b"".join(parts))
        await writer.drain()
        return True

    return behaviour


def drive(url: str, client: str, api: str) -> list[ev.Event]:
    events: list[ev.Event] = []
    config = DriverConfig(base_url=url, model="m", rounds=1, conversations=1, max_tokens=8, client=client, api=api,
                          connect_timeout=2.0, round_timeout=10.0, stall_after=2.0, ramp_up=0.0)

    async def run():
        with anyio.fail_after(30):
            return await Driver(config, PromptSource(prompt_chars=40), events.append).run()

    anyio.run(run)
    return events


@pytest.mark.parametrize("client", ["anthropic", "anthropic-async"])
def test_an_error_event_after_tokens_is_a_mid_stream_failure(client):
    with hostile_server(serving(MESSAGE_START, BLOCK, DELTA, OVERLOADED, chunk(b""))) as server:
        events = drive(server.url, client, "messages")
    (failed,) = [e for e in events if isinstance(e, ev.RoundFailed)]
    assert (failed.failure, failed.phase, failed.status) == ("stream", "mid-stream", 200), failed
    assert "overloaded_error" in failed.error


@pytest.mark.parametrize("client", ["openai", "openai-async"])
def test_a_responses_error_event_after_tokens_is_a_mid_stream_failure(client):
    with hostile_server(serving(CREATED, TEXT, RESPONSE_ERROR, chunk(b""))) as server:
        events = drive(server.url, client, "responses")
    (failed,) = [e for e in events if isinstance(e, ev.RoundFailed)]
    assert (failed.failure, failed.phase, failed.status) == ("stream", "mid-stream", 200), failed


@pytest.mark.parametrize("client, api, parts", [
    ("anthropic", "messages", (MESSAGE_START, BLOCK, DELTA)), ("openai-async", "responses", (CREATED, TEXT))])
def test_a_stream_ending_before_its_terminal_event_is_truncated(client, api, parts):
    with hostile_server(serving(*parts, chunk(b""))) as server:
        events = drive(server.url, client, api)
    (failed,) = [e for e in events if isinstance(e, ev.RoundFailed)]
    assert failed.failure == "truncated" and failed.phase == "mid-stream", failed
