"""The simulated engine's tool calls: which chat rounds call a tool, which one, with what
arguments, and the deltas that stream them, shaped as SGLang and vLLM stream theirs.

What was checked (code corpus, sgl-project/sglang python/sglang/srt/entrypoints/openai/
serving_chat.py, `_process_tool_call_stream`; vllm-project/vllm vllm/tool_parsers/
hermes_tool_parser.py `extract_tool_calls_streaming` and vllm/entrypoints/openai/chat_completion/
serving.py `chat_completion_stream_generator`):
- SGLang: one chunk per parsed call item. The first carries `id` ("call_" + 24 hex), `index`,
  `type` "function", `function.name` and the arguments parsed so far (often ""); later ones
  carry `"id": null` and `"name": null` beside the argument fragment. Finish reason "stop" is
  sent as "tool_calls" once a call was streamed.
- vLLM: the first delta is {index, type "function", id ("chatcmpl-tool-" + uuid hex),
  function: {name}} (arguments left out: `exclude_none`), later ones {index, function:
  {arguments}}; chunks are dumped with `exclude_unset`. "tool_calls" for auto and required
  tool choice, "stop" for a named one.
Each token of the plan is one engine token: the scheduler paces it like a content token.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass

from repro.sim.vocabulary import WORDS

CHARS_PER_TOKEN = 4  # about what a tokenizer makes of JSON text


class ToolRequestError(ValueError):
    """A request's `tools` or `tool_choice` an engine rejects (HTTP 400)."""


@dataclass(frozen=True)
class ToolScript:
    """A scripted agent loop for a real harness: the first `rounds` model calls of a conversation
    each call the tool `name` (when offered) with `path` for any path-like argument (a file the
    harness can read), then the model answers in text. So a harness runs N real tool rounds and
    ends on its own, whatever its round-count limits."""

    rounds: int
    name: str | None = None  # one tool name, or several separated by commas: the first one offered is called
    path: str | None = None

    def preferred(self, tools: list[dict]) -> dict | None:
        """The tool to call: the first of the script's names the request offers (None: none is)."""
        offered = {t["function"]["name"]: t for t in tools}
        names = [n.strip() for n in (self.name or "").split(",")]
        return next((offered[n] for n in names if n in offered), None)


@dataclass
class ToolPlan:
    calls: list[tuple[str, str, str]]  # (id, function name, arguments JSON) per call, in index order
    # Per engine token, what it streams: (call index, is the call's first delta, text), where the
    # text of a first delta is the function name and otherwise an argument fragment.
    tokens: list[list[tuple[int, bool, str]]]
    finish_reason: str


def plan_tool_calls(payload: dict, messages: list, seed: int, max_tokens: int, share: float, dialect: str,
                    rid: str, script: ToolScript | None = None) -> ToolPlan | None:
    """A plan when this request is answered with tool calls, else None (a content answer).

    Deterministic per request: a hash of its last message and of its length decides, so the
    same history gets the same answer, and `share` of the rounds offered tools call one."""
    tools = payload.get("tools")
    if not tools:
        return None
    if not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)
            for t in tools):
        raise ToolRequestError('tools must be a list of {"type": "function", "function": {"name": ..., '
                               '"parameters": {...}}}')
    choice = payload.get("tool_choice") or "auto"
    if choice == "none":
        return None
    named = None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        named = next((t for t in tools if t["function"]["name"] == name), None)
        if named is None:
            raise ToolRequestError(f"Tool '{name}' not found in tools list.")  # SGLang's wording
    elif choice not in ("auto", "required"):
        raise ToolRequestError(f'tool_choice must be "none", "auto", "required" or a named function, got {choice!r}')
    h = zlib.crc32(len(messages).to_bytes(4, "little"), seed)
    if script is not None:
        called = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant" and m.get("tool_calls"))
        if choice == "auto" and called >= script.rounds:
            return None
        preferred = script.preferred(tools)
    elif choice == "auto" and h % 10_000 >= share * 10_000:
        return None
    else:
        preferred = None
    if named is not None or preferred is not None:
        chosen = [named or preferred]
    else:
        chosen = [tools[(h >> 8) % len(tools)]]
        # A quarter of the tool rounds call two tools at once, as agents' models do in parallel.
        if payload.get("parallel_tool_calls") is not False and len(tools) > 1 and h % 4 == 0:
            chosen.append(tools[(h >> 16) % len(tools)])
    calls = []
    for i, tool in enumerate(chosen):
        function = tool["function"]
        tag = zlib.crc32(f"{rid}/{i}".encode())
        call_id = (f"chatcmpl-tool-{tag:08x}{h:08x}{seed:08x}{i:08x}" if dialect == "vllm"
                   else f"call_{tag:08x}{h:08x}{seed:08x}")
        path = script.path if script is not None else None
        calls.append((call_id, function["name"], json.dumps(_arguments(function.get("parameters"), h + i, path))))
    pieces: list[tuple[int, bool, str]] = []
    for i, (_, name, arguments) in enumerate(calls):
        pieces.append((i, True, name))
        pieces += [(i, False, arguments[at:at + CHARS_PER_TOKEN]) for at in range(0, len(arguments), CHARS_PER_TOKEN)]
    # A budget below the plan: fewer, longer fragments, so the call still completes as valid JSON.
    steps = max(1, min(len(pieces), max_tokens))
    tokens = [pieces[len(pieces) * k // steps:len(pieces) * (k + 1) // steps] for k in range(steps)]
    finish = "stop" if named is not None and dialect == "vllm" else "tool_calls"
    return ToolPlan(calls, tokens, finish)


def token_deltas(plan: ToolPlan, token: int, dialect: str) -> bytes:
    """The `tool_calls` list one token streams (JSON), fragments of one call in it merged."""
    merged: list[list] = []
    for index, first, text in plan.tokens[token]:
        if merged and merged[-1][0] == index and not first:
            merged[-1][2] += text
        else:
            merged.append([index, first, text])
    out = []
    for index, first, text in merged:
        call_id = plan.calls[index][0]
        if dialect == "vllm":
            out.append({"id": call_id, "type": "function", "index": index, "function": {"name": text}} if first
                       else {"index": index, "function": {"arguments": text}})
        else:
            out.append({"id": call_id if first else None, "index": index, "type": "function",
                        "function": {"name": text, "arguments": ""} if first else {"name": None, "arguments": text}})
    return json.dumps(out, separators=(",", ":")).encode()


def message_tool_calls(plan: ToolPlan) -> list[dict]:
    """The calls as a non-streamed reply's message carries them."""
    return [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for call_id, name, arguments in plan.calls]


def _arguments(parameters, h: int, path: str | None = None) -> dict:
    """Arguments that fit the function's JSON schema: its required properties (or its first two)."""
    parameters = parameters if isinstance(parameters, dict) else {}
    properties = parameters.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = parameters.get("required")
    names = [n for n in required if n in properties] if isinstance(required, list) else []
    names = names or list(properties)[:2]
    return {name: path if path is not None and _path_like(name) else
            _value(name, properties[name] if isinstance(properties[name], dict) else {}, h + 7 * k)
            for k, name in enumerate(names)}


def _path_like(name: str) -> bool:
    return "path" in name.lower() or "file" in name.lower()


def _value(name: str, schema: dict, h: int):
    word = WORDS[h % len(WORDS)]
    other = WORDS[(h // len(WORDS)) % len(WORDS)]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][h % len(schema["enum"])]
    kind = schema.get("type")
    if kind == "integer":
        return h % 200 + 1
    if kind == "number":
        return (h % 1000) / 10
    if kind == "boolean":
        return h % 2 == 0
    if kind == "array":
        return [word, other]
    if kind == "object":
        return {word: other}
    if _path_like(name) or "dir" in name:
        return f"src/{word}/{other}.py"
    if "command" in name or name == "cmd":
        return f"grep -rn {word} src/{other}"
    if "glob" in name or "pattern" in name:
        return f"**/*{word}*"
    return f"{word} {other}"
