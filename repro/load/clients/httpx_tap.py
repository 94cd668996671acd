"""Which connection an httpx (or httpx2, the openai SDK's fork) request got, from the library's own
hooks, with the library's own pool left as it is.

A transport wrapper puts httpcore's `trace` request extension on every request: a
`connection.connect_tcp.complete` event hands over the new connection's network stream (its
socket gives the local port); a request that reaches `http11.send_request_headers` without one
reused a kept-alive connection. A conversation's rounds are sequential, so the connection a
reused round got is the one its previous round used (the only one its pool holds idle); the
response's own `network_stream` extension confirms it once headers arrive. Over https the
connection's stream is the TLS one (`start_tls.complete`): its socket is the live one.

The wrapper can also stamp the round's last byte on every chunk of body bytes the library reads
(for the SDK clients, which iterate the SDK's own stream objects, not the bytes).
"""

from __future__ import annotations

import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from repro.load.clients.base import local_address
from repro.load.round import RoundState, TrackedConnection

CONNECTED = "connection.connect_tcp.complete"
TLS_STARTED = "connection.start_tls.complete"
SENDING = "http11.send_request_headers.started"
# `data: [DONE]` as a line of its own (SSE allows no space after the colon), never inside one:
# a reply's text may quote it, but JSON escapes a newline, so it cannot start a line.
DONE_LINE = re.compile(rb"[\r\n]data: ?\[DONE\]")
DONE_CARRY = len(b"\ndata: [DONE]") - 1  # bytes of a read kept to find a marker split across reads


class DoneFinder:
    """Finds the `data: [DONE]` line in one response body, read by read."""

    __slots__ = ("_tail", "found")

    def __init__(self) -> None:
        self._tail = b"\n"  # the body's start is a line's start
        self.found = False

    def feed(self, part: bytes) -> bool:
        if not self.found:
            text = self._tail + part
            self.found = DONE_LINE.search(text) is not None
            self._tail = text[-DONE_CARRY:]
        return self.found


class Abandoned(BaseException):
    """Raised into a library still working on a round the driver gave up on. A BaseException, so
    that no retry loop (the openai SDK retries any Exception before headers) sends it again."""


class Tap:
    """One conversation's connection bookkeeping. `round` is set by the conversation before each
    request (the round's state); `connected(round, connection, reused)` is called when the
    request is about to go out (the sync clients pass one that hops to the event loop's thread)."""

    def __init__(self, connected: Callable[[RoundState, TrackedConnection, bool], None], now: Callable[[], float]) -> None:
        self.connected = connected
        self.now = now
        self.round: RoundState | None = None
        self.current: TrackedConnection | None = None  # the connection of the request in flight, or the last one
        self.saw_done = False
        self.attempts = 0  # requests sent for the round: more than one when the library retried
        self.abandoned = False  # the driver gave up on the round: the library may not send it again
        self.woken = threading.Event()  # set with `abandoned`: cuts a sync thread's retry back-off short
        self._fresh: TrackedConnection | None = None

    def abandon(self) -> None:
        self.abandoned = True
        self.woken.set()

    def on_trace(self, name: str, info: dict[str, Any]) -> None:
        if self.abandoned and "close" not in name:  # closing is what an abandoned round still needs
            # A thread left connecting stops here, before its request goes out (the next trace
            # after the connect is the send); a stream just opened is closed, not leaked.
            if name in (CONNECTED, TLS_STARTED):
                close = getattr(info.get("return_value"), "close", None)
                if close is not None:
                    close()
            raise Abandoned
        if name == CONNECTED:
            stream = info.get("return_value")
            self._fresh = TrackedConnection(local_address(stream), stream)
        elif name == TLS_STARTED and self._fresh is not None:
            # The TCP stream's socket now belongs to the TLS one (sync: the old object is detached).
            self._fresh.transport = info.get("return_value")
        elif name == SENDING:
            fresh, self._fresh = self._fresh, None
            reused = fresh is None
            if fresh is not None:
                self.current = fresh
            if self.current is not None and self.round is not None:
                self.connected(self.round, self.current, reused)

    async def on_trace_async(self, name: str, info: dict[str, Any]) -> None:
        self.on_trace(name, info)

    def confirm(self, response_extensions: dict[str, Any]) -> None:
        """Headers arrived: the response names its own network stream."""
        stream = response_extensions.get("network_stream")
        current = self.current
        if stream is None or (current is not None and current.transport is stream):
            return
        local = local_address(stream)
        if current is not None and local is not None and current.local == local:
            # The same connection by another stream object (a TLS wrapper): keep the TrackedConnection,
            # which carries when its last round released it.
            current.transport = stream
        else:
            self.current = TrackedConnection(local, stream)

    def stamp(self, part: bytes, done: DoneFinder) -> None:
        state = self.round
        if state is not None and part and not self.abandoned:
            # Counted as a trickle until the SDK hands over a chunk (progress resets the count):
            # bytes that never become a chunk are keep-alive comments or partial events.
            state.trickle(self.now())
            if done.feed(part):
                self.saw_done = True


def tapped_transport(httpx_module: Any, inner: Any, tap: Tap, *, stamp_bytes: bool, sync: bool,
                     tap_of: Callable[[], Tap] | None = None) -> Any:
    """`inner` (the library's own HTTP transport, its pool inside) wrapped so that every request
    carries the trace hook and, if asked, every body chunk stamps the round. `tap_of` (sync only):
    the tap of the calling thread's round, read when a request starts, so that a thread left
    behind by an abandoned round keeps its own tap and never touches a later round's."""
    if sync:
        class SyncStamped(httpx_module.SyncByteStream):
            def __init__(self, stream: Any, tap: Tap) -> None:
                self._stream = stream
                self._tap = tap
                self._done = DoneFinder()

            def __iter__(self) -> Iterator[bytes]:
                for part in self._stream:
                    self._tap.stamp(part, self._done)
                    yield part

            def close(self) -> None:
                self._stream.close()

        class SyncTapped(httpx_module.BaseTransport):
            def handle_request(self, request: Any) -> Any:
                round_tap = tap_of() if tap_of is not None else tap
                if round_tap.abandoned:
                    raise Abandoned
                request.extensions["trace"] = round_tap.on_trace
                round_tap.attempts += 1
                response = inner.handle_request(request)
                round_tap.confirm(response.extensions)
                if stamp_bytes:
                    response.stream = SyncStamped(response.stream, round_tap)
                return response

            def close(self) -> None:
                inner.close()

        return SyncTapped()

    class AsyncStamped(httpx_module.AsyncByteStream):
        def __init__(self, stream: Any) -> None:
            self._stream = stream
            self._done = DoneFinder()

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for part in self._stream:
                tap.stamp(part, self._done)
                yield part

        async def aclose(self) -> None:
            await self._stream.aclose()

    class AsyncTapped(httpx_module.AsyncBaseTransport):
        async def handle_async_request(self, request: Any) -> Any:
            request.extensions["trace"] = tap.on_trace_async
            tap.attempts += 1
            response = await inner.handle_async_request(request)
            tap.confirm(response.extensions)
            if stamp_bytes:
                response.stream = AsyncStamped(response.stream)
            return response

        async def aclose(self) -> None:
            await inner.aclose()

    return AsyncTapped()
