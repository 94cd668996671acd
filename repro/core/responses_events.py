"""Sans-I/O decoding of an OpenAI Responses stream (`POST /v1/responses`, `stream: true`).

The reader takes the SSE events of each read and keeps what chat's `ChunkReader` keeps, with
the same interface: the reply's pieces, the tool calls, how the response ended, the token usage,
the events read, and whether the stream is done or unusable.

What the events mean (OpenAI's Responses streaming reference; vLLM and SGLang send the same
types): `response.created` and `response.in_progress` (the response exists, with its id),
`response.output_item.added` (a `message`, `reasoning` or `function_call` item at an
`output_index`; a function call carries `call_id` and `name`), `response.output_text.delta` and
`response.reasoning_text.delta` (text), `response.function_call_arguments.delta` (a fragment of
a call's arguments), `*.done` events (the whole piece again: nothing new), then one terminal
event: `response.completed` or `response.incomplete` (done; usage and, for incomplete, the
reason) or `response.failed` (the response's own error). An `error` event is a failure in the
stream itself. Every event is progress: the Responses API has no keep-alive event of its own
(SSE comments, which the SSE decoder counts, are its keep-alives).

Tool calls come back in chat's shape ({"id", "type", "function": {"name", "arguments"}}), the
id being the call's `call_id` (what a `function_call_output` item answers).
"""

from __future__ import annotations

from typing import Any

import msgspec

from repro.core.sse import SSEEvent


class _Item(msgspec.Struct):
    type: str | None = None
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None


class _Usage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None


class _Incomplete(msgspec.Struct):
    reason: str | None = None


class _Response(msgspec.Struct):
    id: str | None = None
    status: str | None = None
    usage: _Usage | None = None
    incomplete_details: _Incomplete | None = None
    error: Any = None


class _Event(msgspec.Struct):
    type: str = ""
    delta: str | None = None
    output_index: int | None = None
    item_id: str | None = None
    item: _Item | None = None
    response: _Response | None = None
    code: Any = None
    message: str | None = None


_decode = msgspec.json.Decoder(_Event).decode
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError)
_TERMINAL = frozenset(("response.completed", "response.incomplete"))


class ResponsesReader:
    """One round's Responses stream, read as it arrives."""

    __slots__ = ("reply", "finish_reason", "prompt_tokens", "completion_tokens", "events", "keepalives",
                 "done", "response_id", "_calls")

    def __init__(self) -> None:
        self.reply: list[str] = []
        self._calls: dict[Any, list] = {}  # output_index (or item id) -> [call_id, name, [fragments]]
        # "completed", or the reason an incomplete response gives (e.g. max_output_tokens).
        self.finish_reason: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.events = 0
        self.keepalives = 0  # none in this API: kept for the readers' common interface
        self.done = False
        self.response_id: str | None = None  # what a next round's previous_response_id names

    def feed(self, events: list[SSEEvent]) -> tuple[int, bool, str | None]:
        """Read the events of one read, in order: the reply characters they carried, whether the
        terminal event was among them, and None or why the stream cannot be trusted past here."""
        chars = 0
        done_here = False
        failure = None
        for sse in events:
            self.events += 1
            try:
                event = _decode(sse.data)
            except _DECODE_ERRORS as exc:
                failure = f"malformed JSON in SSE event #{self.events}: {exc}"
                break
            kind = event.type or sse.event or ""
            if kind in ("response.output_text.delta", "response.reasoning_text.delta"):
                if event.delta:
                    self.reply.append(event.delta)
                    chars += len(event.delta)
            elif kind == "response.function_call_arguments.delta":
                if event.delta:
                    self._call(event.output_index, event.item_id)[2].append(event.delta)
                    chars += len(event.delta)
            elif kind == "response.output_item.added" and event.item is not None:
                item = event.item
                if item.type == "function_call":
                    call = self._call(event.output_index, item.id)
                    call[0], call[1] = item.call_id or item.id or "", item.name or ""
                    if item.arguments:
                        call[2].append(item.arguments)
                    chars += len(call[1])
            elif kind == "error":
                failure = f"error event in stream: {str({'code': event.code, 'message': event.message})[:200]}"
                break
            elif kind == "response.failed":
                error = event.response.error if event.response is not None else None
                failure = f"response failed: {str(error)[:200]}"
                break
            elif kind in _TERMINAL:
                done_here = True
                self._ended(kind, event.response)
            elif kind == "response.created" and event.response is not None:
                self.response_id = event.response.id
        if done_here:
            self.done = True
        return chars, done_here, failure

    def _call(self, index: int | None, item_id: str | None) -> list:
        key = index if index is not None else item_id
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = ["", "", []]
        return call

    def _ended(self, kind: str, response: _Response | None) -> None:
        self.finish_reason = "completed"
        if response is None:
            return
        self.response_id = response.id or self.response_id
        if kind == "response.incomplete":
            details = response.incomplete_details
            self.finish_reason = (details.reason if details is not None else None) or "incomplete"
        if response.usage is not None:
            self.prompt_tokens = response.usage.input_tokens
            self.completion_tokens = response.usage.output_tokens

    @property
    def tool_calls(self) -> list[dict]:
        """The function calls streamed so far, in the order their items were added (output order)."""
        return [{"id": call_id, "type": "function", "function": {"name": name, "arguments": "".join(parts)}}
                for call_id, name, parts in self._calls.values()]
