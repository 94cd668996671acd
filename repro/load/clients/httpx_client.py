"""The httpx client: httpx.AsyncClient with httpx's own pool and keep-alive (one client per
conversation, as each agent owns its client), streaming with `aiter_bytes`.

Timeouts: repro's (connect only; the watchdog is the read backstop), or with --client-timeouts
native httpx's own default, Timeout(5.0): 5 s to connect, 5 s per read, 5 s per write, 5 s for
a pooled connection. Costs about twice aiohttp's CPU per SSE event (benchmarks/clients.py).
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Any

import anyio
import httpx

from repro.core import events as ev
from repro.core.sse import SSEDecoder
from repro.core.text import without_secret
from repro.load.clients.base import RoundError, json_encode, tls_context
from repro.load.clients.httpx_tap import Tap, tapped_transport

if TYPE_CHECKING:
    from repro.core.openai_chunks import ChunkReader
    from repro.load.driver import Driver, RoundState

class HttpxFamily:
    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.tls = tls_context(driver.url, httpx.create_ssl_context)

    def conversation(self, conv: int) -> HttpxConversation:
        return HttpxConversation(self.driver, self.tls)

    async def aclose(self) -> None:
        pass


class HttpxConversation:
    def __init__(self, driver: Driver, tls: ssl.SSLContext) -> None:
        c = driver.config
        self.driver = driver
        self.tap = Tap(driver._connected, driver.now)
        headers = {"Content-Type": "application/json"}
        if c.api_key:
            headers["Authorization"] = f"Bearer {c.api_key}"
        # httpx's own transport and pool (its default Limits), only wrapped to read its trace hook.
        inner = httpx.AsyncHTTPTransport(verify=tls, trust_env=False)
        options: dict[str, Any] = {} if c.client_timeouts == "native" else {
            "timeout": httpx.Timeout(None, connect=c.connect_timeout)}
        self.client = httpx.AsyncClient(transport=tapped_transport(httpx, inner, self.tap, stamp_bytes=False, sync=False),
                                        headers=headers, trust_env=False, **options)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def stream(self, body: dict[str, Any], state: RoundState, reader: ChunkReader) -> RoundError | None:
        self.tap.round = state
        try:
            return await self._stream(body, state, reader)
        except httpx.TransportError as exc:
            return httpx_error(exc, state.phase, self.client.timeout, "httpx")
        finally:
            self.tap.round = None

    async def _stream(self, body: dict[str, Any], state: RoundState, reader: ChunkReader) -> RoundError | None:
        driver = self.driver
        conv, round_index = state.conv, state.round
        async with self.client.stream("POST", driver.url, content=json_encode(body)) as response:
            now = driver.now()
            state.first_byte = state.last_byte = state.last_progress = now
            state.client_wait = None  # headers arrived: whatever the client waited for is over
            state.phase = "mid-stream"
            status = response.status_code
            driver.emit(ev.FirstByte(t=now, conv=conv, round=round_index, status=status))
            if status != 200:
                state.server, state.via = response.headers.get("Server"), response.headers.get("Via")
                return ("before-first-byte", await _error_text(response, driver.config.api_key), status, "http")
            content_type = response.headers.get("Content-Type", "")
            if "text/event-stream" not in content_type:
                return ("mid-stream", f"status 200 but content-type {content_type or 'missing'!r}, not an SSE stream: "
                        "is the target an OpenAI-compatible base URL?", 200, "stream")
            decoder = SSEDecoder()
            emit, now_of, feed = driver.emit, driver.now, reader.feed
            async for part in response.aiter_bytes():
                now = now_of()
                state.last_byte = now
                events = decoder.feed(part)
                if not events:
                    state.trickle(now)
                    continue
                before = state.events
                chars, done_here, failure = feed(events)
                gap = now - state.last_progress
                if gap > state.max_gap:
                    state.max_gap = gap
                state.last_progress = now
                state.events = reader.events
                if done_here:
                    state.phase = "after-last-event"
                if chars and state.first_token is None:
                    state.first_token = now
                emit(ev.SSEReceived(t=now, conv=conv, round=round_index, seq=reader.events, chars=chars,
                                    done=done_here, events=reader.events - before))
                if failure is not None:
                    return ("mid-stream", failure, 200, "stream")
            if not reader.done:
                return ("mid-stream", "stream ended without data: [DONE]", 200, "truncated")
            return None


async def _error_text(response: Any, secret: str | None, limit: int = 2048) -> str:
    body = b""
    with anyio.move_on_after(2.0):
        try:
            async for part in response.aiter_bytes():
                body += part
                if len(body) >= limit:
                    break
        except Exception:  # the status says enough; keep what of the body arrived
            pass
    text = without_secret(body[:limit].decode("utf-8", "replace").strip().replace("\n", " "), secret)
    if "<html" in text.lower():
        text = "HTML page (" + text[:120] + "...)"
    return f"HTTP {response.status_code}: {text[:300]}" if text else f"HTTP {response.status_code}"


def httpx_error(exc: BaseException, phase: str, timeout: Any, library: str) -> RoundError:
    """An httpx or httpx2 transport error as a RoundError (both forks share the class names).
    `timeout` is the client's httpx Timeout: a timeout names the library's own limit."""
    name = type(exc).__name__
    detail = str(exc).replace("\n", " ")[:200]
    if name == "ConnectTimeout":
        return (phase, f"ConnectTimeout: no connection within {timeout.connect:g} s ({library})", None, "connect-timeout")
    if name == "ReadTimeout":
        return (phase, f"ReadTimeout: no byte for {timeout.read:g} s ({library}'s per-read timeout)", None, "timeout")
    if name in ("WriteTimeout", "PoolTimeout"):
        limit = timeout.write if name == "WriteTimeout" else timeout.pool
        return (phase, f"{name}: {limit:g} s passed ({library})", None, "timeout")
    if name == "ConnectError":
        return (phase, f"ConnectError: {detail}", None, "connect")
    if name == "RemoteProtocolError":
        if phase == "before-first-byte":
            return (phase, "RemoteProtocolError: server disconnected without sending a response", None, "early-close")
        return (phase, f"RemoteProtocolError: {detail}", None, "truncated")
    return (phase, f"{name}: {detail}" if detail else name, None, "reset")
