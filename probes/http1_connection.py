"""One HTTP/1.1 connection held by the caller, for `repro audit`'s measurements: requests one at
a time, a streamed request read event by event, and a wait for the peer's close.

h11 (httpx's own HTTP/1.1 state machine, already installed with it) frames the requests on
connections we hold ourselves: a pooled client (httpx, aiohttp) hides when the peer closed an
idle connection, which is the very thing the audit measures.
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import h11

READ_BYTES = 65536
# A refused upload: what the socket says when the hop closed it under our write.
CLOSED_ERRORS = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, ConnectionError, OSError)


@dataclass(frozen=True)
class Reply:
    status: int | None  # None: no answer (the connection ended or failed)
    error: str | None = None  # "eof", "reset", "timeout", ...
    body: bytes = b""
    server: str | None = None  # its Server header (what software answered, or the one behind it passed on)
    # The peer closed or reset the connection before the answer was whole (or under our upload): as a
    # value, for what a close means (a refused body), never read from `error`'s words.
    closed: bool = False


@dataclass(frozen=True)
class Streamed:
    """What a streamed request got before we stopped reading (or it ended)."""

    status: int | None
    headers: dict[str, str]
    events: int  # SSE events read
    ended: bool  # the answer ended (its last chunk came)
    error: str | None  # "eof", "reset", "timeout", ...
    seconds: float  # from the request sent to the last thing read
    first_event_s: float | None = None
    timed_out: bool = False  # the deadline ended the read (error "timeout")


class Http1Connection:
    """One HTTP/1.1 connection we hold: requests one at a time, and a wait for the peer's close."""

    def __init__(self, url: str, stream, host: str, started: float | None = None) -> None:
        self.url, self.stream, self.host = url, stream, host
        self.started = time.monotonic() if started is None else started  # when the connect began
        self.conn = h11.Connection(h11.CLIENT)
        self.peer_closed = False  # the peer's EOF was read
        self.peer_reset = False  # a read failed on a reset (or an EOF raised as one)

    @classmethod
    async def open(cls, url: str, *, timeout: float, tls: ssl.SSLContext | None) -> Http1Connection:
        started = time.monotonic()
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        with anyio.fail_after(timeout):
            if parts.scheme == "https":
                stream = await anyio.connect_tcp(parts.hostname, port, tls=True, ssl_context=tls,
                                                 tls_standard_compatible=False)
            else:
                stream = await anyio.connect_tcp(parts.hostname, port)
        return cls(url, stream, parts.netloc, started)

    def left(self, timeout: float) -> float:
        """What remains of `timeout` counted from when the connect began: a connect and the exchange
        after it share one deadline, so that `repro audit`'s time bound counts one per exchange."""
        return max(0.0, timeout - (time.monotonic() - self.started))

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def request(self, method: str, url: str, body: bytes = b"", *, headers: dict[str, str] | None = None,
                      timeout: float) -> Reply:
        """One request and its whole answer, within `timeout`; a refused upload or a close is a Reply with an error."""
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
        elif self.conn.our_state is not h11.IDLE:
            return Reply(None, "not reusable (the hop said Connection: close)")
        parts = urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        sent = [("Host", self.host), ("User-Agent", "repro-audit"), ("Accept", "application/json")]
        sent += list((headers or {}).items())
        if body:
            sent += [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        with anyio.move_on_after(timeout) as scope:
            try:
                await self.stream.send(self.conn.send(h11.Request(method=method, target=target, headers=sent)))
                if body:
                    await self.stream.send(self.conn.send(h11.Data(data=body)))
                await self.stream.send(self.conn.send(h11.EndOfMessage()))
            except CLOSED_ERRORS as exc:
                # The hop may have answered (413) before closing under our upload: read what it sent.
                reply = await self._answer()
                return reply if reply.status is not None else Reply(None, f"closed during upload ({error_name(exc)})",
                                                                    closed=True)
            return await self._answer()
        assert scope.cancelled_caught
        return Reply(None, "timeout")

    async def next_event(self) -> h11.Event | str:
        """The peer's next HTTP event, reading the socket whenever h11 needs more bytes; or why none
        came: "eof" (the peer closed before its answer was whole; an answer whose end is the close,
        h11 completes), "reset" or another socket error's name, "protocol error (...)"."""
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as exc:
                return "eof" if self.peer_closed else f"protocol error ({exc})"
            if event is not h11.NEED_DATA:
                return event
            try:
                data = await self.stream.receive(READ_BYTES)
            except anyio.EndOfStream:
                data = b""
            except CLOSED_ERRORS as exc:
                self.peer_reset = is_close(exc)
                return error_name(exc)
            self.peer_closed = not data
            self.conn.receive_data(data)

    async def _answer(self) -> Reply:
        status, body, server = None, bytearray(), None
        while True:
            event = await self.next_event()
            if isinstance(event, str):
                return Reply(status, event, bytes(body), server, closed=self.peer_closed or self.peer_reset)
            if isinstance(event, h11.Response):
                status = event.status_code
                server = next((v.decode(errors="replace") for k, v in event.headers if k == b"server"), None)
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return Reply(status, None, bytes(body), server)

    async def open_stream(self, url: str, body: bytes, *, headers: dict[str, str], events: int,
                          timeout: float) -> Streamed:
        """Send a streamed request and read its answer until `events` SSE events came, the answer
        ended, or `timeout`; the connection stays open (close it to cancel the stream)."""
        start = time.monotonic()
        parts = urlsplit(url)
        sent = [("Host", self.host), ("User-Agent", "repro-audit"), ("Accept", "text/event-stream"),
                ("Content-Type", "application/json"), ("Content-Length", str(len(body))), *headers.items()]
        status, response_headers, seen, buffer, first = None, {}, 0, b"", None
        with anyio.move_on_after(timeout):
            try:
                await self.stream.send(self.conn.send(h11.Request(method="POST", target=parts.path, headers=sent)))
                await self.stream.send(self.conn.send(h11.Data(data=body)))
                await self.stream.send(self.conn.send(h11.EndOfMessage()))
            except CLOSED_ERRORS as exc:
                return Streamed(None, {}, 0, False, f"closed during upload ({error_name(exc)})",
                                time.monotonic() - start)
            while True:
                event = await self.next_event()
                if isinstance(event, str):
                    return Streamed(status, response_headers, seen, False, event, time.monotonic() - start, first)
                if isinstance(event, h11.Response):
                    status = event.status_code
                    response_headers = {k.decode().lower(): v.decode(errors="replace") for k, v in event.headers}
                elif isinstance(event, h11.Data):
                    buffer += event.data
                    while b"\n\n" in buffer:
                        chunk, buffer = buffer.split(b"\n\n", 1)
                        if chunk.strip():
                            seen += 1
                            first = first if first is not None else time.monotonic() - start
                    if status == 200 and seen >= events:
                        return Streamed(status, response_headers, seen, False, None, time.monotonic() - start, first)
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    return Streamed(status, response_headers, seen, True, None, time.monotonic() - start, first)
        return Streamed(status, response_headers, seen, False, "timeout", time.monotonic() - start, first,
                        timed_out=True)

    async def idle_until_closed(self, limit: float) -> tuple[float | None, str]:
        """Seconds until the peer closed this idle connection (EOF or reset), and how; None when still open at `limit`."""
        start = time.monotonic()
        with anyio.move_on_after(limit):
            try:
                data = await self.stream.receive(READ_BYTES)
            except anyio.EndOfStream:
                return time.monotonic() - start, "eof"
            except CLOSED_ERRORS as exc:
                return time.monotonic() - start, error_name(exc)
            return time.monotonic() - start, f"{len(data)} unexpected bytes"
        return None, "still open"


def is_close(exc: BaseException) -> bool:
    """The peer reset or closed the connection (error_name's "reset" and "eof")."""
    return isinstance(exc, ConnectionResetError | anyio.BrokenResourceError | anyio.EndOfStream)


def error_name(exc: BaseException) -> str:
    if isinstance(exc, ConnectionResetError | anyio.BrokenResourceError):
        return "reset"
    if isinstance(exc, anyio.EndOfStream):
        return "eof"
    return type(exc).__name__
