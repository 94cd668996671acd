"""The wire APIs a harness speaks, and what each one means for a request: its path, its auth
headers, the smallest streamed request (a canary's), and the reader of its stream.

- chat: OpenAI chat completions, `POST /v1/chat/completions` (opencode, aider, the openai SDK).
- responses: OpenAI Responses, `POST /v1/responses` (Codex CLI, the openai Agents SDK).
- messages: Anthropic Messages, `POST /v1/messages` (Claude Code), with `x-api-key` and
  `anthropic-version` headers instead of a bearer token.

One table, so a new API is one entry and every caller (clients, canaries, the fault proxy's
accounting, the judge's wording) reads the same facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from repro.core.messages_events import MessagesReader
from repro.core.openai_chunks import ChunkReader
from repro.core.responses_events import ResponsesReader

Api = Literal["chat", "responses", "messages"]
APIS: tuple[Api, ...] = ("chat", "responses", "messages")
ANTHROPIC_VERSION = "2023-06-01"  # the version header every Anthropic client sends today


@dataclass(frozen=True)
class WireApi:
    name: Api
    path: str  # under the origin, with its /v1
    reader: type  # one per round: feed(SSE events) -> (chars, done, failure)
    terminal: str  # the event that ends a whole stream, as people read it

    def headers(self, api_key: str | None) -> dict[str, str]:
        """Auth and version headers; the key is never logged by callers (text.without_secret)."""
        if self.name == "messages":
            return {"x-api-key": api_key or "none", "anthropic-version": ANTHROPIC_VERSION}
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def canary_body(self, model: str) -> dict[str, Any]:
        """A one-token streamed request: the least that proves the path generates."""
        if self.name == "messages":
            return {"model": model, "max_tokens": 1, "stream": True, "messages": [{"role": "user", "content": "ping"}]}
        if self.name == "responses":
            return {"model": model, "max_output_tokens": 1, "stream": True, "input": "ping", "store": False}
        return {"model": model, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1, "stream": True}


WIRE_APIS: dict[Api, WireApi] = {
    "chat": WireApi("chat", "/v1/chat/completions", ChunkReader, "data: [DONE]"),
    "responses": WireApi("responses", "/v1/responses", ResponsesReader, "response.completed"),
    "messages": WireApi("messages", "/v1/messages", MessagesReader, "message_stop"),
}


def parse_apis(text: str) -> tuple[Api, ...]:
    """`chat,messages` -> ("chat", "messages"); ValueError with the fix for an unknown name."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in WIRE_APIS]
    if unknown or not names:
        raise ValueError(f"--api {text!r}: use one or more of {', '.join(APIS)}, comma-separated")
    return tuple(dict.fromkeys(names))  # type: ignore[arg-type]
