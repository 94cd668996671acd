"""The only code that reaches past mitmproxy's addon API, into its proxyserver's connection handlers.

Two faults need the client connection itself: slow-drip writes events to it on its own schedule
(the stream callable is synchronous, so mitmproxy cannot delay a chunk), and idle-cut closes it
while no hook runs (flow.kill() cannot do that, mitmproxy#4711). Both find the handler under
`proxyserver.connections` (mitmproxy/proxy/server.py); when it is not there they report so and
the flow passes through unfaulted.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from mitmproxy import http

log = logging.getLogger("repro.proxy")

DRAIN_TIMEOUT_S = 30.0


def connection_handler(master, flow: http.HTTPFlow):
    try:
        return master.addons.get("proxyserver").connections.get(flow.client_conn.id)
    except AttributeError:
        return None


def close_client(master, flow: http.HTTPFlow) -> bool:
    """Close the flow's client connection; False if it could not be reached."""
    handler = connection_handler(master, flow)
    if handler is None:
        return False
    handler.close_connection(flow.client_conn)
    return True


class Drip:
    """slow-drip: write each SSE event to the client ourselves, one every `delay` seconds.

    The stream callable hands the bytes here and returns [], and this task writes them with the
    HTTP/1 framing the headers promised; the `response` hook awaits finish() before mitmproxy
    sends the end of the body, so the bytes on the wire stay in order.
    """

    def __init__(self, writer, chunked: bool, delay: float, on_sent: Callable[[int, int], None]) -> None:
        self.writer, self.chunked, self.delay, self.on_sent = writer, chunked, delay, on_sent
        self.pieces: deque[tuple[bytes, int]] = deque()  # (bytes, events it completes)
        self.wake = asyncio.Event()
        self.done_feeding = False
        self.task = asyncio.ensure_future(self._run())

    @classmethod
    def attach(cls, master, flow: http.HTTPFlow, delay: float,
               on_sent: Callable[[int, int], None]) -> Drip | None:
        """A drip writing to the flow's client, or None (logged) if its HTTP/1 writer is out of reach.

        on_sent(events, nbytes) is called after each piece reached the socket buffer.
        """
        handler = connection_handler(master, flow)
        transport = getattr(handler, "transports", {}).get(flow.client_conn) if handler is not None else None
        writer = getattr(transport, "writer", None)
        # HTTP/2 frames are written by mitmproxy's h2 connection state; bytes of our own would corrupt it
        if writer is None or flow.request.http_version not in ("HTTP/1.1", "HTTP/1.0"):
            log.warning("slow-drip: cannot reach the HTTP/1 client writer; passing through")
            return None
        chunked = "chunked" in flow.response.headers.get("transfer-encoding", "").lower()
        return cls(writer, chunked, delay, on_sent)

    def feed(self, data: bytes, ends: list[int]) -> None:
        """Queue `data`, one piece per event that ends in it (offsets from EventBoundaries).

        No piece is empty: in a chunked body an empty chunk is the body's end.
        """
        start = 0
        for end in ends:
            self.pieces.append((data[start:end], 1))
            start = end
        if start < len(data):  # the start of an event not yet complete: it goes out with the next delay
            self.pieces.append((data[start:], 0))
        self.wake.set()

    async def _run(self) -> None:
        try:
            while True:
                while not self.pieces:
                    if self.done_feeding:
                        return
                    self.wake.clear()
                    await self.wake.wait()
                piece, events = self.pieces.popleft()
                await asyncio.sleep(self.delay)
                self.writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if self.chunked else piece)
                await asyncio.wait_for(self.writer.drain(), DRAIN_TIMEOUT_S)
                self.on_sent(events, len(piece))
        except (OSError, TimeoutError, asyncio.CancelledError):
            pass  # the client went away: the flow's own error path closes it

    async def finish(self) -> None:
        """Wait until every fed piece was written (the body's end must come after them)."""
        self.done_feeding = True
        self.wake.set()
        await asyncio.wait({self.task})

    def cancel(self) -> None:
        self.task.cancel()
