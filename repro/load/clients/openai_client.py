"""The official openai SDK as the client: `AsyncOpenAI` (openai-async) or `OpenAI` (openai, each
round in a worker thread), one SDK client per conversation as each agent of a harness owns one,
iterating the SDK's own stream objects (what a harness does): one chunk is one SSE event of
progress, while a transport wrapper stamps every byte and reads the connection from httpcore's
trace hook (repro/load/clients/httpx_tap.py).

The SDK client is built the way the SDK builds its default: DefaultHttpxClient /
DefaultAsyncHttpxClient (openai 3.x: on httpx2) over the SDK's own connection limits
(DEFAULT_CONNECTION_LIMITS), with our wrapper around that transport. What the SDK does with it
is its own: the async client drains a finished stream and keeps its connection alive; the sync
client closes the response at `data: [DONE]` without reading the body's end, so httpcore drops
the connection and every streamed round opens a new one.

Timeouts: repro's (connect only, no retries: a stall is seen as it is; the sync client also a
read/write timeout equal to the driver's read backstop, so that a worker thread, which nothing
can cancel, always ends in bounded time), or with
--client-timeouts native the SDK's own: 600 s per read, 5 s to connect, 2 retries before headers.
Each retry is logged (ev.ClientRetry), and its back-off held as the client's own wait
(RoundState.client_waiting): no hop is silent while the SDK sleeps before trying again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
import openai
from openai._constants import DEFAULT_CONNECTION_LIMITS

from repro.core import events as ev
from repro.core.error_shapes import error_answer
from repro.core.text import without_secret
from repro.load.clients.base import (
    ENDED_WITHOUT_DONE,
    RoundHooks,
    headers_arrived,
    not_an_event_stream,
    tls_context,
)
from repro.load.clients.httpx_client import httpx_error
from repro.load.clients.httpx_tap import Abandoned, Tap, tapped_transport
from repro.load.round import RoundFailureSeen, RoundState, TrackedConnection

if TYPE_CHECKING:
    from repro.core.openai_chunks import ChunkReader

LIBRARY = "openai SDK"
ABANDON_WAIT_S = 1.5  # how long an abandoned round waits for its worker thread to return
# What a malformed SSE event raises out of the SDK's iteration (bad JSON) or out of reading its
# chunk (a payload of the wrong shape: the SDK does not validate it).
MALFORMED = (ValueError, AttributeError, TypeError)


class OpenAIFamily:
    def __init__(self, hooks: RoundHooks, *, sync: bool) -> None:
        self.hooks = hooks
        self.sync = sync
        self.loop = asyncio.get_running_loop()
        # Sized to the conversations: one thread per conversation in flight, never anyio's 40.
        self.limiter = anyio.CapacityLimiter(max(1, hooks.options.conversations)) if sync else None
        self.tls = tls_context(hooks.url, hooks.options.trust)

    def conversation(self, conv: int) -> OpenAIConversation:
        return OpenAIConversation(self)

    async def aclose(self) -> None:
        pass


class OpenAIConversation:
    # What a subclass changes to drive another call of the SDK, or another Stainless-generated SDK
    # (anthropic's has the same client, stream, retry and error classes): the module, its client
    # classes, the path its base URL ends before, the placeholder key.
    SDK: Any = openai
    CLIENTS: tuple[type, type] = (openai.OpenAI, openai.AsyncOpenAI)  # (sync, async)
    BASE_ERROR: type[Exception] = openai.OpenAIError
    PATH = "/chat/completions"
    LIBRARY = LIBRARY
    NO_KEY = "EMPTY"  # the SDK insists on a key; a local engine ignores it (vLLM's docs use "EMPTY")

    def __init__(self, family: OpenAIFamily) -> None:
        hooks = family.hooks
        c = hooks.options
        self.family = family
        self.hooks = hooks
        if family.sync:
            # The worker thread's hooks hop to the event loop's thread: events are emitted there only.
            self.emit = lambda event: family.loop.call_soon_threadsafe(hooks.emit, event)
            connected = lambda *args: family.loop.call_soon_threadsafe(hooks.connected, *args)  # noqa: E731
        else:
            self.emit = hooks.emit
            connected = hooks.connected
        self.connected = connected
        self.tap = Tap(connected, hooks.now)
        # Sync: a Tap per round, found by the worker thread running it; a thread left behind by an
        # abandoned round keeps its own (abandoned) tap, so its retry is refused and its bytes and
        # connection are never credited to the conversation's next round.
        self._thread = threading.local()
        inner_class = httpx2.HTTPTransport if family.sync else httpx2.AsyncHTTPTransport
        inner = inner_class(limits=DEFAULT_CONNECTION_LIMITS, verify=family.tls, trust_env=False)
        transport = tapped_transport(httpx2, inner, self.tap, stamp_bytes=True, sync=family.sync,
                                     tap_of=(lambda: self._thread.tap) if family.sync else None)
        http_client_class = self.SDK.DefaultHttpxClient if family.sync else self.SDK.DefaultAsyncHttpxClient
        http_client = http_client_class(transport=transport, trust_env=False)
        # The sync client's read/write timeout is the driver's read backstop: the watchdog ends the
        # round then anyway, and the thread must end too (it is no daemon: it would block the exit).
        read = hooks.read_backstop if family.sync else None
        options: dict[str, Any] = {} if c.client_timeouts == "native" else {
            "timeout": httpx2.Timeout(read, connect=c.connect_timeout, pool=None), "max_retries": 0}
        client_class = _observing_retries(self.CLIENTS[0] if family.sync else self.CLIENTS[1], self._retrying,
                                          sync=family.sync)
        self.client = client_class(base_url=hooks.url.removesuffix(self.PATH), api_key=c.api_key or self.NO_KEY,
                                   http_client=http_client, **options)
        self.timeout = self.client.timeout if isinstance(self.client.timeout, httpx2.Timeout) else httpx2.Timeout(
            self.client.timeout)

    async def aclose(self) -> None:
        if self.family.sync:
            self.client.close()
        else:
            await self.client.close()

    async def stream(self, body: dict[str, Any], state: RoundState, reader: ChunkReader) -> RoundFailureSeen | None:
        if self.family.sync:
            previous, self.tap = self.tap, Tap(self.connected, self.hooks.now)
            if not previous.abandoned:
                # A reused connection is the one the last round used (the only one idle in the
                # conversation's pool): without it a reused round would go unreported.
                self.tap.current = previous.current
        tap = self.tap
        tap.round, tap.saw_done, tap.attempts, tap.abandoned = state, False, 0, False
        try:
            if not self.family.sync:
                try:
                    stream = await self._create(body)
                    self._headers_arrived(state, stream)
                    if (not_sse := _not_sse(stream)) is not None:
                        await stream.close()
                        return not_sse
                    try:
                        async for chunk in stream:
                            self._chunk(state, reader, chunk)
                    except MALFORMED as exc:
                        await stream.close()
                        return self._malformed(exc, state, reader)
                except self.BASE_ERROR as exc:
                    return self._error(exc, state, tap)
                except httpx2.TransportError as exc:  # raised raw from a stream's iteration by some SDK versions
                    return httpx_error(exc, state.phase, self.timeout, self.LIBRARY)
                return self._ended(state, reader, tap)
            return await self._in_thread(body, state, reader, tap)
        finally:
            tap.round = None

    async def _in_thread(self, body: dict[str, Any], state: RoundState, reader: ChunkReader,
                         tap: Tap) -> RoundFailureSeen | None:
        finished = threading.Event()

        def round_in_thread() -> RoundFailureSeen | None:
            self._thread.tap = tap
            try:
                stream = self._create(body)
                if tap.abandoned:
                    stream.close()  # else its connection stays open until the client closes
                    raise Abandoned
                self._headers_arrived(state, stream)
                if (not_sse := _not_sse(stream)) is not None:
                    stream.close()
                    return not_sse
                try:
                    for chunk in stream:
                        if tap.abandoned:  # nothing of an abandoned round is recorded after its end
                            stream.close()
                            raise Abandoned
                        self._chunk(state, reader, chunk)
                except MALFORMED as exc:
                    stream.close()
                    return self._malformed(exc, state, reader)
                return self._ended(state, reader, tap)
            except self.BASE_ERROR as exc:
                return self._error(exc, state, tap)
            except httpx2.TransportError as exc:
                return httpx_error(exc, state.phase, self.timeout, self.LIBRARY)
            except Abandoned:
                return None  # nobody reads it: the round was recorded as abandoned already
            finally:
                finished.set()

        try:
            return await anyio.to_thread.run_sync(round_in_thread, abandon_on_cancel=True,
                                                  limiter=self.family.limiter)
        except BaseException:
            # Abandoned (a judged stall, the read backstop, the round deadline): the thread is
            # blocked in a read. Shut its socket down from here so the read returns, and wait for
            # the thread, bounded. A thread still connecting stops when its connect ends (the tap
            # raises at its next trace, before the request goes out), by its connect timeout at
            # the latest. The SDK would retry a broken request (native mode); the tap refuses.
            tap.abandon()
            self._shut_down(tap)
            # Bounded well within the 2 s a Ctrl-C is allowed; a thread still connecting (its socket
            # not yet known) is left to its connect timeout, on its own tap.
            with anyio.move_on_after(ABANDON_WAIT_S, shield=True):
                while not finished.is_set():
                    await anyio.sleep(0.01)
            if not finished.is_set():
                limit = max(self.timeout.connect or 0.0, self.timeout.read or 0.0)
                self.hooks.emit(ev.Note(t=self.hooks.now(), level="warning",
                                        message=f"conversation {state.conv} round {state.round}: the sync SDK's "
                                                f"thread did not end within {ABANDON_WAIT_S:g} s after its socket "
                                                f"was shut down; left to end by its own {limit:g} s timeout"))
            raise

    def _shut_down(self, tap: Tap) -> None:
        connection: TrackedConnection | None = tap.current
        sock = None
        try:
            sock = connection.transport.get_extra_info("socket") if connection is not None else None
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed: the thread's read has returned

    def _create(self, body: dict[str, Any]) -> Any:
        """The SDK call that opens the round's stream (a coroutine on the async client)."""
        return self.client.chat.completions.create(**body)

    def _headers_arrived(self, state: RoundState, stream: Any) -> None:
        headers_arrived(state, stream.response.status_code, self.hooks.now(), self.emit)

    def _retrying(self, retries_taken: int, response: httpx2.Response | None, exc: BaseException | None,
                  retry_after: float | None) -> Tap:
        """The SDK is about to back off and send the round again: hold the round as the client's own
        wait (the stall clock stops until the next attempt connects) and log the attempt that failed."""
        sync = self.family.sync
        tap: Tap = self._thread.tap if sync else self.tap
        state = tap.round
        if tap.abandoned:
            raise Abandoned
        if state is None:
            return tap
        attempt = retries_taken + 1
        status = response.status_code if response is not None else None
        error = None
        if status is None:
            error = (httpx_error(exc, "before-first-byte", self.timeout, self.LIBRARY).message
                     if isinstance(exc, httpx2.TransportError) else type(exc).__name__ if exc is not None else "an error")
            error = without_secret(error, self.hooks.options.api_key)
        wait = f"the {self.LIBRARY}'s back-off after {f'HTTP {status}' if status is not None else error} (attempt {attempt})"
        event = ev.ClientRetry(t=self.hooks.now(), conv=state.conv, round=state.round, attempt=attempt,
                               status=status, error=error,
                               retry_after_s=retry_after if retry_after is not None and math.isfinite(retry_after)
                               else None)

        def record() -> None:  # on the loop's thread
            if not tap.abandoned:
                state.client_waiting(wait)
                self.hooks.emit(event)

        if sync:
            self.family.loop.call_soon_threadsafe(record)
        else:
            record()
        return tap

    def _malformed(self, exc: BaseException, state: RoundState, reader: ChunkReader) -> RoundFailureSeen:
        detail = without_secret(str(exc).replace("\n", " "), self.hooks.options.api_key)[:200]
        return RoundFailureSeen(state.phase, f"malformed SSE event #{reader.events + 1}: {type(exc).__name__}: {detail}", 200,
                          "stream")

    def _chunk(self, state: RoundState, reader: ChunkReader, chunk: Any) -> None:
        chars = 0
        for choice in chunk.choices or ():
            delta = choice.delta
            piece = (delta.content or getattr(delta, "reasoning_content", None)) if delta is not None else None
            if piece:
                reader.reply.append(piece)
                chars += len(piece)
            if delta is not None and delta.tool_calls:
                chars += reader.add_tool_deltas(delta.tool_calls)
            if choice.finish_reason:
                reader.finish_reason = choice.finish_reason
        if chunk.usage is not None:
            reader.prompt_tokens = chunk.usage.prompt_tokens
            reader.completion_tokens = chunk.usage.completion_tokens
        reader.events += 1
        self._progressed(state, self.hooks.now(), reader.events, chars, False)

    def _ended(self, state: RoundState, reader: ChunkReader, tap: Tap) -> RoundFailureSeen | None:
        if not tap.saw_done:
            return ENDED_WITHOUT_DONE
        # The SDK swallows [DONE]; it arrived (the wrapper saw its bytes), so it is counted as aiohttp counts it.
        reader.events += 1
        reader.done = True
        now = state.last_byte if state.last_byte is not None else self.hooks.now()
        self._progressed(state, now, reader.events, 0, True)
        return None

    def _progressed(self, state: RoundState, now: float, seq: int, chars: int, done: bool) -> None:
        """One SSE event the SDK handed over (a chunk, or its swallowed [DONE]), recorded as one read."""
        state.progressed(now, seq, chars, done)
        self.emit(ev.SSEReceived(t=now, conv=state.conv, round=state.round, seq=seq, chars=chars, done=done, events=1))

    def _error(self, exc: Exception, state: RoundState, tap: Tap) -> RoundFailureSeen:
        phase = state.phase
        attempts = f" after {tap.attempts} attempts" if tap.attempts > 1 else ""
        if isinstance(exc, self.SDK.APIStatusError):
            if not tap.abandoned:  # which hop answered: the failure's producer
                state.answered_by(exc.response.headers.get("Server"), exc.response.headers.get("Via"))
            status = exc.status_code
            text = without_secret(str(exc.message).replace("\n", " "), self.hooks.options.api_key)[:300]
            # The SDK read the body before raising; kept bounded, for who wrote it and why.
            try:
                body = exc.response.content
            except httpx2.ResponseNotRead:  # not read after all: the headers still say who answered
                body = b""
            answer = error_answer(body, exc.response.headers, self.hooks.options.api_key)
            return RoundFailureSeen("before-first-byte", f"HTTP {status}{attempts}: {text}", status, "http", answer)
        cause = exc.__cause__
        if isinstance(exc, self.SDK.APITimeoutError):
            if isinstance(cause, httpx2.TransportError):
                error = httpx_error(cause, phase, self.timeout, self.LIBRARY)
                return dataclasses.replace(error, message=f"APITimeoutError{attempts} ({error.message})")
            return RoundFailureSeen(phase, f"APITimeoutError{attempts}: {exc}", None, "timeout")
        if isinstance(exc, self.SDK.APIConnectionError) and isinstance(cause, httpx2.TransportError):
            error = httpx_error(cause, phase, self.timeout, self.LIBRARY)
            return dataclasses.replace(error, message=f"APIConnectionError{attempts} ({error.message})")
        if isinstance(exc, self.SDK.APIError) and phase != "before-first-byte":
            return RoundFailureSeen(phase, f"error event in stream: {str(exc)[:200]}", 200, "stream")
        return RoundFailureSeen(phase, f"{type(exc).__name__}: {str(exc)[:200]}", None, "reset")


def _not_sse(stream: Any) -> RoundFailureSeen | None:
    return not_an_event_stream(stream.response.status_code, stream.response.headers.get("Content-Type", ""))


def _observing_retries(client_class: type, retrying: Any, *, sync: bool) -> type:
    """The SDK's client class, calling `retrying` before each back-off of its own retry loop, which
    calls _sleep_for_retry inside its `except`: the exception being handled is the failed attempt's."""
    if sync:
        class ObservedOpenAI(client_class):  # type: ignore[misc, valid-type]
            def _sleep_for_retry(self, *, retries_taken: int, max_retries: int, options: Any,
                                 response: httpx2.Response | None) -> None:
                headers = response.headers if response is not None else None
                tap = retrying(retries_taken, response, sys.exc_info()[1], self._parse_retry_after_header(headers))
                # The SDK's own delay, slept so that an abandoned round cuts it short (a thread cannot be cancelled).
                if tap.woken.wait(self._calculate_retry_timeout(max_retries - retries_taken, options, headers)):
                    raise Abandoned

        return ObservedOpenAI

    class ObservedAsyncOpenAI(client_class):  # type: ignore[misc, valid-type]
        def _sleep_for_retry(self, *, retries_taken: int, max_retries: int, options: Any,
                             response: httpx2.Response | None) -> Any:
            headers = response.headers if response is not None else None
            retrying(retries_taken, response, sys.exc_info()[1], self._parse_retry_after_header(headers))
            return super()._sleep_for_retry(retries_taken=retries_taken, max_retries=max_retries, options=options,
                                            response=response)

    return ObservedAsyncOpenAI
