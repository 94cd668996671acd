"""A Messages or Responses request read in chat's terms, so one engine path serves every API.

vLLM does the same: its Anthropic entrypoint converts a Messages request into a chat request
(`vllm/entrypoints/anthropic/serving_messages.py`), and its Responses server builds the chat
prompt from the input items. What this sim needs of a request is what chat gives it: the
messages (their text sets the prompt length and the reply's seed, their count the tool plan),
the tools (name and JSON schema), the tool choice, max tokens, whether to stream.

Messages: `system` (a string or text blocks), `messages` with string or block content (`text`,
`tool_use`, `tool_result`), `tools` ({name, description, input_schema}), `tool_choice`
({"type": "auto" | "any" | "tool" | "none"}), `max_tokens` (required by the API).
Responses: `instructions`, `input` (a string, or items: messages with string or `input_text`
content, `function_call`, `function_call_output`), `tools` ({"type": "function", name,
parameters}), `tool_choice`, `max_output_tokens`, `previous_response_id` (the conversation so
far, stored by the server: the caller passes what the store holds).
"""

from __future__ import annotations

import json
from typing import Any


class WireRequestError(ValueError):
    """A request the API refuses (HTTP 400), in words its server would use."""


def _text_of(content: Any) -> str:
    """The text a message's content carries, whatever its shape (string or list of blocks)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    out = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind in ("text", "input_text", "output_text"):
            out.append(str(block.get("text") or ""))
        elif kind == "tool_result":
            out.append(_text_of(block.get("content")))
    return "\n".join(out)


def _call(call_id: str, name: Any, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": str(name or ""), "arguments": arguments}}


def from_messages(payload: dict) -> dict:
    """A Messages request as chat: system first, tool_use blocks as tool calls, tool_result
    blocks as tool messages."""
    messages = payload.get("messages")
    if not isinstance(messages, list):
        raise WireRequestError("messages: Field required (a list of {role, content})")
    if not isinstance(payload.get("max_tokens"), int):
        raise WireRequestError("max_tokens: Field required (a positive integer)")
    chat: list[dict] = []
    system = payload.get("system")
    if system:
        chat.append({"role": "system", "content": _text_of(system)})
    for message in messages:
        if not isinstance(message, dict):
            raise WireRequestError("messages: each message must be an object {role, content}")
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        calls = [_call(str(b.get("id") or ""), b.get("name"), json.dumps(b.get("input") or {}))
                 for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                chat.append({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                             "content": _text_of(block.get("content"))})
        # The turn's own words; its tool results went out above as tool messages.
        text = _text_of([b for b in blocks if isinstance(b, dict) and b.get("type") != "tool_result"]) \
            if blocks else _text_of(content)
        if text or calls or not blocks:
            chat.append({"role": message.get("role"), "content": text or None, **({"tool_calls": calls} if calls else {})})
    tools = payload.get("tools")
    choice = payload.get("tool_choice")
    out = {"messages": chat, "max_tokens": payload["max_tokens"], "stream": bool(payload.get("stream"))}
    if tools:
        if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools):
            raise WireRequestError("tools: each tool must be {name, description, input_schema}")
        out["tools"] = [{"type": "function", "function": {"name": t["name"], "description": t.get("description"),
                                                          "parameters": t.get("input_schema") or {}}} for t in tools]
    if isinstance(choice, dict):
        kind = choice.get("type")
        out["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}.get(kind) or (
            {"type": "function", "function": {"name": choice.get("name")}} if kind == "tool" else "auto")
        if choice.get("disable_parallel_tool_use"):
            out["parallel_tool_calls"] = False
    return out


def from_responses(payload: dict, earlier: list[dict] | None = None) -> dict:
    """A Responses request as chat; `earlier` is the conversation a previous_response_id names."""
    chat: list[dict] = list(earlier or [])
    instructions = payload.get("instructions")
    if instructions and not earlier:
        chat.append({"role": "system", "content": str(instructions)})
    items = payload.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise WireRequestError("input: Field required (a string or a list of items)")
    for item in items:
        if not isinstance(item, dict):
            raise WireRequestError("input: each item must be an object")
        kind = item.get("type") or "message"
        if kind == "message":
            chat.append({"role": item.get("role") or "user", "content": _text_of(item.get("content"))})
        elif kind == "function_call":
            call = _call(str(item.get("call_id") or ""), item.get("name"), str(item.get("arguments") or ""))
            if chat and chat[-1].get("role") == "assistant" and chat[-1].get("tool_calls"):
                chat[-1]["tool_calls"].append(call)  # parallel calls: one assistant turn
            else:
                chat.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            chat.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": str(item.get("output") or "")})
        elif kind == "reasoning":
            continue
        else:
            raise WireRequestError(f"input: unknown item type {kind!r}")
    out: dict[str, Any] = {"messages": chat, "stream": bool(payload.get("stream"))}
    if payload.get("max_output_tokens") is not None:
        out["max_tokens"] = payload["max_output_tokens"]
    tools = [t for t in payload.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"]
    if tools:
        if not all(isinstance(t.get("name"), str) for t in tools):
            raise WireRequestError("tools: each function tool must be {type: function, name, parameters}")
        out["tools"] = [{"type": "function", "function": {"name": t["name"], "description": t.get("description"),
                                                          "parameters": t.get("parameters") or {}}} for t in tools]
    choice = payload.get("tool_choice")
    if isinstance(choice, str):
        out["tool_choice"] = choice
    elif isinstance(choice, dict) and choice.get("type") == "function":
        out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    if payload.get("parallel_tool_calls") is False:
        out["parallel_tool_calls"] = False
    return out


def anthropic_error(status: int, message: str) -> dict:
    """The Messages API's error envelope; the type by status, as Anthropic's API and vLLM's
    anthropic entrypoint name them."""
    kind = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
            404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
            529: "overloaded_error"}.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}
