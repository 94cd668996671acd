"""A round's body in each API's shape, made from the one chat-shaped history, read back by the
simulated engine's own reader of that API into the same conversation."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repro.core.hop import api_url
from repro.load.wire_bodies import request_body
from repro.sim.wire_requests import from_messages, from_responses

TOOLS = [{"type": "function", "function": {"name": "read", "description": "read a file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]

HISTORY = [
    {"role": "system", "content": "be terse"},
    {"role": "user", "content": "read a.txt and b.txt"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a.txt"}'}},
        {"id": "c2", "type": "function", "function": {"name": "read", "arguments": '{"path": "b.txt"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "A"},
    {"role": "tool", "tool_call_id": "c2", "content": "B"},
    {"role": "assistant", "content": "done"},
    {"role": "user", "content": "thanks"},
]


def test_messages_body_has_anthropics_shape():
    body = request_body("messages", "m", HISTORY, TOOLS, 64)
    assert body["system"] == "be terse" and body["max_tokens"] == 64 and body["stream"] is True
    roles = [turn["role"] for turn in body["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]  # results of both calls: one user turn
    assert [b["type"] for b in body["messages"][1]["content"]] == ["tool_use", "tool_use"]
    assert body["messages"][1]["content"][0]["input"] == {"path": "a.txt"}
    assert [(b["type"], b["tool_use_id"]) for b in body["messages"][2]["content"]] == [("tool_result", "c1"),
                                                                                         ("tool_result", "c2")]
    assert body["tools"] == [{"name": "read", "description": "read a file",
                              "input_schema": TOOLS[0]["function"]["parameters"]}]


def test_responses_body_has_openais_items():
    body = request_body("responses", "m", HISTORY, TOOLS, 64)
    assert body["instructions"] == "be terse" and body["max_output_tokens"] == 64 and body["store"] is False
    kinds = [item.get("type", item.get("role")) for item in body["input"]]
    assert kinds == ["user", "function_call", "function_call", "function_call_output", "function_call_output",
                     "assistant", "user"]
    assert body["tools"][0] == {"type": "function", "name": "read", "description": "read a file",
                                "parameters": TOOLS[0]["function"]["parameters"]}


def test_chat_body_is_the_history_itself():
    body = request_body("chat", "m", HISTORY, None, 8)
    assert body["messages"] is HISTORY and "tools" not in body and body["stream_options"] == {"include_usage": True}


def _conversation(chat: list[dict]) -> list[tuple]:
    """What a conversation says, whatever the shape: roles, texts, calls (id, name, arguments
    object) and results (call id, text)."""
    out = []
    for m in chat:
        calls = tuple((c["id"], c["function"]["name"], json.dumps(json.loads(c["function"]["arguments"] or "{}"),
                                                                   sort_keys=True)) for c in m.get("tool_calls") or ())
        out.append((m["role"], m.get("content") or None, calls, m.get("tool_call_id")))
    return out


@pytest.mark.parametrize("api, read", [("messages", from_messages), ("responses", from_responses)])
def test_the_sim_reads_back_the_same_conversation(api, read):
    back = read(request_body(api, "m", HISTORY, TOOLS, 64))
    assert _conversation(back["messages"]) == _conversation(HISTORY)
    assert back["tools"][0]["function"]["name"] == "read" and back["max_tokens"] == 64


text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FF), min_size=1, max_size=20)


@st.composite
def histories(draw):
    chat = [{"role": "user", "content": draw(text)}]
    for turn in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            n = draw(st.integers(1, 3))
            calls = [{"id": f"c{turn}_{i}", "type": "function",
                      "function": {"name": "read", "arguments": json.dumps({"path": draw(text)})}} for i in range(n)]
            chat.append({"role": "assistant", "content": None, "tool_calls": calls})
            chat += [{"role": "tool", "tool_call_id": c["id"], "content": draw(text)} for c in calls]
        else:
            chat += [{"role": "assistant", "content": draw(text)}, {"role": "user", "content": draw(text)}]
    return chat


@settings(max_examples=100, deadline=None)
@given(chat=histories(), api=st.sampled_from(["messages", "responses"]))
def test_any_agent_history_survives_the_wire(chat, api):
    read = from_messages if api == "messages" else from_responses
    assert _conversation(read(request_body(api, "m", chat, TOOLS, 16))["messages"]) == _conversation(chat)


@pytest.mark.parametrize("base, api, url", [
    ("http://h:1", "messages", "http://h:1/v1/messages"),
    ("http://h:1/v1", "responses", "http://h:1/v1/responses"),
    ("http://h:1/v1/chat/completions", "messages", "http://h:1/v1/messages"),
    ("http://h:1/v1/messages", "chat", "http://h:1/v1/chat/completions"),
    ("http://h:1/api/chat/completions", "chat", "http://h:1/api/chat/completions"),
    ("http://h:1/api", "chat", "http://h:1/api/v1/chat/completions"),
])
def test_api_url(base, api, url):
    assert api_url(base, api) == url
