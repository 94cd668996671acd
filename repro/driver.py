"""The multi-turn conversation driver: many agent-like conversations over keep-alive connections.

Each conversation owns one aiohttp session whose connector holds a single keep-alive
connection, the way each agent of a harness owns its SDK client; its rounds reuse that
connection, and every round records which local port it used and whether the connection was
reused. Reuse stays pinned per conversation: no connection is shared between conversations.

Why aiohttp, not httpx: measured (benchmarks/run.py), httpx + httpcore + h11 cost ~40 us of CPU
per SSE chunk and ~0.7 ms per request start even when nothing is done with the bytes, twice
aiohttp's whole cost per event; aiohttp parses HTTP in C (llhttp). anyio still structures the
driver: it runs on the asyncio backend, where aiohttp lives.

Stalls are found by one watchdog task, not a timer per read: the read loop only stamps the
time of the last SSE event (progress; a keep-alive comment or a trickle of bytes is not), and
the watchdog flags a round silent for `stall_after` seconds while its stream is still open, so
the stall can be judged live (canaries, an extra probe sample) before the driver gives up on
it. The same watchdog enforces a read backstop behind that (no byte at all for longer than a
stall plus its judging); aiohttp gets only connect deadlines, no read or total timeout.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import math
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import aiohttp
import anyio
import msgspec
from aiohttp.http_exceptions import ContentLengthError, TransferEncodingError
from yarl import URL

from repro.core import events as ev
from repro.conversation import History, PromptSource
from repro.pacer import StartPacer
from repro.core.sse import SSEDecoder

Emit = Callable[[ev.Event], None]

@dataclass(frozen=True)
class DriverConfig:
    base_url: str
    model: str
    rounds: int = 6
    conversations: int = 4
    think_time: float = 0.0
    # Seconds over which conversations start their first round. Opening a session and a
    # connection costs CPU; a thousand at once would stall our own event loop. None: 2 ms per
    # conversation, at most 2 s.
    ramp_up: float | None = None
    # New rounds start at most this many per second (after a burst of `start_burst`), so rounds
    # that end together do not all start in one loop iteration (see repro/pacer.py). 0: unpaced.
    # 3000/s at ~0.1 ms per start spends at most a third of a core on starting rounds. Measured
    # at 1024 streams (medians of 4): 2000/s capped a flood's throughput (+12% CPU per event, as
    # fewer streams were in flight), unpaced lagged 117 ms at an engine's pace; 3000/s: 21 ms.
    max_start_rate: float = 3000.0
    start_burst: int = 20
    max_tokens: int = 32
    stall_after: float = 10.0
    connect_timeout: float = 5.0
    round_timeout: float = 300.0
    keepalive_expiry: float = 5.0
    on_failure: str = "continue"  # or "retire": a conversation stops after a failed or stalled round
    api_key: str | None = field(default=None, repr=False)
    judge_budget: float = 30.0


class Judge(Protocol):
    """What the watchdog calls: `prepare` when a round has been silent for the trigger minus
    `lead_s` (evidence takes time to gather), then the judge itself when the trigger passes."""

    lead_s: float

    async def prepare(self, t: float) -> None: ...

    async def __call__(self, stall: ev.RoundStalled) -> None: ...


def chat_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/chat/completions"


# The fields of an OpenAI chunk the driver reads; msgspec skips the rest without building it.
class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []
    usage: _Usage | None = None
    error: Any = None


_chunk_decoder = msgspec.json.Decoder(_Chunk)
_json_encode = msgspec.json.Encoder().encode


class RoundState:
    """A round in flight. Mutable and driver-internal: the read loop stamps it, the watchdog reads it."""

    __slots__ = (
        "conv", "round", "started", "last_progress", "phase", "events", "local", "reused",
        "new_connection", "stalled_at", "suspected_at", "scope", "first_byte", "first_token", "max_gap", "last_byte",
        "read_timed_out", "abandoned",
    )

    def __init__(self, conv: int, round_index: int, now: float) -> None:
        self.conv = conv
        self.round = round_index
        self.started = now
        self.last_progress = now
        self.phase = "before-first-byte"
        self.events = 0
        self.local: str | None = None
        self.reused: bool | None = None
        self.new_connection = False
        self.stalled_at: float | None = None
        self.suspected_at: float | None = None  # evidence gathering began ahead of the trigger
        self.scope: anyio.CancelScope | None = None
        self.first_byte: float | None = None
        self.first_token: float | None = None
        self.max_gap = 0.0
        self.last_byte: float | None = None
        self.read_timed_out = False  # the watchdog's read backstop ended the round
        self.abandoned = False  # a judged stall ended the round


@dataclass
class RoundOutcome:
    conv: int
    round: int
    status: str  # completed | failed | stalled | skipped
    ttft_s: float | None = None
    duration_s: float = 0.0
    max_gap_s: float = 0.0
    events: int = 0
    mean_itl_s: float | None = None
    error: str | None = None


class Driver:
    def __init__(
        self,
        config: DriverConfig,
        prompts: PromptSource,
        emit: Emit,
        *,
        origin: float | None = None,
        judge: Judge | None = None,
    ) -> None:
        self.config = config
        self.prompts = prompts
        self.emit = emit
        self.origin = time.monotonic() if origin is None else origin
        self.judge = judge
        self.url = chat_url(config.base_url)
        self.in_flight: dict[tuple[int, int], RoundState] = {}
        self.outcomes: list[RoundOutcome] = []
        self.stop_requested = False
        # Parsed once: aiohttp would parse a string URL again for every round.
        url = URL(self.url)
        if config.api_key and (url.user or url.password):
            # Our Bearer key wins; aiohttp refuses an Authorization header next to URL credentials.
            url = url.with_user(None)
        self._url = url
        self._headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._headers["Content-Type"] = "application/json"
        # The SSE bytes go to our decoder as they arrived; no server should compress them.
        self._headers["Accept-Encoding"] = "identity"
        # One TLS context for every session: building one per session costs milliseconds each.
        # Plain http never uses it, so skip loading the CA store (~20 ms); redirects are not followed,
        # and a context without CAs could only fail verification, never skip it.
        self._ssl = (ssl.create_default_context() if self.url.startswith("https:")
                     else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
        # No byte for this long ends a round even if a stall was never flagged or judged. The
        # watchdog enforces it, not aiohttp's sock_read: that re-arms a timer on every chunk
        # received (~6% of the driver's CPU at 256 streams) for a deadline that never fires first.
        self._read_backstop = config.stall_after + config.judge_budget + 5.0
        # No total timeout either: it would end a slow but live stream, or fire before the watchdog.
        self._timeout = aiohttp.ClientTimeout(total=None, connect=config.connect_timeout,
                                              sock_connect=config.connect_timeout)
        self._cookies: aiohttp.DummyCookieJar | None = None  # made in run(): aiohttp wants the running loop
        self._pacer = StartPacer(config.max_start_rate, config.start_burst) if config.max_start_rate > 0 else None

    def now(self) -> float:
        return time.monotonic() - self.origin

    async def run(self) -> list[RoundOutcome]:
        with _gc_tuned_for_streaming():
            return await self._run()

    async def _run(self) -> list[RoundOutcome]:
        self._cookies = aiohttp.DummyCookieJar()  # a load generator keeps no cookies between rounds
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._watchdog)
            tasks.start_soon(self._loop_lag_monitor)
            async with anyio.create_task_group() as conversations:
                for conv in range(self.config.conversations):
                    conversations.start_soon(self._conversation, conv)
            tasks.cancel_scope.cancel()
        return self.outcomes

    def _session(self, connection: "_ConversationConnector") -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=connection,
            timeout=self._timeout,
            headers=self._headers,
            cookie_jar=self._cookies,
            trust_env=False,  # no proxy or netrc from the environment: we talk to the target given
            auto_decompress=False,
        )

    @property
    def ramp_up(self) -> float:
        c = self.config
        return min(2.0, 0.002 * c.conversations) if c.ramp_up is None else c.ramp_up

    async def _conversation(self, conv: int) -> None:
        history = History()
        if conv and self.ramp_up > 0:
            await anyio.sleep(self.ramp_up * conv / self.config.conversations)
        c = self.config
        connection = _ConversationConnector(self._connected, limit=1, keepalive_timeout=c.keepalive_expiry,
                                            ssl=self._ssl)
        session = self._session(connection)
        try:
            for round_index in range(1, self.config.rounds + 1):
                if self.stop_requested:
                    self._skip(conv, round_index, "run stopped")
                    continue
                paced = 0.0
                if self._pacer is not None:
                    wait = self._pacer.reserve(time.monotonic())
                    if wait > 0:
                        before = time.monotonic()
                        await anyio.sleep(wait)
                        paced = time.monotonic() - before
                history.ask(self.prompts.user_turn(conv, round_index))
                outcome, reply = await self._round(session, connection, conv, round_index, history, paced)
                self.outcomes.append(outcome)
                if outcome.status == "completed":
                    history.answer(reply)
                else:
                    history.withdraw_question()
                    if self.config.on_failure == "retire":
                        for later in range(round_index + 1, self.config.rounds + 1):
                            self._skip(conv, later, "conversation retired after a failed round")
                        return
                if self.config.think_time and round_index < self.config.rounds:
                    await anyio.sleep(self.config.think_time)
        finally:
            # Shielded and bounded: a cancelled run still closes its sockets (closing is synchronous;
            # the wait is only for the transports to report it), and never hangs on it.
            with anyio.move_on_after(1.0, shield=True):
                await session.close()

    def _skip(self, conv: int, round_index: int, why: str) -> None:
        self.outcomes.append(RoundOutcome(conv, round_index, "skipped", error=why))

    async def _round(
        self, session: aiohttp.ClientSession, connection: "_ConversationConnector", conv: int, round_index: int,
        history: History, paced: float = 0.0,
    ) -> tuple[RoundOutcome, str]:
        c = self.config
        state = RoundState(conv, round_index, self.now())
        key = (conv, round_index)
        self.in_flight[key] = state
        self.emit(ev.RoundStarted(t=state.started, conv=conv, round=round_index, prompt_chars=history.chars,
                                  messages=len(history.messages), paced_s=round(paced, 6)))
        body = {
            "model": c.model,
            "messages": history.messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": c.max_tokens,
        }

        reply: list[str] = []
        result: dict[str, Any] = {}
        error: tuple[str, str, int | None] | None = None
        scope: anyio.CancelScope | None = None
        connection.round = state
        try:
            # One scope per round, for three reasons to end it: the round deadline, and the
            # watchdog's two (an abandoned stall, the read backstop), which it marks on the state
            # before cancelling. One scope, not a fail_after inside a CancelScope: a round costs
            # a few microseconds less, which a thousand streams of short rounds notice.
            with anyio.CancelScope(deadline=anyio.current_time() + c.round_timeout) as scope:
                state.scope = scope
                error = await self._stream(session, body, state, reply, result)
            if scope.cancelled_caught and not _ended_by_stall(state):
                error = ((state.phase, f"ReadTimeout: no byte for {self._read_backstop:g} s", None) if state.read_timed_out
                         else (state.phase, f"round deadline of {c.round_timeout:g} s passed", None))
        except aiohttp.ConnectionTimeoutError:
            error = (state.phase, f"ConnectTimeout: no connection within {c.connect_timeout:g} s", None)
        except aiohttp.ServerTimeoutError as exc:
            error = (state.phase, f"ReadTimeout: {exc}", None)
        except (aiohttp.ClientError, OSError) as exc:
            error = (state.phase, _transport_error(exc, state.phase), None)
        finally:
            connection.round = None
            del self.in_flight[key]

        now = self.now()
        duration = now - state.started
        ttft = state.first_token - state.started if state.first_token is not None else None
        if scope is not None and scope.cancelled_caught and _ended_by_stall(state):
            self.emit(ev.RoundAbandoned(t=now, conv=conv, round=round_index, phase=state.phase,
                                        stalled_for_s=round(now - state.last_progress, 3),
                                        duration_s=round(duration, 6), events=state.events))
            return RoundOutcome(conv, round_index, "stalled", ttft_s=ttft, duration_s=duration,
                                max_gap_s=max(state.max_gap, now - state.last_progress), events=state.events,
                                error=f"stalled {state.phase}"), ""
        if error is not None:
            phase, message, status = error
            self.emit(ev.RoundFailed(t=now, conv=conv, round=round_index, phase=phase, error=message,
                                     status=status, duration_s=round(duration, 6), events=state.events))
            return RoundOutcome(conv, round_index, "failed", ttft_s=ttft, duration_s=duration,
                                max_gap_s=state.max_gap, events=state.events, error=message), ""
        text = "".join(reply)
        mean_itl = None
        if state.first_token is not None and state.events > 2:
            mean_itl = (state.last_progress - state.first_token) / max(1, state.events - 2)
        self.emit(ev.RoundDone(
            t=now, conv=conv, round=round_index, status=200, reply_chars=len(text),
            completion_tokens=result.get("completion_tokens"), prompt_tokens=result.get("prompt_tokens"),
            ttfb_s=None if state.first_byte is None else round(state.first_byte - state.started, 6),
            ttft_s=None if ttft is None else round(ttft, 6), duration_s=round(duration, 6), events=state.events,
            max_gap_s=round(state.max_gap, 6), finish_reason=result.get("finish_reason"),
        ))
        return RoundOutcome(conv, round_index, "completed", ttft_s=ttft, duration_s=duration,
                            max_gap_s=state.max_gap, events=state.events, mean_itl_s=mean_itl), text

    def _connected(self, state: RoundState, local: str | None, reused: bool) -> None:
        """The round has its connection (the conversation's kept-alive one, or a new one)."""
        state.new_connection = not reused
        state.local = local
        state.reused = reused
        now = self.now()
        self.emit(ev.RoundConnected(t=now, conv=state.conv, round=state.round, local=local or "?",
                                    reused=reused, pool_wait_s=round(now - state.started, 6)))

    async def _stream(self, session: aiohttp.ClientSession, body, state: RoundState, reply: list[str], result: dict):
        """Send one round and read its stream. Returns None on success or (phase, error, status)."""
        conv, round_index = state.conv, state.round
        # msgspec encodes the growing history several times faster than json.dumps.
        # Leaving the block releases the connection: kept alive after a whole response, closed
        # after a partial one (a stall cancelled, an error), so a cancelled round leaks nothing.
        async with session.post(self._url, data=_json_encode(body), allow_redirects=False) as response:
            now = self.now()
            state.first_byte = state.last_byte = now
            state.last_progress = now
            state.phase = "mid-stream"
            status = response.status
            self.emit(ev.FirstByte(t=now, conv=conv, round=round_index, status=status))
            if status != 200:
                return ("before-first-byte", await _error_text(response, self.config.api_key), status)
            content_type = response.headers.get("Content-Type", "")
            if "text/event-stream" not in content_type:
                return ("mid-stream", f"status 200 but content-type {content_type or 'missing'!r}, not an SSE stream: "
                        "is the target an OpenAI-compatible base URL?", 200)
            decoder = SSEDecoder()
            emit, monotonic, origin, event_type = self.emit, time.monotonic, self.origin, ev.SSEReceived
            # readany() directly, not iter_any(): one coroutine frame less per chunk. It returns
            # whatever bytes arrived (b"" at the end), which the SSE decoder reassembles.
            readany = response.content.readany
            done = False
            while chunk := await readany():
                now = monotonic() - origin
                state.last_byte = now
                events = decoder.feed(chunk)
                if not events:
                    continue  # a partial event or a keep-alive comment: bytes, but no progress
                gap = now - state.last_progress
                if gap > state.max_gap:
                    state.max_gap = gap
                state.last_progress = now
                chars = 0
                failure = None
                first_seq = state.events
                done_here = False
                for sse in events:
                    state.events += 1
                    if sse.data == b"[DONE]":
                        done = done_here = True
                        state.phase = "after-last-event"
                        continue
                    try:
                        chunk_obj = _chunk_decoder.decode(sse.data)
                    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                        failure = ("mid-stream", f"malformed JSON in SSE event #{state.events}: {exc}", 200)
                        break
                    if chunk_obj.error is not None:
                        failure = ("mid-stream", f"error event in stream: {str(chunk_obj.error)[:200]}", 200)
                        break
                    for choice in chunk_obj.choices:
                        delta = choice.delta
                        if delta is not None:
                            piece = delta.content or delta.reasoning_content
                            if piece:
                                reply.append(piece)
                                chars += len(piece)
                        if choice.finish_reason:
                            result["finish_reason"] = choice.finish_reason
                    if chunk_obj.usage is not None:
                        result["prompt_tokens"] = chunk_obj.usage.prompt_tokens
                        result["completion_tokens"] = chunk_obj.usage.completion_tokens
                if chars and state.first_token is None:
                    state.first_token = now
                # One record for the read (see ev.SSEReceived), the failing event included: it arrived.
                emit(event_type(t=now, conv=conv, round=round_index, seq=state.events, chars=chars, done=done_here,
                                events=state.events - first_seq))
                if failure is not None:
                    return failure
            if not done:
                return ("mid-stream", "stream ended without data: [DONE]", 200)
            return None

    async def _watchdog(self) -> None:
        tick = min(0.1, max(0.02, self.config.stall_after / 20))
        # A judge that needs time to gather evidence (canaries have deadlines) starts that
        # long before the trigger, so the verdict lands right at it, not a canary timeout later.
        lead = float(getattr(self.judge, "lead_s", 0.0) or 0.0)
        prepare = getattr(self.judge, "prepare", None)
        suspect_after = max(self.config.stall_after / 2, self.config.stall_after - lead)
        backstop = self._read_backstop
        async with anyio.create_task_group() as judges:
            while True:
                await anyio.sleep(tick)
                now = self.now()
                for state in list(self.in_flight.values()):
                    silent = now - state.last_progress
                    if (prepare is not None and silent >= suspect_after and state.stalled_at is None
                            and (state.suspected_at is None or state.suspected_at < state.last_progress)):
                        state.suspected_at = now
                        judges.start_soon(prepare, now)
                    if state.stalled_at is None and silent >= self.config.stall_after:
                        state.stalled_at = now
                        stall = ev.RoundStalled(
                            t=now, conv=state.conv, round=state.round, phase=state.phase,
                            stalled_for_s=round(now - state.last_progress, 3), started_t=state.started,
                            last_progress_t=state.last_progress, last_byte_t=state.last_byte,
                            local=state.local, reused=state.reused, events=state.events, in_flight=len(self.in_flight),
                        )
                        self.emit(stall)
                        judges.start_soon(self._judge_then_abandon, state, stall)
                    last_byte = state.last_byte if state.last_byte is not None else state.started
                    if now - last_byte >= backstop and not state.read_timed_out and state.scope is not None:
                        state.read_timed_out = True
                        state.scope.cancel()

    async def _judge_then_abandon(self, state: RoundState, stall: ev.RoundStalled) -> None:
        if self.judge is not None:
            with anyio.move_on_after(self.config.judge_budget):
                await self.judge(stall)
        if state.last_progress > stall.last_progress_t:
            # Bytes arrived while we judged: slow, not stuck. Let the round go on.
            self.emit(ev.Note(t=self.now(), level="info",
                              message=f"conversation {state.conv} round {state.round} resumed after a stall"))
            state.stalled_at = None
            return
        if state.scope is not None:
            state.abandoned = True
            state.scope.cancel()

    async def _loop_lag_monitor(self, interval: float = 0.05, report_every: float = 1.0) -> None:
        """Our own event-loop lag: if the driver starves itself, a stall may be ours."""
        lags: list[float] = []
        last_report = time.monotonic()
        try:
            while True:
                before = time.monotonic()
                await anyio.sleep(interval)
                after = time.monotonic()
                lags.append(max(0.0, after - before - interval))
                if after - last_report >= report_every:
                    self._report_lag(lags)
                    last_report = after
        finally:
            # The last partial interval too: a run shorter than `report_every` still reports its lag.
            if lags:
                self._report_lag(lags)

    def _report_lag(self, lags: list[float]) -> None:
        lags.sort()
        p99 = lags[min(len(lags) - 1, math.ceil(0.99 * len(lags)) - 1)]
        self.emit(ev.LoopLag(t=self.now(), max_ms=round(lags[-1] * 1000, 3),
                             p99_ms=round(p99 * 1000, 3), in_flight=len(self.in_flight)))
        lags.clear()


def _ended_by_stall(state: RoundState) -> bool:
    """Whether a cancelled round was a stall: abandoned after its verdict, or cut by the read
    backstop while its stall was being judged. A round whose deadline passed mid-judgement (bytes
    may have resumed by then) is not: the deadline is what ended it."""
    return state.abandoned or (state.read_timed_out and state.stalled_at is not None)


@contextlib.contextmanager
def _gc_tuned_for_streaming(young_threshold: int = 20_000):
    """Cheaper garbage collection while streams run, restored afterwards.

    Every chunk allocates a few short-lived containers (h11 events, tuples), so the default
    young-generation threshold of 700 triggers collections that also walk the long-lived
    heap (clients, connections, histories): 15-20% of the driver's CPU at 256 streams.
    Freezing what exists at start (modules, config) and collecting the young generation
    every 20k allocations instead keeps reference cycles collected, only less often.
    """
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(old[0], young_threshold), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


class _ConversationConnector(aiohttp.TCPConnector):
    """A conversation's pool of one keep-alive connection, which tells each round what it got.

    It reports when the connection is in hand, before the request is written, so a round that
    stalls before its first byte already knows its local port (what the proxy's flow log names)
    and whether it reused the connection. Reuse is told by identity: aiohttp hands back the very
    protocol object of a kept-alive connection, and a new one for a new connection.
    """

    def __init__(self, connected: Callable[[RoundState, str | None, bool], None], **options: Any) -> None:
        super().__init__(**options)
        self._on_connected = connected
        self._last_protocol: Any = None
        self._local: str | None = None
        self.round: RoundState | None = None

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        connection = await super().connect(req, traces, timeout)
        protocol = connection.protocol
        reused = protocol is self._last_protocol
        if not reused:
            self._last_protocol = protocol
            self._local = _local_address(connection.transport)
            _read_at_most(connection.transport, _READ_SIZE)
        if self.round is not None:
            self._on_connected(self.round, self._local, reused)
        return connection


# asyncio's socket transport reads with recv(256 KiB). A request that large is past glibc's
# mmap threshold (128 KiB), so every read of a small SSE chunk costs mmap + mremap + munmap and a
# page fault on top of the recv (seen with strace; CPython issue #85451). 64 KiB stays on the
# heap: measured, recv's share of the driver's CPU at 1024 paced streams went from 45% to 17%.
# A stream with more waiting (a driver behind in a flood) is read in several recvs: no loss.
_READ_SIZE = 64 * 1024


def _read_at_most(transport: Any, size: int) -> None:
    """Cap the bytes one recv asks for. `max_size` is the selector transport's (public, if
    undocumented) class attribute; other transports (TLS reads into a buffer) lack it."""
    if getattr(transport, "max_size", 0) > size:
        transport.max_size = size


def _local_address(transport: Any) -> str | None:
    try:
        host, port = transport.get_extra_info("sockname")[:2]
        return f"{host}:{port}"
    except Exception:  # an exotic transport without socket info: keep going without it
        return None


def _transport_error(exc: BaseException, phase: str) -> str:
    """One line naming what went wrong on the wire, in the words the run log has always used
    (ConnectError, RemoteProtocolError, ReadError: what readers of older logs and verdicts know)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        if isinstance(exc, aiohttp.ClientSSLError):
            return f"ConnectError: TLS with {exc.host}:{exc.port} failed: {exc}"[:300]
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


async def _error_text(response: aiohttp.ClientResponse, secret: str | None, limit: int = 2048) -> str:
    """A short, secret-free description of a non-200 answer (the body is read bounded; a server
    that quotes the key back, as some 401 pages do, never gets it into our log)."""
    body = b""
    with anyio.move_on_after(2.0):
        try:
            while len(body) < limit:
                part = await response.content.readany()
                if not part:
                    break
                body += part
        except (aiohttp.ClientError, OSError):
            pass  # the status says enough; keep what of the body arrived
    text = body[:limit].decode("utf-8", "replace").strip().replace("\n", " ")
    if secret:
        text = text.replace(secret, "[redacted]")
    if "<html" in text.lower():
        text = "HTML page (" + text[:120] + "...)"
    detail = f"HTTP {response.status}"
    retry_after = response.headers.get("Retry-After")
    if retry_after:
        detail += f" (Retry-After: {retry_after[:20]})"
    return f"{detail}: {text[:300]}" if text else detail
