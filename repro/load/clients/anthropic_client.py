"""The official anthropic SDK as the client (`--client anthropic-async`, `--api messages`):
`AsyncAnthropic`, one SDK client per conversation as each agent of a harness owns one, iterating
the SDK's own stream of Messages events, as a Python harness on the Messages API does.

The SDK runs on httpx2 (as the openai SDK 3.x does), so the same transport wrapper stamps every
byte and reads the connection from httpcore's trace hook (repro/load/clients/httpx_tap.py). The
SDK swallows `ping` events (its _streaming.py skips them): their bytes are stamped by the wrapper
as a trickle, never as progress. Each event the SDK hands over is read by the same pure reader as
the byte-reading clients (repro/core/messages_events.py), from the event's own JSON.

Timeouts: repro's (connect only, no retries: a stall is seen as it is), or with --client-timeouts
native the SDK's own (600 s, 2 retries; its retries are not logged as the openai client's are).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anthropic
import httpx2
from anthropic._constants import DEFAULT_CONNECTION_LIMITS

from repro.core import events as ev
from repro.core.error_shapes import error_answer
from repro.core.sse import SSEEvent
from repro.core.text import without_secret
from repro.load.clients.base import ENDED_EARLY, RoundHooks, headers_arrived, not_an_event_stream, tls_context
from repro.load.clients.httpx_client import httpx_error
from repro.load.clients.httpx_tap import Tap, tapped_transport
from repro.load.round import RoundFailureSeen, RoundState

if TYPE_CHECKING:
    from repro.core.messages_events import MessagesReader

LIBRARY = "anthropic SDK"


class AnthropicFamily:
    def __init__(self, hooks: RoundHooks) -> None:
        self.hooks = hooks
        self.tls = tls_context(hooks.url, hooks.options.trust)

    def conversation(self, conv: int) -> AnthropicConversation:
        return AnthropicConversation(self.hooks, self.tls)

    async def aclose(self) -> None:
        pass


class AnthropicConversation:
    def __init__(self, hooks: RoundHooks, tls: Any) -> None:
        c = hooks.options
        self.hooks = hooks
        self.tap = Tap(hooks.connected, hooks.now)
        inner = httpx2.AsyncHTTPTransport(limits=DEFAULT_CONNECTION_LIMITS, verify=tls, trust_env=False)
        transport = tapped_transport(httpx2, inner, self.tap, stamp_bytes=True, sync=False)
        http_client = anthropic.DefaultAsyncHttpxClient(transport=transport, trust_env=False)
        options: dict[str, Any] = {} if c.client_timeouts == "native" else {
            "timeout": httpx2.Timeout(None, connect=c.connect_timeout, pool=None), "max_retries": 0}
        self.client = anthropic.AsyncAnthropic(base_url=hooks.url.removesuffix("/v1/messages"),
                                               api_key=c.api_key or "none", http_client=http_client, **options)
        self.timeout = self.client.timeout if isinstance(self.client.timeout, httpx2.Timeout) else httpx2.Timeout(
            self.client.timeout)

    async def aclose(self) -> None:
        await self.client.close()

    async def stream(self, body: dict[str, Any], state: RoundState, reader: MessagesReader) -> RoundFailureSeen | None:
        tap = self.tap
        tap.round, tap.saw_done, tap.attempts, tap.abandoned = state, False, 0, False
        hooks = self.hooks
        try:
            stream = await self.client.messages.create(**body)
            headers_arrived(state, stream.response.status_code, hooks.now(), hooks.emit)
            not_sse = not_an_event_stream(stream.response.status_code, stream.response.headers.get("Content-Type", ""))
            if not_sse is not None:
                await stream.close()
                return not_sse
            async for event in stream:
                if (failure := self._event(state, reader, event)) is not None:
                    await stream.close()
                    return RoundFailureSeen("mid-stream", failure, 200, "stream")
            return None if reader.done else ENDED_EARLY["messages"]
        except anthropic.APIStatusError as exc:
            if exc.status_code == 200:  # an `error` event: the SDK raises it with the stream's own 200
                return RoundFailureSeen(state.phase, f"error event in stream: {str(exc)[:200]}", 200, "stream")
            return self._status_error(exc, state)
        except (anthropic.APITimeoutError, anthropic.APIConnectionError) as exc:
            cause = exc.__cause__
            if isinstance(cause, httpx2.TransportError):
                return httpx_error(cause, state.phase, self.timeout, LIBRARY)
            return RoundFailureSeen(state.phase, f"{type(exc).__name__}: {str(exc)[:200]}", None, "reset")
        except httpx2.TransportError as exc:  # raised raw from a stream's iteration
            return httpx_error(exc, state.phase, self.timeout, LIBRARY)
        except anthropic.APIError as exc:  # an error event inside the stream
            return RoundFailureSeen(state.phase, f"error event in stream: {str(exc)[:200]}", 200, "stream")
        finally:
            tap.round = None

    def _event(self, state: RoundState, reader: MessagesReader, event: Any) -> str | None:
        """One event the SDK handed over, read from its own JSON by the Messages reader."""
        chars, done, failure = reader.feed([SSEEvent(event.to_json(indent=None).encode())])
        now = self.hooks.now()
        state.progressed(now, reader.events, chars, done)
        self.hooks.emit(ev.SSEReceived(t=now, conv=state.conv, round=state.round, seq=reader.events, chars=chars,
                                       done=done, events=1))
        return failure

    def _status_error(self, exc: anthropic.APIStatusError, state: RoundState) -> RoundFailureSeen:
        state.answered_by(exc.response.headers.get("Server"), exc.response.headers.get("Via"))
        secret = self.hooks.options.api_key
        text = without_secret(str(exc.message).replace("\n", " "), secret)[:300]
        try:
            body = exc.response.content
        except httpx2.ResponseNotRead:
            body = b""
        answer = error_answer(body, exc.response.headers, secret)
        return RoundFailureSeen("before-first-byte", f"HTTP {exc.status_code}: {text}", exc.status_code, "http", answer)
