"""What the driver asks of a client, and what it gives one.

Asked: per conversation, stream one round at a time, then close. A round's `stream` moves the
round's RoundState (repro/load/round.py) through the same transitions whatever the library
(headers, each read, the connection it got from the library's own hooks through
`hooks.connected`), emits FirstByte and SSEReceived, and returns None when the stream ended with
`[DONE]`, else a RoundFailureSeen; cancellation (the round deadline, the watchdog) is the driver's and
passes through.

Given: RoundHooks, the little of the driver a client needs (the URL, its options, the run's
clock, emit, the connection hook, the read backstop), never the driver itself.

Shared by the clients: the opening and the read step of the byte-reading ones (aiohttp, httpx),
the answers that are no stream, the TLS context and a connection's local address.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import msgspec

from repro.core import events as ev
from repro.core.error_shapes import ErrorAnswer, error_answer
from repro.core.sse import SSEDecoder
from repro.core.text import ERROR_BODY_LIMIT, http_error_text
from repro.core.wire_api import WIRE_APIS, Api
from repro.io.tls import Trust, client_context
from repro.load.round import RoundFailureSeen, RoundState, TrackedConnection

if TYPE_CHECKING:
    from repro.core.openai_chunks import ChunkReader

Emit = Callable[[ev.Event], None]

# msgspec encodes a round's growing history several times faster than json.dumps.
json_encode = msgspec.json.Encoder().encode

# What each API's stream ends with; a body that ends before it was cut short.
ENDED_EARLY: dict[Api, RoundFailureSeen] = {
    api: RoundFailureSeen("mid-stream", f"stream ended without {wire.terminal}", 200, "truncated")
    for api, wire in WIRE_APIS.items()}
ENDED_WITHOUT_DONE = ENDED_EARLY["chat"]


@dataclass(frozen=True)
class ClientOptions:
    """What of the run's settings (repro.load.driver.DriverConfig) a client uses."""

    client: str  # aiohttp | httpx | openai | openai-async
    api_key: str | None = field(repr=False)
    connect_timeout: float
    keepalive_expiry: float
    connections: str  # per-conversation | pool=N | fresh: the aiohttp client only
    client_timeouts: str  # repro | native
    conversations: int  # the sync SDK runs a thread per conversation in flight
    trust: Trust = Trust()  # which certificates an https target may present (repro/io/tls.py)
    api: Api = "chat"  # the wire API the run speaks (repro/core/wire_api.py): path, headers, stream


@dataclass(frozen=True, eq=False)
class RoundHooks:
    """The driver as its clients see it."""

    url: str  # the endpoint of the run's wire API
    options: ClientOptions
    origin: float  # the run's clock: time.monotonic() - origin
    emit: Emit
    # The round got its connection (reused or new), from the library's own hooks; on the loop's thread.
    connected: Callable[[RoundState, TrackedConnection, bool], None]
    # No byte for this long ends a round (the watchdog's): a client that must have a read timeout
    # (a thread nothing can cancel) takes this one.
    read_backstop: float

    def now(self) -> float:
        return time.monotonic() - self.origin


class ConversationClient(Protocol):
    async def stream(self, body: dict[str, Any], state: RoundState, reader: ChunkReader) -> RoundFailureSeen | None: ...

    async def aclose(self) -> None: ...


class ClientFamily(Protocol):
    """The client of a whole run: hands out one ConversationClient per conversation (which may
    share a pool) and closes what is shared at the end."""

    def conversation(self, conv: int) -> ConversationClient: ...

    async def aclose(self) -> None: ...


def request_headers(options: ClientOptions) -> dict[str, str]:
    """The headers every round of a byte-reading client sends: the API's own auth (a bearer token,
    or Anthropic's x-api-key and version), and a JSON body."""
    return {**WIRE_APIS[options.api].headers(options.api_key), "Content-Type": "application/json"}


def headers_arrived(state: RoundState, status: int, now: float, emit: Emit) -> None:
    state.headers(now)
    emit(ev.FirstByte(t=now, conv=state.conv, round=state.round, status=status))


def not_an_event_stream(status: int, content_type: str) -> RoundFailureSeen | None:
    """A 2xx answer that is no event stream (an HTML page, a JSON reply), said alike by every client."""
    if "text/event-stream" in content_type:
        return None
    return RoundFailureSeen("mid-stream", f"status {status} but content-type {content_type or 'missing'!r}, not an SSE "
                      "stream: is the target an OpenAI-compatible base URL?", status, "stream")


async def opening(state: RoundState, hooks: RoundHooks, status: int, headers: Mapping[str, str],
                  body: Callable[[], AsyncIterator[bytes]]) -> RoundFailureSeen | None:
    """What a byte-reading client (aiohttp, httpx) does once an answer's headers are in, whatever
    the library: stamp them (ev.FirstByte), and end the round before its first byte on a non-200
    status (who answered it, its words and its body's shape) or on a 2xx that is no event stream.
    None: the stream is there to read. `headers` is the library's own case-insensitive mapping;
    `body` gives the answer's body, chunk by chunk, read here only for a non-200."""
    headers_arrived(state, status, hooks.now(), hooks.emit)
    if status != 200:
        state.answered_by(headers.get("Server"), headers.get("Via"))
        message, answer = await error_words(status, headers, body(), hooks.options.api_key)
        return RoundFailureSeen("before-first-byte", message, status, "http", answer)
    return not_an_event_stream(status, headers.get("Content-Type", ""))


# How long a refused round's body is waited for: the status alone already says what happened.
ERROR_BODY_WAIT_S = 2.0


async def error_words(status: int, headers: Mapping[str, str], chunks: AsyncIterator[bytes],
                      secret: str | None) -> tuple[str, ErrorAnswer]:
    """A non-200 answer as repro.core.text.http_error_text says it, and as kept for judging who
    wrote it (repro.core.error_shapes), from its body read bounded in bytes and in time."""
    body = b""
    with anyio.move_on_after(ERROR_BODY_WAIT_S):
        try:
            async for part in chunks:
                body += part
                if len(body) >= ERROR_BODY_LIMIT:
                    break
        except Exception:  # the connection broke mid-body: the status says enough; keep what arrived
            pass
    return (http_error_text(status, body, headers.get("Retry-After"), secret),
            error_answer(body, headers, secret))


def read_step(state: RoundState, reader: ChunkReader, hooks: RoundHooks) -> Callable[[bytes], str | None]:
    """One read of a byte-reading client's stream (aiohttp, httpx), made once per round: stamp the
    read, feed the SSE decoder and the chunk reader, record the read (one ev.SSEReceived, the failing
    event included: it arrived). Returns why the stream is malformed, or None. A closure: every name
    the per-read path uses is a cell, no attribute lookup, no allocation beyond the event."""
    decode = SSEDecoder().feed
    feed = reader.feed
    emit, monotonic, origin, event_type = hooks.emit, time.monotonic, hooks.origin, ev.SSEReceived
    trickle, received = state.trickle, state.received
    conv, round_index = state.conv, state.round

    def step(chunk: bytes) -> str | None:
        now = monotonic() - origin
        events = decode(chunk)
        if not events:
            # A partial event or a keep-alive comment: bytes, but no progress. Counted so that a
            # stall can tell how often the trickle resets a read timeout.
            trickle(now)
            return None
        first_seq = reader.events
        chars, done, failure = feed(events)
        seq = reader.events
        if seq == first_seq and failure is None:
            # Only keep-alive events (the Messages API's ping): bytes, no progress.
            trickle(now)
            return None
        received(now, seq, chars, done)
        emit(event_type(t=now, conv=conv, round=round_index, seq=seq, chars=chars, done=done, events=seq - first_seq))
        return failure

    return step


def tls_context(url: str, trust: Trust) -> ssl.SSLContext:
    """One TLS context for a run's clients, whatever the library: the run's trust for https (the
    one builder of repro/io/tls.py, built once: httpx builds one per client, ~40 ms each, which
    stalls the loop for a run of many conversations), an empty one for plain http, which never
    uses it (loading the CA store for nothing would cost as much)."""
    return client_context(trust) if url.startswith("https:") else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def local_address(transport: Any) -> str | None:
    """host:port of our end: asyncio transports name it `sockname`, httpcore's streams `client_addr`."""
    try:
        address = transport.get_extra_info("sockname") or transport.get_extra_info("client_addr")
        host, port = address[:2]
        return f"{host}:{port}"
    except Exception:  # an exotic transport without socket info: keep going without it
        return None
