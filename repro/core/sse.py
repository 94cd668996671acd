"""A sans-I/O Server-Sent Events decoder: bytes in, events out, no sockets or clocks.

Follows the WHATWG event-stream rules that matter for LLM streams: lines end in LF, CRLF or
CR (a CR at the end of one chunk may pair with an LF at the start of the next); `:` lines are
comments (keep-alive pings: counted, never events); `data` lines of one event join with LF;
a blank line dispatches; an event with no data is not dispatched. The common case, one
`data: ...` line per event with LF endings, takes a fast path that splits on blank lines
without looking at each line.
"""

from __future__ import annotations

from typing import NamedTuple


class SSEEvent(NamedTuple):
    data: bytes
    event: str | None = None
    id: str | None = None


_new_event = tuple.__new__


class SSEDecoder:
    __slots__ = ("_buffer", "_after_cr", "last_id", "comments")

    def __init__(self) -> None:
        self._buffer = b""
        self._after_cr = False
        self.last_id: str | None = None
        self.comments = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if self._after_cr and chunk:
            self._after_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            # A trailing CR may be the first half of a CRLF split across two chunks.
            self._after_cr = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if self._buffer:
            chunk = self._buffer + chunk
        blocks = chunk.split(b"\n\n")
        self._buffer = blocks.pop()
        if not blocks:
            return []
        out: list[SSEEvent] = []
        last_id = self.last_id
        for block in blocks:
            if block[:6] == b"data: " and b"\n" not in block:
                # tuple.__new__ directly: a NamedTuple's own __new__ is a Python-level call per event.
                out.append(_new_event(SSEEvent, (block[6:], None, last_id)))
            else:
                self._block(block, out)
                last_id = self.last_id
        return out

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet terminated by a blank line."""
        return self._buffer

    def _block(self, block: bytes, out: list[SSEEvent]) -> None:
        data: list[bytes] = []
        event: str | None = None
        for line in block.split(b"\n"):
            if not line:
                continue
            if line[:1] == b":":
                self.comments += 1
                continue
            name, sep, value = line.partition(b":")
            if sep and value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                data.append(value)
            elif name == b"event":
                event = value.decode("utf-8", "replace")
            elif name == b"id" and b"\0" not in value:
                self.last_id = value.decode("utf-8", "replace")
        if data:
            out.append(SSEEvent(b"\n".join(data), event, self.last_id))
