"""The simulated engine's Messages and Responses APIs, read by the official SDKs (anthropic,
openai) and by repro's own stream readers: multi-round tool loops, streamed and not, refusals in
each API's envelope, an API turned off, and an engine fault playing the same under each API."""

from __future__ import annotations

import json
import time

import anthropic
import httpx
import openai
import pytest

from repro.core.messages_events import MessagesReader
from repro.core.responses_events import ResponsesReader
from repro.core.sse import SSEDecoder
from repro.sim import SimConfig, serve_in_thread

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]

READ_TOOL = {"name": "Read", "description": "Read a file", "input_schema": {
    "type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}}


@pytest.fixture(scope="module")
def sim():
    # Every round offered tools calls one, so a loop exercises tool rounds on both APIs.
    with serve_in_thread(SimConfig(max_tokens_default=12, tool_call_share=1.0, itl=0.001)) as server:
        yield server


def test_anthropic_sdk_runs_a_streamed_tool_loop_on_messages(sim):
    client = anthropic.Anthropic(base_url=sim.url, api_key="k", max_retries=0, timeout=10)
    messages = [{"role": "user", "content": "read notes.txt"}]
    for _ in range(3):
        with client.messages.stream(model="claude-any", max_tokens=64, messages=messages, tools=[READ_TOOL],
                                    system="You are terse.") as stream:
            final = stream.get_final_message()
        assert final.stop_reason == "tool_use"
        calls = [b for b in final.content if b.type == "tool_use"]
        assert calls and all(c.name == "Read" and "file_path" in c.input for c in calls)
        assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0
        messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": c.id, "content": "hi"}
                                                  for c in calls]}]
    # Without tools, a text answer that ends the turn (or runs out of tokens), not streamed.
    answer = client.messages.create(model="claude-any", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert answer.content[0].type == "text" and answer.content[0].text.strip()
    assert answer.stop_reason == "max_tokens" and answer.usage.output_tokens == 5


def test_openai_sdk_runs_a_streamed_tool_loop_on_responses_both_ways(sim):
    client = openai.OpenAI(base_url=sim.url + "/v1", api_key="k", max_retries=0, timeout=10)
    tool = {"type": "function", "name": "read", "parameters": READ_TOOL["input_schema"]}
    items: list = [{"role": "user", "content": "read notes.txt"}]
    previous = None
    for round_index in range(4):
        # Rounds 0-1 send the whole history; rounds 2-3 continue by previous_response_id.
        chained = round_index >= 2
        kwargs = {"previous_response_id": previous, "input": items[-1:]} if chained and previous else {"input": items}
        with client.responses.stream(model="m", tools=[tool], max_output_tokens=64, **kwargs) as stream:
            final = stream.get_final_response()
        assert final.status == "completed" and final.usage.input_tokens > 0
        calls = [item for item in final.output if item.type == "function_call"]
        assert calls and all(json.loads(c.arguments).get("file_path") for c in calls)
        previous = final.id
        items += [c.model_dump(exclude_none=True) for c in calls]
        items += [{"type": "function_call_output", "call_id": c.call_id, "output": "hi"} for c in calls]
    plain = client.responses.create(model="m", input="hi", max_output_tokens=4)
    assert plain.status == "incomplete" and plain.output_text.strip() and plain.usage.output_tokens == 4


def test_chained_rounds_grow_the_prompt_as_the_whole_history_does(sim):
    def usage(body):
        return httpx.post(sim.url + "/v1/responses", json=body, timeout=5).json()

    first = usage({"model": "m", "input": "x" * 400, "max_output_tokens": 3})
    chained = usage({"model": "m", "previous_response_id": first["id"], "input": "y" * 400, "max_output_tokens": 3})
    assert chained["usage"]["input_tokens"] > first["usage"]["input_tokens"] + 90
    missing = httpx.post(sim.url + "/v1/responses", json={"model": "m", "previous_response_id": "resp_nope",
                                                          "input": "hi"}, timeout=5)
    assert missing.status_code == 400 and "resp_nope" in missing.json()["message"]  # SGLang: flat


@pytest.mark.parametrize("api, reader", [("messages", MessagesReader), ("responses", ResponsesReader)])
def test_repro_readers_agree_with_what_the_sim_streams(sim, api, reader):
    body = ({"model": "m", "max_tokens": 7, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
            if api == "messages" else {"model": "m", "max_output_tokens": 7, "stream": True, "input": "hi"})
    raw = httpx.post(f"{sim.url}/v1/{api}", json=body, timeout=5).content
    read = reader()
    read.feed(SSEDecoder().feed(raw))
    assert read.done and read.completion_tokens == 7 and len("".join(read.reply).split()) == 7
    if api == "messages":
        assert read.keepalives == 1 and read.finish_reason == "max_tokens"


def test_refusals_come_in_each_api_envelope():
    with serve_in_thread(SimConfig(context_length=50)) as sim:
        long = "word " * 400
        m = httpx.post(sim.url + "/v1/messages", json={"model": "m", "max_tokens": 5,
                                                       "messages": [{"role": "user", "content": long}]}, timeout=5)
        assert m.status_code == 400
        assert m.json()["type"] == "error" and m.json()["error"]["type"] == "invalid_request_error"
        assert "context length" in m.json()["error"]["message"]
        r = httpx.post(sim.url + "/v1/responses", json={"model": "m", "input": long}, timeout=5)
        assert r.status_code == 400 and "context length" in r.json()["message"]  # SGLang's flat envelope
        bad = httpx.post(sim.url + "/v1/messages", json={"model": "m", "messages": []}, timeout=5)
        assert bad.status_code == 400 and "max_tokens" in bad.json()["error"]["message"]


def test_an_api_turned_off_answers_404_while_chat_works():
    with serve_in_thread(SimConfig(quirks=frozenset({"no-responses-api"}))) as sim:
        off = httpx.post(sim.url + "/v1/responses", json={"model": "m", "input": "hi"}, timeout=5)
        assert off.status_code == 404 and off.json() == {"detail": "Not Found"}
        on = httpx.post(sim.url + "/v1/messages", json={"model": "m", "max_tokens": 2,
                                                        "messages": [{"role": "user", "content": "hi"}]}, timeout=5)
        chat = httpx.post(sim.url + "/v1/chat/completions", json={"model": "m", "max_tokens": 2,
                                                                  "messages": [{"role": "user", "content": "hi"}]},
                          timeout=5)
        assert on.status_code == 200 and chat.status_code == 200


@pytest.mark.parametrize("path, body", [
    ("/v1/messages", {"model": "m", "max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/responses", {"model": "m", "max_output_tokens": 50, "stream": True, "input": "hi"}),
])
def test_a_hung_engine_hangs_every_api_alike(path, body):
    with serve_in_thread(SimConfig(itl=0.01)) as sim:
        httpx.post(sim.url + "/sim/fault", json={"spec": "hang"}, timeout=5).raise_for_status()
        got = b""
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            with httpx.stream("POST", sim.url + path, json=body, timeout=httpx.Timeout(5, read=1.0)) as r:
                assert r.status_code == 200
                for chunk in r.iter_raw():
                    got += chunk
        assert time.monotonic() - started < 5
        # Responses says it exists before the first token (as vLLM does); Messages says nothing yet.
        events = [e.event for e in SSEDecoder().feed(got)]
        assert events == (["response.created", "response.in_progress"] if "responses" in path else [])
