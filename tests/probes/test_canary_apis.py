"""A canary per wire API: each path canaried on its own, its stream read by its API's reader, so a
hop that serves chat but not messages (or responses) says so in two outcomes."""

from __future__ import annotations

import pytest

from probes.canary import run_canary
from repro.core.hop import Hop
from repro.sim import SimConfig, serve_in_thread
from tests.support.hostile import hostile_server, respond

pytestmark = [pytest.mark.network, pytest.mark.anyio, pytest.mark.timeout(30)]


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_each_api_is_served_by_the_sim(api):
    with serve_in_thread(SimConfig()) as sim:
        outcome = await run_canary(Hop("engine-0", sim.url + "/v1"), model="sim-model", timeout=3, api=api,
                                   api_key="sk-secret")
    assert outcome.ok and outcome.done and outcome.events >= 1, outcome
    assert outcome.api == api and outcome.url.endswith({"chat": "/v1/chat/completions", "responses": "/v1/responses",
                                                        "messages": "/v1/messages"}[api])
    assert "sk-secret" not in repr(outcome.to_dict())


async def test_an_api_turned_off_fails_its_canary_alone():
    with serve_in_thread(SimConfig(quirks=frozenset({"no-responses-api"}))) as sim:
        hop = Hop("engine-0", sim.url)
        chat = await run_canary(hop, model="m", timeout=3, api="chat")
        messages = await run_canary(hop, model="m", timeout=3, api="messages")
        responses = await run_canary(hop, model="m", timeout=3, api="responses")
    assert chat.ok and messages.ok
    assert not responses.ok and responses.failure == "http" and responses.status == 404
    assert responses.error.startswith("http 404") and "Not Found" in responses.error


async def test_pings_alone_are_not_a_served_canary():
    pings = b"".join(b'event: ping\ndata: {"type": "ping"}\n\n' for _ in range(3))
    with hostile_server(respond("200 OK", pings, "text/event-stream")) as server:
        outcome = await run_canary(Hop("e", server.url), model="m", timeout=2, api="messages")
    assert not outcome.ok and outcome.events == 0


async def test_an_error_event_in_a_messages_stream_fails_the_canary():
    body = (b'event: message_start\ndata: {"type": "message_start", "message": {"usage": {"input_tokens": 1}}}\n\n'
            b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n')
    with hostile_server(respond("200 OK", body, "text/event-stream")) as server:
        outcome = await run_canary(Hop("e", server.url), model="m", timeout=2, api="messages")
    assert not outcome.ok and outcome.failure == "stream" and "overloaded_error" in outcome.error
