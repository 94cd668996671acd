"""Sans-I/O decoding of an OpenAI chat-completions stream: SSE events in, the reply out.

One `ChunkReader` per round. The driver feeds it the events of each read (what
`repro.core.sse.SSEDecoder.feed` returned, payloads as bytes); it keeps the reply's pieces, the
finish reason and the token usage, counts the events, and tells when the stream is done
(`data: [DONE]`) or unusable (a payload that is not a chunk, an error event). No sockets and no
clock: what a read means for timing (progress, gaps, time to first token) is the driver's.

`feed` runs once per read and its loop once per SSE event, on the driver's hottest path, so the
loop stays inline: no helper call per event.
"""

from __future__ import annotations

from typing import Any

import msgspec

from repro.core.sse import SSEEvent


# The fields of an OpenAI chunk the driver reads; msgspec skips the rest without building it.
class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None


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

    __slots__ = ("reply", "finish_reason", "prompt_tokens", "completion_tokens", "events", "done")

    def __init__(self) -> None:
        self.reply: list[str] = []  # content (or reasoning) pieces in order; joined once, at the end
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
