"""What the driver asks of a client: per conversation, stream one round at a time, then close.

A round's `stream` feeds the driver's RoundState the same stamps whatever the library (first
byte, last byte, last SSE event, events, first token), emits FirstByte and SSEReceived, and
reports the connection it got through `driver._connected` from the library's own hooks. It
returns None when the stream ended with `[DONE]`, else a RoundError; cancellation (the round
deadline, the watchdog) is the driver's and passes through.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from repro.core import events as ev

if TYPE_CHECKING:
    from repro.core.openai_chunks import ChunkReader
    from repro.load.driver import RoundState

# msgspec encodes a round's growing history several times faster than json.dumps.
json_encode = msgspec.json.Encoder().encode

# (phase, error for people, HTTP status or None, repro.core.kinds.RoundFailure)
RoundError = tuple[str, str, "int | None", str]


class ConversationClient(Protocol):
    async def stream(self, body: dict[str, Any], state: RoundState, reader: ChunkReader) -> RoundError | None: ...

    async def aclose(self) -> None: ...


class ClientFamily(Protocol):
    """The client of a whole run: hands out one ConversationClient per conversation (which may
    share a pool) and closes what is shared at the end."""

    def conversation(self, conv: int) -> ConversationClient: ...

    async def aclose(self) -> None: ...


class Connection:
    """One TCP connection as the driver knows it: where it is, and when its last round let go of it
    (a reused connection's idle time tells a keep-alive race from a reset)."""

    __slots__ = ("local", "transport", "released_at")

    def __init__(self, local: str | None, transport: Any) -> None:
        self.local = local
        self.transport = transport  # anything with get_extra_info("socket"): the watchdog reads it at a stall
        self.released_at: float | None = None

    def idle_s(self) -> float | None:
        return None if self.released_at is None else time.monotonic() - self.released_at


def tls_context(url: str, library_default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
    """One TLS context for a run's clients: the library's own default for https (built once: httpx
    builds one per client, ~40 ms each, which stalls the loop for a run of many conversations),
    an empty one for plain http, which never uses it."""
    return library_default() if url.startswith("https:") else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def local_address(transport: Any) -> str | None:
    """host:port of our end: asyncio transports name it `sockname`, httpcore's streams `client_addr`."""
    try:
        address = transport.get_extra_info("sockname") or transport.get_extra_info("client_addr")
        host, port = address[:2]
        return f"{host}:{port}"
    except Exception:  # an exotic transport without socket info: keep going without it
        return None


def progress(state: RoundState, now: float, emit, events: int, chars: int, done: bool) -> None:
    """Stamp one read that carried `events` SSE events (the SDK clients: one chunk) and record it."""
    gap = now - state.last_progress
    if gap > state.max_gap:
        state.max_gap = gap
    state.last_progress = now
    state.events += events
    if done:
        state.phase = "after-last-event"
    if chars and state.first_token is None:
        state.first_token = now
    emit(ev.SSEReceived(t=now, conv=state.conv, round=state.round, seq=state.events, chars=chars, done=done,
                        events=events))
