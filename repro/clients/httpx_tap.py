"""Which connection an httpx (or httpx2, the openai SDK's fork) request got, from the library's own
hooks, with the library's own pool left as it is.

A transport wrapper puts httpcore's `trace` request extension on every request: a
`connection.connect_tcp.complete` event hands over the new connection's network stream (its
socket gives the local port); a request that reaches `http11.send_request_headers` without one
reused a kept-alive connection. A conversation's rounds are sequential, so the connection a
reused round got is the one its previous round used (the only one its pool holds idle); the
response's own `network_stream` extension confirms it once headers arrive.

The wrapper can also stamp the round's last byte on every chunk of body bytes the library reads
(for the SDK clients, which iterate the SDK's own stream objects, not the bytes).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from repro.clients.base import Connection, local_address

CONNECTED = "connection.connect_tcp.complete"
SENDING = "http11.send_request_headers.started"
DONE_MARK = b"data: [DONE]"


class Abandoned(BaseException):
    """Raised into a library still working on a round the driver gave up on. A BaseException, so
    that no retry loop (the openai SDK retries any Exception before headers) sends it again."""


class Tap:
    """One conversation's connection bookkeeping. `round` is set by the conversation before each
    request (the driver's RoundState); `connected(round, connection, reused)` is called when the
    request is about to go out (the sync clients pass one that hops to the event loop's thread)."""

    def __init__(self, connected: Callable[[Any, Connection, bool], None], now: Callable[[], float]) -> None:
        self.connected = connected
        self.now = now
        self.round: Any = None
        self.current: Connection | None = None  # the connection of the request in flight, or the last one
        self.saw_done = False
        self.attempts = 0  # requests sent for the round: more than one when the library retried
        self.abandoned = False  # the driver gave up on the round: the library may not send it again
        self._fresh: Connection | None = None

    def on_trace(self, name: str, info: dict[str, Any]) -> None:
        if name == CONNECTED:
            stream = info.get("return_value")
            self._fresh = Connection(local_address(stream), stream)
        elif name == SENDING:
            fresh, self._fresh = self._fresh, None
            reused = fresh is None
            if fresh is not None:
                self.current = fresh
            if self.current is not None and self.round is not None and not self.abandoned:
                self.connected(self.round, self.current, reused)

    async def on_trace_async(self, name: str, info: dict[str, Any]) -> None:
        self.on_trace(name, info)

    def confirm(self, response_extensions: dict[str, Any]) -> None:
        """Headers arrived: the response names its own network stream."""
        stream = response_extensions.get("network_stream")
        current = self.current
        if stream is not None and (current is None or current.transport is not stream):
            self.current = Connection(local_address(stream), stream)

    def stamp(self, part: bytes) -> None:
        state = self.round
        if state is not None and part and not self.abandoned:
            state.last_byte = now = self.now()
            # Counted as a trickle until the SDK hands over a chunk (progress resets the count):
            # bytes that never become a chunk are keep-alive comments or partial events.
            state.trickle(now)
            if DONE_MARK in part:
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

            def __iter__(self) -> Iterator[bytes]:
                for part in self._stream:
                    self._tap.stamp(part)
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

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for part in self._stream:
                tap.stamp(part)
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
