"""A sans-I/O Server-Sent Events decoder: bytes in, events out, no sockets or clocks.

Follows the WHATWG event-stream rules that matter for LLM streams: lines end in LF, CRLF or
CR (a CR at the end of one chunk may pair with an LF at the start of the next); `:` lines are
comments (keep-alive pings: counted, never events); `data` lines of one event join with LF;
a blank line dispatches; an event with no data is not dispatched. The common case, one
`data: ...` line per event with LF endings, takes a fast path that splits on blank lines
without looking at each line.

EventBoundaries applies the same rules to say where each dispatched event ends in the raw
bytes, for a proxy that forwards the bytes unchanged but counts, spaces or cuts them by event;
tests/core/test_sse_boundaries.py checks that both always agree.
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


_LF, _CR = 10, 13


class EventBoundaries:
    """Where dispatched events end in a byte stream that arrives split at arbitrary points.

    ends(chunk) returns, for each event the decoder would dispatch on reading `chunk`, the offset
    in `chunk` just past the line end of the blank line that dispatches it: cutting there passes
    exactly the events so far. Comments and events without data are not events here either.
    A CR that ends a chunk ends its line at once (the decoder dispatches there too); an LF that
    then opens the next chunk completes that CRLF, belongs to no line, and `lf_rest` says so.
    Only a few bytes of state are kept, never the event itself.
    """

    __slots__ = ("_head", "_has_data", "_after_cr", "lf_rest")

    def __init__(self) -> None:
        self._head = b""  # the line not yet ended, up to 5 bytes: enough to tell a data field
        self._has_data = False  # the event being read has a data field, so a blank line dispatches it
        self._after_cr = False
        self.lf_rest = 0  # 1 if the last chunk began with the LF of a CRLF split across chunks

    def ends(self, data: bytes) -> list[int]:
        out: list[int] = []
        n = len(data)
        i = 0
        self.lf_rest = 0
        if self._after_cr and n:
            self._after_cr = False
            if data[0] == _LF:
                i = self.lf_rest = 1
        head, has_data = self._head, self._has_data
        lf = data.find(b"\n", i)
        cr = data.find(b"\r", i)
        while i < n:
            if 0 <= lf < i:
                lf = data.find(b"\n", i)
            if 0 <= cr < i:
                cr = data.find(b"\r", i)
            j = lf if cr < 0 or 0 <= lf < cr else cr
            if j < 0:  # the line goes on in the next chunk
                if len(head) < 5:
                    head = (head + data[i:i + 5])[:5]
                break
            head = (head + data[i:min(j, i + 5)])[:5]
            end = j + 1
            if data[j] == _CR:
                if end < n:
                    if data[end] == _LF:
                        end += 1
                else:
                    self._after_cr = True
            if not head:
                if has_data:
                    out.append(end)
                    has_data = False
            elif head in (b"data", b"data:"):  # the field name is "data": the whole line, or up to a colon
                has_data = True
            head = b""
            i = end
        self._head, self._has_data = head, has_data
        return out
