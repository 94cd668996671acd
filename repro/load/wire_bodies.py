"""A round's request in the shape of the API the run speaks.

A conversation's history is kept in one shape, chat's (repro/load/history.py): messages with
`tool_calls` and `tool` results. Each round's body is made from it for the wire:

- chat: the messages as they are.
- messages (Anthropic): system messages become the `system` field; an assistant turn's tool
  calls become `tool_use` blocks (input: the arguments' JSON object); the `tool` results that
  follow become one user turn of `tool_result` blocks, as Claude Code sends them; tools are
  `{name, description, input_schema}`. `max_tokens` is required by the API.
- responses (OpenAI): system messages become `instructions`; messages become input items;
  tool calls become `function_call` items and results `function_call_output` items, tied by
  `call_id`; tools are `{type: function, name, description, parameters}`; `max_output_tokens`.
  The whole history goes every round with `store: false`, as Codex CLI sends it.
"""

from __future__ import annotations

import json
from typing import Any

from repro.core.wire_api import Api


def request_body(api: Api, model: str, messages: list[dict], tools: list[dict] | None, max_tokens: int) -> dict:
    if api == "messages":
        return _messages_body(model, messages, tools, max_tokens)
    if api == "responses":
        return _responses_body(model, messages, tools, max_tokens)
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": True,
                            "stream_options": {"include_usage": True}, "max_tokens": max_tokens}
    if tools:  # never "tools": [] (OpenAI rejects an empty list)
        body["tools"] = tools
    return body


def _arguments(text: str) -> dict:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _functions(tools: list[dict]) -> list[tuple[str, str, dict]]:
    """Chat's tool definitions as (name, description, JSON schema), whatever shape they go out in."""
    return [(f["name"], f.get("description") or "", f.get("parameters") or {"type": "object", "properties": {}})
            for f in (tool.get("function") or {} for tool in tools)]


def _system(messages: list[dict]) -> str:
    return "\n\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")


def _messages_body(model: str, messages: list[dict], tools: list[dict] | None, max_tokens: int) -> dict:
    turns: list[dict] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            continue
        if role == "tool":
            block = {"type": "tool_result", "tool_use_id": message.get("tool_call_id"),
                     "content": str(message.get("content") or "")}
            if turns and turns[-1]["role"] == "user" and isinstance(turns[-1]["content"], list):
                turns[-1]["content"].append(block)  # the results of one turn's calls: one user turn
            else:
                turns.append({"role": "user", "content": [block]})
            continue
        calls = message.get("tool_calls")
        if role == "assistant" and calls:
            blocks: list[dict] = [{"type": "text", "text": message["content"]}] if message.get("content") else []
            blocks += [{"type": "tool_use", "id": call.get("id"), "name": (call.get("function") or {}).get("name"),
                        "input": _arguments((call.get("function") or {}).get("arguments") or "")} for call in calls]
            turns.append({"role": "assistant", "content": blocks})
        else:
            turns.append({"role": role, "content": str(message.get("content") or "")})
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": True, "messages": turns}
    system = _system(messages)
    if system:
        body["system"] = system
    if tools:
        body["tools"] = [{"name": name, "description": description, "input_schema": schema}
                         for name, description, schema in _functions(tools)]
    return body


def _responses_body(model: str, messages: list[dict], tools: list[dict] | None, max_tokens: int) -> dict:
    items: list[dict] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            continue
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": message.get("tool_call_id"),
                          "output": str(message.get("content") or "")})
            continue
        if message.get("content"):
            items.append({"role": role, "content": str(message["content"])})
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            items.append({"type": "function_call", "call_id": call.get("id"), "name": function.get("name"),
                          "arguments": function.get("arguments") or "{}"})
    body: dict[str, Any] = {"model": model, "input": items, "stream": True, "store": False,
                            "max_output_tokens": max_tokens}
    system = _system(messages)
    if system:
        body["instructions"] = system
    if tools:
        body["tools"] = [{"type": "function", "name": name, "description": description, "parameters": schema}
                         for name, description, schema in _functions(tools)]
    return body
