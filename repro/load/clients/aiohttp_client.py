"""The aiohttp client (the default): the fastest of the clients (C HTTP parser, see repro/load/clients/aiohttp_transport.py).

Connections, as --connections says:
- per-conversation: each conversation owns a session whose pool holds one keep-alive connection,
  the way each agent of a harness owns its SDK client; its rounds reuse it, nothing is shared.
- pool=N: one pool of N connections shared by every conversation, as a harness whose agents share
  one client; a round may get a connection another conversation used.
- fresh: a new connection for every round (closed after its response), as a client without keep-alive.

Timeouts: repro's (connect only; the watchdog is the read backstop), or with --client-timeouts
native aiohttp's own ClientTimeout() (total 300 s, sock_connect 30 s in aiohttp 3.14).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import aiohttp
from yarl import URL

from repro.load.clients.aiohttp_transport import (
    TrackingConnector,
    current_round,
    transport_error,
    transport_failure,
)
from repro.load.clients.base import (
    ENDED_EARLY,
    RoundHooks,
    json_encode,
    opening,
    read_step,
    request_headers,
    tls_context,
)
from repro.load.connection_policy import parse_connections
from repro.load.round import RoundFailureSeen, RoundState

if TYPE_CHECKING:
    from repro.core.openai_chunks import ChunkReader


class AiohttpFamily:
    def __init__(self, hooks: RoundHooks) -> None:
        c = hooks.options
        self.hooks = hooks
        # Parsed once: aiohttp would parse a string URL again for every round.
        url = URL(hooks.url)
        if c.api_key and (url.user or url.password):
            # Our key wins; aiohttp refuses an Authorization header next to URL credentials.
            url = url.with_user(None)
        self.url = url
        self.headers = request_headers(c)
        self.ended_early = ENDED_EARLY[c.api]
        # The SSE bytes go to our decoder as they arrived; no server should compress them.
        self.headers["Accept-Encoding"] = "identity"
        # One TLS context for every session: building one per session costs milliseconds each.
        self.ssl = tls_context(hooks.url, hooks.options.trust)
        self.policy, self.pool_size = parse_connections(c.connections)
        if c.client_timeouts == "native":
            self.timeout = aiohttp.ClientTimeout()  # aiohttp's own default: total 300 s, sock_connect 30 s
        else:
            # No read timeout: the watchdog enforces a read backstop instead (sock_read re-arms a timer
            # on every chunk, ~6% of the driver's CPU at 256 streams, for a deadline that never fires
            # first). No total timeout either: it would end a slow but live stream, or fire before the watchdog.
            # ClientTimeout.connect includes the wait for a free slot of the pool: with a shared pool
            # that wait is our own queue, not the server's, so only the TCP connect is bounded there
            # (the round deadline still bounds the wait for a slot).
            connect = None if self.policy == "pool" else c.connect_timeout
            self.timeout = aiohttp.ClientTimeout(total=None, connect=connect, sock_connect=c.connect_timeout)
        self.cookies = aiohttp.DummyCookieJar()  # a load generator keeps no cookies between rounds
        self.shared: aiohttp.ClientSession | None = None
        if self.policy == "pool":
            self.shared = self._session(TrackingConnector(hooks.connected, limit=self.pool_size,
                                                          keepalive_timeout=c.keepalive_expiry, ssl=self.ssl))

    def _session(self, connector: TrackingConnector) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=connector,
            timeout=self.timeout,
            headers=self.headers,
            cookie_jar=self.cookies,
            trust_env=False,  # no proxy or netrc from the environment: we talk to the target given
            auto_decompress=False,
        )

    def conversation(self, conv: int) -> AiohttpConversation:
        if self.shared is not None:
            return AiohttpConversation(self, self.shared, owned=False)
        options: dict[str, Any] = ({"force_close": True} if self.policy == "fresh"
                                   else {"keepalive_timeout": self.hooks.options.keepalive_expiry})
        connector = TrackingConnector(self.hooks.connected, limit=1, ssl=self.ssl, **options)
        return AiohttpConversation(self, self._session(connector), owned=True)

    async def aclose(self) -> None:
        if self.shared is not None:
            await self.shared.close()


class AiohttpConversation:
    __slots__ = ("family", "session", "owned")

    def __init__(self, family: AiohttpFamily, session: aiohttp.ClientSession, *, owned: bool) -> None:
        self.family = family
        self.session = session
        self.owned = owned

    async def aclose(self) -> None:
        if self.owned:
            await self.session.close()

    async def stream(self, body: dict[str, Any], state: RoundState, reader: ChunkReader) -> RoundFailureSeen | None:
        """Send one round and read its stream. One coroutine, not a wrapper around another: every
        chunk's wake-up passes through each frame of the await chain."""
        token = current_round.set(state)
        try:
            hooks = self.family.hooks
            # Leaving the block releases the connection: kept alive after a whole response, closed
            # after a partial one (a stall cancelled, an error), so a cancelled round leaks nothing.
            async with self.session.post(self.family.url, data=json_encode(body), allow_redirects=False) as response:
                ended = await opening(state, hooks, response.status, response.headers, response.content.iter_any)
                if ended is not None:
                    return ended
                step = read_step(state, reader, hooks)
                # readany() directly, not iter_any(): one coroutine frame less per chunk. It returns
                # whatever bytes arrived (b"" at the end), which the SSE decoder reassembles.
                readany = response.content.readany
                while chunk := await readany():
                    if (failure := step(chunk)) is not None:
                        return RoundFailureSeen("mid-stream", failure, 200, "stream")
                return None if reader.done else self.family.ended_early
        except aiohttp.ConnectionTimeoutError:
            limit = self.session.timeout.sock_connect
            return RoundFailureSeen(state.phase, f"ConnectTimeout: no connection within {limit:g} s", None, "connect-timeout")
        except aiohttp.ServerTimeoutError as exc:
            return RoundFailureSeen(state.phase, f"ReadTimeout: {exc}", None, "timeout")
        except (aiohttp.ClientError, OSError) as exc:
            total = self.session.timeout.total
            if type(exc) is TimeoutError and exc.errno is None and total:  # aiohttp's total timeout (native only)
                return RoundFailureSeen(state.phase, f"aiohttp total timeout of {total:g} s passed (ClientTimeout.total, "
                                  "aiohttp's default)", None, "timeout")
            return RoundFailureSeen(state.phase, transport_error(exc, state.phase), None, transport_failure(exc))
        finally:
            current_round.reset(token)
