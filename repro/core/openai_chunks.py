"""Sans-I/O decoding of an OpenAI chat-completions stream: SSE events in, the reply out.

One `ChunkReader` per round. The driver feeds it the events of each read (what
`repro.core.sse.SSEDecoder.feed` returned, payloads as bytes); it keeps the reply's pieces, the
finish reason and the token usage, counts the events, and tells when the stream is done
(`data: [DONE]`) or unusable (a payload that is not a chunk, an error event). No sockets and no
clock: what a read means for timing (progress, gaps, time to first token) is the driver's.

Tool calls are assembled the way the OpenAI SDK does (openai/lib/streaming/_deltas.py): deltas
are grouped by `index`; the first carries `id`, `type` and `function.name`, later ones
`function.arguments` fragments, concatenated. SGLang repeats `"id": null` and `"name": null` on
those later deltas, vLLM leaves them out; both read the same here. Unlike the SDK, a repeated id
is kept once rather than concatenated: ids are opaque, never sent in fragments.

`feed` runs once per read and its loop once per SSE event, on the driver's hottest path, so the
loop stays inline: no helper call per event.
"""

from __future__ import annotations

from typing import Any

import msgspec

from repro.core.sse import SSEEvent


# The fields of an OpenAI chunk the driver reads; msgspec skips the rest without building it.
class _FunctionDelta(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(msgspec.Struct):
    index: int | None = None
    id: str | None = None
    type: str | None = None
    function: _FunctionDelta | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    # vLLM sends `"tool_calls": []` beside plain content; only a non-empty list costs anything.
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []
    usage: _Usage | None = None
    error: Any = None


# Bound once at import and read as a global per event: nothing to bind on each call of `feed`,
# which mostly gets one event per read.
_decode = msgspec.json.Decoder(_Chunk).decode
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError)


class ChunkReader:
    """One round's stream of chunks, read as it arrives."""

    __slots__ = ("reply", "finish_reason", "prompt_tokens", "completion_tokens", "events", "done", "_calls")

    def __init__(self) -> None:
        self.reply: list[str] = []  # content (or reasoning) pieces in order; joined once, at the end
        self._calls: list[_ToolCall] = []  # tool calls in the order their first delta came
        self.finish_reason: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        # Events read so far, a failing one included (it arrived); events after it are not read.
        self.events = 0
        self.done = False  # `data: [DONE]` arrived

    def feed(self, events: list[SSEEvent]) -> tuple[int, bool, str | None]:
        """Read the events of one read, in order.

        Returns the characters of reply they carried, whether `[DONE]` was among them, and None
        or why the stream cannot be trusted past here (reading stops at that event).
        """
        reply = self.reply
        n = self.events
        chars = 0
        done_here = False
        failure = None
        for sse in events:
            n += 1
            data = sse.data
            if data == b"[DONE]":
                done_here = True
                continue
            try:
                chunk = _decode(data)
            except _DECODE_ERRORS as exc:
                failure = f"malformed JSON in SSE event #{n}: {exc}"
                break
            if chunk.error is not None:
                failure = f"error event in stream: {str(chunk.error)[:200]}"
                break
            for choice in chunk.choices:
                delta = choice.delta
                if delta is not None:
                    piece = delta.content or delta.reasoning_content
                    if piece:
                        reply.append(piece)
                        chars += len(piece)
                    if delta.tool_calls:
                        chars += self.add_tool_deltas(delta.tool_calls)
                if choice.finish_reason:
                    self.finish_reason = choice.finish_reason
            usage = chunk.usage
            if usage is not None:
                self.prompt_tokens = usage.prompt_tokens
                self.completion_tokens = usage.completion_tokens
        self.events = n
        if done_here:
            self.done = True
        return chars, done_here, failure

    @property
    def tool_calls(self) -> list[dict]:
        """The tool calls streamed so far, in the order of their index, each as an assistant
        message carries it: {"id", "type", "function": {"name", "arguments"}}."""
        calls = sorted(self._calls, key=lambda call: call.index) if len(self._calls) > 1 else self._calls
        return [{"id": call.id, "type": call.type,
                 "function": {"name": "".join(call.name), "arguments": "".join(call.arguments)}}
                for call in calls]

    def add_tool_deltas(self, deltas) -> int:
        """Fold tool-call deltas into their calls; returns the name and argument characters they
        carried: a round that streams only a tool call is progressing (each fragment is a token).

        `feed` calls it; a client that gets chunks already parsed (the openai SDK's
        `delta.tool_calls`, objects with the same attribute names) calls it directly."""
        calls = self._calls
        chars = 0
        for delta in deltas:
            index = delta.index
            call = None
            if index is None:
                # No index (some OpenAI-compatible servers): a new id starts a new call; otherwise
                # the fragment belongs to the call in progress.
                if calls and not (delta.id and delta.id != calls[-1].id):
                    call = calls[-1]
                index = len(calls)
            else:
                for known in reversed(calls):  # the call in progress is the last one, almost always
                    if known.index == index:
                        call = known
                        break
            if call is None:
                call = _ToolCall(index, delta.id or "", delta.type or "function")
                calls.append(call)
            elif delta.id and not call.id:
                call.id = delta.id
            function = delta.function
            if function is not None:
                if function.name:
                    call.name.append(function.name)
                    chars += len(function.name)
                if function.arguments:
                    call.arguments.append(function.arguments)
                    chars += len(function.arguments)
        return chars


class _ToolCall:
    """A tool call being assembled; fragments are joined once, when asked for."""

    __slots__ = ("index", "id", "type", "name", "arguments")

    def __init__(self, index: int, call_id: str, kind: str) -> None:
        self.index = index
        self.id = call_id
        self.type = kind
        self.name: list[str] = []
        self.arguments: list[str] = []
