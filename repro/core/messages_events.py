"""Sans-I/O decoding of an Anthropic Messages stream (`POST /v1/messages`, `stream: true`).

The reader takes the SSE events of each read (what `repro.core.sse.SSEDecoder.feed` returned)
and keeps what chat's `ChunkReader` keeps: the reply's pieces, the tool calls, why the reply
stopped, the token usage, the events that count as progress, and whether the stream is done or
unusable. The interface is the chat reader's, so a client and the round's clock read any API's
stream alike.

What the events mean (Anthropic's streaming reference; vLLM's `vllm.entrypoints.anthropic`
sends the same): `message_start` (input usage), `content_block_start` (a `text`, `thinking` or
`tool_use` block at an `index`), `content_block_delta` (`text_delta`, `thinking_delta`,
`input_json_delta` fragments of a tool's input), `content_block_stop`, `message_delta`
(`stop_reason`, output usage), `message_stop` (the last event: done), `error` (an
`{"type": "error", "error": {...}}` envelope inside a 200 stream), and `ping`. A `ping` is a
keep-alive, as an SSE comment is: bytes, not progress. It is counted in `keepalives`, never in
`events`, so a round kept alive by pings alone still reads as stalled.

Tool calls are returned in chat's shape ({"id", "type", "function": {"name", "arguments"}}):
one neutral form for the driver, whatever the wire said.
"""

from __future__ import annotations

from typing import Any

import msgspec

from repro.core.sse import SSEEvent


class _Block(msgspec.Struct):
    type: str | None = None
    id: str | None = None
    name: str | None = None
    text: str | None = None


class _Delta(msgspec.Struct):
    type: str | None = None
    text: str | None = None
    thinking: str | None = None
    partial_json: str | None = None
    stop_reason: str | None = None


class _Usage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None


class _Message(msgspec.Struct):
    usage: _Usage | None = None


class _Event(msgspec.Struct):
    type: str = ""
    index: int | None = None
    content_block: _Block | None = None
    delta: _Delta | None = None
    usage: _Usage | None = None
    message: _Message | None = None
    error: Any = None


_decode = msgspec.json.Decoder(_Event).decode
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError)


class MessagesReader:
    """One round's Messages stream, read as it arrives."""

    __slots__ = ("reply", "finish_reason", "prompt_tokens", "completion_tokens", "events", "keepalives",
                 "done", "_calls")

    def __init__(self) -> None:
        self.reply: list[str] = []
        self._calls: dict[int, list] = {}  # block index -> [id, name, [input fragments]]
        self.finish_reason: str | None = None  # the wire's stop_reason: end_turn, tool_use, max_tokens
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.events = 0  # events that are progress; a failing one counts (it arrived)
        self.keepalives = 0  # `ping` events: bytes, not progress
        self.done = False  # `message_stop` arrived

    def feed(self, events: list[SSEEvent]) -> tuple[int, bool, str | None]:
        """Read the events of one read, in order: the reply characters they carried, whether
        `message_stop` was among them, and None or why the stream cannot be trusted past here."""
        chars = 0
        done_here = False
        failure = None
        for sse in events:
            try:
                event = _decode(sse.data)
            except _DECODE_ERRORS as exc:
                self.events += 1
                failure = f"malformed JSON in SSE event #{self.events}: {exc}"
                break
            kind = event.type or sse.event or ""
            if kind == "ping":
                self.keepalives += 1
                continue
            self.events += 1
            if kind == "error":
                failure = f"error event in stream: {str(event.error)[:200]}"
                break
            if kind == "content_block_delta" and event.delta is not None:
                chars += self._delta(event.index, event.delta)
            elif kind == "content_block_start" and event.content_block is not None:
                chars += self._start(event.index, event.content_block)
            elif kind == "message_delta":
                if event.delta is not None and event.delta.stop_reason:
                    self.finish_reason = event.delta.stop_reason
                if event.usage is not None and event.usage.output_tokens is not None:
                    self.completion_tokens = event.usage.output_tokens
            elif kind == "message_start" and event.message is not None and event.message.usage is not None:
                self.prompt_tokens = event.message.usage.input_tokens
            elif kind == "message_stop":
                done_here = True
        if done_here:
            self.done = True
        return chars, done_here, failure

    def _start(self, index: int | None, block: _Block) -> int:
        if block.type == "tool_use":
            self._calls[index if index is not None else len(self._calls)] = [block.id or "", block.name or "", []]
            return len(block.name or "")
        if block.text:
            self.reply.append(block.text)
            return len(block.text)
        return 0

    def _delta(self, index: int | None, delta: _Delta) -> int:
        piece = delta.text if delta.type == "text_delta" else delta.thinking if delta.type == "thinking_delta" else None
        if piece:
            self.reply.append(piece)
            return len(piece)
        if delta.type == "input_json_delta" and delta.partial_json:
            call = self._calls.get(index if index is not None else -1)
            if call is None:  # a fragment of a block never started: keep it under its index anyway
                call = self._calls[index if index is not None else len(self._calls)] = ["", "", []]
            call[2].append(delta.partial_json)
            return len(delta.partial_json)
        return 0

    @property
    def tool_calls(self) -> list[dict]:
        """The tool_use blocks streamed so far, in block order, in chat's shape; an input that
        streamed no fragment is the empty object, as Anthropic's SDK reads it."""
        return [{"id": call_id, "type": "function", "function": {"name": name, "arguments": "".join(parts) or "{}"}}
                for _, (call_id, name, parts) in sorted(self._calls.items())]
