"""The official openai SDK as the client: `AsyncOpenAI` (openai-async) or `OpenAI` (openai, each
round in a worker thread), one SDK client per conversation as each agent of a harness owns one,
iterating the SDK's own stream objects (what a harness does): one chunk is one SSE event of
progress, while a transport wrapper stamps every byte and reads the connection from httpcore's
trace hook (repro/clients/httpx_tap.py).

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
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
import openai
from openai._constants import DEFAULT_CONNECTION_LIMITS

from repro.clients.base import Connection, RoundError, progress, tls_context
from repro.clients.httpx_client import httpx_error
from repro.clients.httpx_tap import Abandoned, Tap, tapped_transport
from repro.core import events as ev
from repro.core.text import without_secret

if TYPE_CHECKING:
    from repro.core.openai_chunks import ChunkReader
    from repro.driver import Driver, RoundState

LIBRARY = "openai SDK"
ABANDON_WAIT_S = 1.5  # how long an abandoned round waits for its worker thread to return


class OpenAIFamily:
    def __init__(self, driver: Driver, *, sync: bool) -> None:
        self.driver = driver
        self.sync = sync
        self.loop = asyncio.get_running_loop()
        # Sized to the conversations: one thread per conversation in flight, never anyio's 40.
        self.limiter = anyio.CapacityLimiter(max(1, driver.config.conversations)) if sync else None
        self.tls = tls_context(driver.url, httpx2.create_ssl_context)

    def conversation(self, conv: int) -> OpenAIConversation:
        return OpenAIConversation(self)

    async def aclose(self) -> None:
        pass


class OpenAIConversation:
    def __init__(self, family: OpenAIFamily) -> None:
        driver = family.driver
        c = driver.config
        self.family = family
        self.driver = driver
        if family.sync:
            # The worker thread's hooks hop to the event loop's thread: events are emitted there only.
            self.emit = lambda event: family.loop.call_soon_threadsafe(driver.emit, event)
            connected = lambda *args: family.loop.call_soon_threadsafe(driver._connected, *args)  # noqa: E731
        else:
            self.emit = driver.emit
            connected = driver._connected
        self.connected = connected
        self.tap = Tap(connected, driver.now)
        # Sync: a Tap per round, found by the worker thread running it; a thread left behind by an
        # abandoned round keeps its own (abandoned) tap, so its retry is refused and its bytes and
        # connection are never credited to the conversation's next round.
        self._thread = threading.local()
        inner_class = httpx2.HTTPTransport if family.sync else httpx2.AsyncHTTPTransport
        inner = inner_class(limits=DEFAULT_CONNECTION_LIMITS, verify=family.tls, trust_env=False)
        transport = tapped_transport(httpx2, inner, self.tap, stamp_bytes=True, sync=family.sync,
                                     tap_of=(lambda: self._thread.tap) if family.sync else None)
        http_client_class = openai.DefaultHttpxClient if family.sync else openai.DefaultAsyncHttpxClient
        http_client = http_client_class(transport=transport, trust_env=False)
        # The sync client's read/write timeout is the driver's read backstop: the watchdog ends the
        # round then anyway, and the thread must end too (it is no daemon: it would block the exit).
        read = driver._read_backstop if family.sync else None
        options: dict[str, Any] = {} if c.client_timeouts == "native" else {
            "timeout": httpx2.Timeout(read, connect=c.connect_timeout, pool=None), "max_retries": 0}
        client_class = openai.OpenAI if family.sync else openai.AsyncOpenAI
        # The SDK insists on a key; a local engine ignores the placeholder (vLLM's docs use "EMPTY").
        self.client = client_class(base_url=driver.url.removesuffix("/chat/completions"), api_key=c.api_key or "EMPTY",
                                   http_client=http_client, **options)
        self.timeout = self.client.timeout if isinstance(self.client.timeout, httpx2.Timeout) else httpx2.Timeout(
            self.client.timeout)

    async def aclose(self) -> None:
        if self.family.sync:
            self.client.close()
        else:
            await self.client.close()

    async def stream(self, body: dict[str, Any], state: RoundState, reader: ChunkReader) -> RoundError | None:
        if self.family.sync:
            self.tap = Tap(self.connected, self.driver.now)
        tap = self.tap
        tap.round, tap.saw_done, tap.attempts, tap.abandoned = state, False, 0, False
        try:
            if not self.family.sync:
                try:
                    stream = await self.client.chat.completions.create(**body)
                    self._headers_arrived(state)
                    async for chunk in stream:
                        self._chunk(state, reader, chunk)
                except openai.OpenAIError as exc:
                    return self._error(exc, state, tap)
                except httpx2.TransportError as exc:  # raised raw from a stream's iteration by some SDK versions
                    return httpx_error(exc, state.phase, self.timeout, LIBRARY)
                return self._ended(state, reader, tap)
            return await self._in_thread(body, state, reader, tap)
        finally:
            tap.round = None

    async def _in_thread(self, body: dict[str, Any], state: RoundState, reader: ChunkReader,
                         tap: Tap) -> RoundError | None:
        finished = threading.Event()

        def round_in_thread() -> RoundError | None:
            self._thread.tap = tap
            try:
                stream = self.client.chat.completions.create(**body)
                if tap.abandoned:
                    raise Abandoned
                self._headers_arrived(state)
                for chunk in stream:
                    if tap.abandoned:  # nothing of an abandoned round is recorded after its end
                        stream.close()
                        raise Abandoned
                    self._chunk(state, reader, chunk)
                return self._ended(state, reader, tap)
            except openai.OpenAIError as exc:
                return self._error(exc, state, tap)
            except httpx2.TransportError as exc:
                return httpx_error(exc, state.phase, self.timeout, LIBRARY)
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
            # the thread, bounded (a thread still connecting ends by its connect timeout). The SDK
            # would retry a broken request (native mode); the tap refuses to send it again.
            tap.abandoned = True
            self._shut_down(tap)
            # Bounded well within the 2 s a Ctrl-C is allowed; a thread still connecting (its socket
            # not yet known) is left to its own connect and read timeouts, on its own tap.
            with anyio.move_on_after(ABANDON_WAIT_S, shield=True):
                while not finished.is_set():
                    await anyio.sleep(0.01)
            if not finished.is_set():
                limit = max(self.timeout.connect or 0.0, self.timeout.read or 0.0)
                self.driver.emit(ev.Note(t=self.driver.now(), level="warning",
                                         message=f"conversation {state.conv} round {state.round}: the sync SDK's "
                                                 f"thread did not end within {ABANDON_WAIT_S:g} s after its socket "
                                                 f"was shut down; left to end by its own {limit:g} s timeout"))
            raise

    def _shut_down(self, tap: Tap) -> None:
        connection: Connection | None = tap.current
        sock = None
        try:
            sock = connection.transport.get_extra_info("socket") if connection is not None else None
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed: the thread's read has returned

    def _headers_arrived(self, state: RoundState) -> None:
        now = self.driver.now()
        state.first_byte = state.last_byte = state.last_progress = now
        state.client_wait = None  # headers arrived: whatever the client waited for is over
        state.phase = "mid-stream"
        self.emit(ev.FirstByte(t=now, conv=state.conv, round=state.round, status=200))

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
        progress(state, self.driver.now(), self.emit, 1, chars, False)

    def _ended(self, state: RoundState, reader: ChunkReader, tap: Tap) -> RoundError | None:
        if not tap.saw_done:
            return ("mid-stream", "stream ended without data: [DONE]", 200, "truncated")
        # The SDK swallows [DONE]; it arrived (the wrapper saw its bytes), so it is counted as aiohttp counts it.
        reader.events += 1
        reader.done = True
        progress(state, state.last_byte if state.last_byte is not None else self.driver.now(), self.emit, 1, 0, True)
        return None

    def _error(self, exc: openai.OpenAIError, state: RoundState, tap: Tap) -> RoundError:
        phase = state.phase
        attempts = f" after {tap.attempts} attempts" if tap.attempts > 1 else ""
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            text = without_secret(str(exc.message).replace("\n", " "), self.driver.config.api_key)[:300]
            return ("before-first-byte", f"HTTP {status}{attempts}: {text}", status, "http")
        cause = exc.__cause__
        if isinstance(exc, openai.APITimeoutError):
            if isinstance(cause, httpx2.TransportError):
                p, message, status, failure = httpx_error(cause, phase, self.timeout, LIBRARY)
                return (p, f"APITimeoutError{attempts} ({message})", status, failure)
            return (phase, f"APITimeoutError{attempts}: {exc}", None, "timeout")
        if isinstance(exc, openai.APIConnectionError) and isinstance(cause, httpx2.TransportError):
            p, message, status, failure = httpx_error(cause, phase, self.timeout, LIBRARY)
            return (p, f"APIConnectionError{attempts} ({message})", status, failure)
        if isinstance(exc, openai.APIError) and phase != "before-first-byte":
            return (phase, f"error event in stream: {str(exc)[:200]}", 200, "stream")
        return (phase, f"{type(exc).__name__}: {str(exc)[:200]}", None, "reset")
