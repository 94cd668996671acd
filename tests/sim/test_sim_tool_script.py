"""The sim's scripted agent loop as `repro harness` uses it: the first offered of several tool names
is called (opencode's `read`, Claude Code's `Read`), with the file for its path argument, then a text
answer, whose text /sim/state lists among the last answers (what the harness should print)."""

from __future__ import annotations

import json

import httpx
import pytest
from openai import OpenAI

from repro.sim import SimConfig, serve_in_thread

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]

# opencode's read tool as it sends it (filePath required; offset and limit optional)
READ = {"type": "function", "function": {"name": "read", "parameters": {
    "type": "object", "required": ["filePath"],
    "properties": {"filePath": {"type": "string"}, "offset": {"type": "number"}, "limit": {"type": "number"}}}}}
BASH = {"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "required": ["command"], "properties": {"command": {"type": "string"}}}}}


def test_the_first_offered_name_is_called_with_the_file_then_a_text_answer(tmp_path):
    notes = str(tmp_path / "notes.txt")
    config = SimConfig(reply_tokens=6, tool_rounds=2, tool_name="Read,read", tool_path=notes)
    with serve_in_thread(config) as sim:
        client = OpenAI(base_url=sim.url + "/v1", api_key="sk-test", max_retries=0, timeout=10)
        history: list[dict] = [{"role": "user", "content": "read notes.txt"}]
        calls = []
        for _ in range(3):
            reply = client.chat.completions.create(model="sim-model", messages=history, tools=[BASH, READ],
                                                   max_tokens=4000).choices[0]
            if not reply.message.tool_calls:
                break
            call = reply.message.tool_calls[0]
            calls.append((call.function.name, json.loads(call.function.arguments)))
            history += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                        {"role": "tool", "tool_call_id": call.id, "content": "the notes"}]
        state = httpx.get(sim.url + "/sim/state", timeout=5).json()
    assert calls == [("read", {"filePath": notes})] * 2
    assert reply.finish_reason == "stop" and len(reply.message.content.split()) == 6
    assert state["answers"][-1] == reply.message.content.strip()
