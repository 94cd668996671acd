"""The aiohttp client's transport: its connections, and what their errors mean.

Why aiohttp is the default client: measured (benchmarks/run.py), httpx + httpcore + h11 cost ~40 us
of CPU per SSE chunk and ~0.7 ms per request start even when nothing is done with the bytes, twice
aiohttp's whole cost per event; aiohttp parses HTTP in C (llhttp). benchmarks/clients.py sets the
driver's four clients side by side.

aiohttp's exceptions end here: `transport_error` turns them into the one-line errors the run log
records.
"""

from __future__ import annotations

import errno
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import aiohttp
from aiohttp.http_exceptions import ContentLengthError, TransferEncodingError

from repro.core.kinds import Phase, RoundFailure
from repro.io.tls import rejection
from repro.load.clients.base import local_address
from repro.load.round import RoundState, TrackedConnection

# The round a request belongs to: set by the round's own task around its request, read by the
# connector in that same task, so one connector shared by many conversations (--connections
# pool=N) still tells each round which connection it got.
current_round: ContextVar[RoundState | None] = ContextVar("repro_current_round", default=None)


class TrackingConnector(aiohttp.TCPConnector):
    """A pool that tells each round which connection it got, when it is in hand (before the
    request is written), so a round that stalls before its first byte already knows its local
    port (what the proxy's flow log names) and whether it reused the connection.

    Reuse is told by identity: aiohttp hands back the very protocol object of a kept-alive
    connection, and a new one for a new connection; each is remembered (weakly: a closed one
    goes with its protocol) with its local address and transport. `connected(round, connection,
    reused)` gets the round state `current_round` holds.
    """

    def __init__(self, connected: Callable[[RoundState, TrackedConnection, bool], None], **options: Any) -> None:
        super().__init__(**options)
        self._on_connected = connected
        self._known: weakref.WeakKeyDictionary[Any, TrackedConnection] = weakref.WeakKeyDictionary()

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        connection = await super().connect(req, traces, timeout)
        protocol = connection.protocol
        known = self._known.get(protocol)
        reused = known is not None
        if known is None:
            known = self._known[protocol] = TrackedConnection(local_address(connection.transport), connection.transport)
            _read_at_most(connection.transport, READ_SIZE)
        state = current_round.get()
        if state is not None:
            self._on_connected(state, known, reused)
        return connection


# asyncio's socket transport reads with recv(256 KiB). A request that large is past glibc's
# mmap threshold (128 KiB), so every read of a small SSE chunk costs mmap + mremap + munmap and a
# page fault on top of the recv (seen with strace; CPython issue #85451). 64 KiB stays on the
# heap: measured, recv's share of the driver's CPU at 1024 paced streams went from 45% to 17%.
# A stream with more waiting (a driver behind in a flood) is read in several recvs: no loss.
READ_SIZE = 64 * 1024


def _read_at_most(transport: Any, size: int) -> None:
    """Cap the bytes one recv asks for. `max_size` is the selector transport's (public, if
    undocumented) class attribute; other transports (TLS reads into a buffer) lack it."""
    if getattr(transport, "max_size", 0) > size:
        transport.max_size = size


def transport_failure(exc: BaseException) -> RoundFailure:
    """How a round failed on the wire, as a repro.core.kinds.RoundFailure, decided by exception type."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return "connect-timeout"
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return "timeout"
    if isinstance(exc, aiohttp.ClientConnectorError) and rejection(exc) is not None:
        return "tls"  # our client refused the certificate (or the handshake failed): no request went out
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "connect"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "truncated"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "early-close"
    return "reset"


def transport_error(exc: BaseException, phase: Phase) -> str:
    """One line naming what went wrong on the wire, in the words the run log has always used
    (ConnectError, RemoteProtocolError, ReadError: what readers of older logs and verdicts know)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        if (tls := rejection(exc)) is not None:
            return f"ConnectError: TLS with {exc.host}:{exc.port}: {tls.text}"[:300]
        os_error = exc.os_error
        reason = "connection refused" if isinstance(os_error, ConnectionRefusedError) else str(os_error.strerror or os_error)
        return f"ConnectError: cannot connect to {exc.host}:{exc.port}: {reason}"
    if isinstance(exc, aiohttp.ClientPayloadError):
        cause = exc.__cause__
        why = ("incomplete chunked read" if isinstance(cause, TransferEncodingError)
               else "fewer bytes than Content-Length" if isinstance(cause, ContentLengthError)
               else str(cause or exc).replace("\n", " ")[:200])
        return f"RemoteProtocolError: peer closed connection without sending complete message body ({why})"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        if phase == "before-first-byte":
            return "RemoteProtocolError: server disconnected without sending a response"
        return "RemoteProtocolError: peer closed connection without sending complete message body"
    if isinstance(exc, OSError):  # a reset or broken pipe, from aiohttp (ClientOSError) or the socket
        name = "WriteError" if exc.errno == errno.EPIPE or isinstance(exc, BrokenPipeError) else "ReadError"
        return f"{name}: {exc}" if str(exc) else name
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
