"""The httpx client: httpx.AsyncClient with httpx's own pool and keep-alive (one client per
conversation, as each agent owns its client), streaming with `aiter_bytes`.

Timeouts: repro's (connect only; the watchdog is the read backstop), or with --client-timeouts
native httpx's own default, Timeout(5.0): 5 s to connect, 5 s per read, 5 s per write, 5 s for
a pooled connection. Costs about twice aiohttp's CPU per SSE event (benchmarks/clients.py).
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Any

import httpx

from repro.core.kinds import Phase
from repro.io.tls import rejection
from repro.load.clients.base import (
    ENDED_EARLY,
    RoundHooks,
    json_encode,
    opening,
    read_step,
    request_headers,
    tls_context,
)
from repro.load.clients.httpx_tap import Tap, tapped_transport
from repro.load.round import RoundFailureSeen, RoundState

if TYPE_CHECKING:
    from repro.core.openai_chunks import ChunkReader


class HttpxFamily:
    def __init__(self, hooks: RoundHooks) -> None:
        self.hooks = hooks
        self.tls = tls_context(hooks.url, hooks.options.trust)

    def conversation(self, conv: int) -> HttpxConversation:
        return HttpxConversation(self.hooks, self.tls)

    async def aclose(self) -> None:
        pass


class HttpxConversation:
    def __init__(self, hooks: RoundHooks, tls: ssl.SSLContext) -> None:
        c = hooks.options
        self.hooks = hooks
        self.tap = Tap(hooks.connected, hooks.now)
        # httpx's own transport and pool (its default Limits), only wrapped to read its trace hook.
        inner = httpx.AsyncHTTPTransport(verify=tls, trust_env=False)
        options: dict[str, Any] = {} if c.client_timeouts == "native" else {
            "timeout": httpx.Timeout(None, connect=c.connect_timeout)}
        self.client = httpx.AsyncClient(transport=tapped_transport(httpx, inner, self.tap, stamp_bytes=False, sync=False),
                                        headers=request_headers(c), trust_env=False, **options)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def stream(self, body: dict[str, Any], state: RoundState, reader: ChunkReader) -> RoundFailureSeen | None:
        self.tap.round = state
        try:
            return await self._stream(body, state, reader)
        except httpx.TransportError as exc:
            return httpx_error(exc, state.phase, self.client.timeout, "httpx")
        finally:
            self.tap.round = None

    async def _stream(self, body: dict[str, Any], state: RoundState, reader: ChunkReader) -> RoundFailureSeen | None:
        hooks = self.hooks
        async with self.client.stream("POST", hooks.url, content=json_encode(body)) as response:
            ended = await opening(state, hooks, response.status_code, response.headers, response.aiter_bytes)
            if ended is not None:
                return ended
            step = read_step(state, reader, hooks)
            async for part in response.aiter_bytes():
                if (failure := step(part)) is not None:
                    return RoundFailureSeen("mid-stream", failure, 200, "stream")
            return None if reader.done else ENDED_EARLY[hooks.options.api]


def httpx_error(exc: BaseException, phase: Phase, timeout: Any, library: str) -> RoundFailureSeen:
    """An httpx or httpx2 transport error as a RoundFailureSeen (both forks share the class names).
    `timeout` is the client's httpx Timeout: a timeout names the library's own limit."""
    name = type(exc).__name__
    detail = str(exc).replace("\n", " ")[:200]
    if name == "ConnectTimeout":
        return RoundFailureSeen(phase, f"ConnectTimeout: no connection within {timeout.connect:g} s ({library})", None,
                          "connect-timeout")
    if name == "ReadTimeout":
        return RoundFailureSeen(phase, f"ReadTimeout: no byte for {timeout.read:g} s ({library}'s per-read timeout)", None,
                          "timeout")
    if name in ("WriteTimeout", "PoolTimeout"):
        limit = timeout.write if name == "WriteTimeout" else timeout.pool
        return RoundFailureSeen(phase, f"{name}: {limit:g} s passed ({library})", None, "timeout")
    if name == "ConnectError":
        if (tls := rejection(exc)) is not None:  # our client refused the certificate: no request went out
            return RoundFailureSeen(phase, f"ConnectError: {tls.text}", None, "tls")
        return RoundFailureSeen(phase, f"ConnectError: {detail}", None, "connect")
    if name == "RemoteProtocolError":
        if phase == "before-first-byte":
            return RoundFailureSeen(phase, "RemoteProtocolError: server disconnected without sending a response", None,
                              "early-close")
        return RoundFailureSeen(phase, f"RemoteProtocolError: {detail}", None, "truncated")
    return RoundFailureSeen(phase, f"{name}: {detail}" if detail else name, None, "reset")
