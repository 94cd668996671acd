"""The multi-turn conversation driver: many agent-like conversations over keep-alive connections.

Each conversation owns one aiohttp session whose connector holds a single keep-alive
connection, the way each agent of a harness owns its SDK client; its rounds reuse that
connection, and every round records which local port it used and whether the connection was
reused. Reuse stays pinned per conversation: no connection is shared between conversations.

The transport (aiohttp, and why) is repro/transport.py; anyio still structures the driver: it
runs on the asyncio backend, where aiohttp lives. Chunks are decoded by repro/core/openai_chunks.py.

Stalls are found by the watchdog (repro/watchdog.py) from what the read loop stamps on each
round: the time of the last SSE event (progress; a keep-alive comment or a trickle of bytes is
not) and of the last byte. It also enforces a read backstop, so aiohttp gets only connect
deadlines, no read or total timeout.

Whoever runs the driver chooses the garbage-collector settings (repro/gc_policy.py).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import anyio
import msgspec
from yarl import URL

from repro.conversation import History, PromptSource
from repro.core import events as ev
from repro.core.openai_chunks import ChunkReader
from repro.core.sse import SSEDecoder
from repro.pacer import StartPacer
from repro.transport import ConversationConnector, chat_url, error_text, transport_error, transport_failure
from repro.watchdog import Judge, Watchdog

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


_json_encode = msgspec.json.Encoder().encode


class RoundState:
    """A round in flight. Mutable and driver-internal: the read loop stamps it, the watchdog reads it."""

    __slots__ = (
        "conv", "round", "started", "last_progress", "phase", "events", "local", "reused", "idle_s", "server", "via",
        "stalled_at", "suspected_at", "scope", "first_byte", "first_token", "max_gap", "last_byte",
        "read_timed_out", "abandoned", "transport",
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
        self.idle_s: float | None = None  # how long a reused connection sat idle before this round
        self.server: str | None = None  # the response's Server and Via headers: which hop answered
        self.via: str | None = None
        self.stalled_at: float | None = None
        self.suspected_at: float | None = None  # evidence gathering began ahead of the trigger
        self.scope: anyio.CancelScope | None = None
        self.first_byte: float | None = None
        self.first_token: float | None = None
        self.max_gap = 0.0
        self.last_byte: float | None = None
        self.read_timed_out = False  # the watchdog's read backstop ended the round
        self.abandoned = False  # a judged stall ended the round
        self.transport = None  # its connection's (asyncio) transport: the watchdog reads its socket at a stall


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
        self._watchdog = Watchdog(self.in_flight, now=self.now, emit=emit, judge=judge, stall_after=config.stall_after,
                                  judge_budget=config.judge_budget, read_backstop=self._read_backstop)

    def now(self) -> float:
        return time.monotonic() - self.origin

    async def run(self) -> list[RoundOutcome]:
        self._cookies = aiohttp.DummyCookieJar()  # a load generator keeps no cookies between rounds
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._watchdog.watch_stalls)
            tasks.start_soon(self._watchdog.watch_loop_lag)
            async with anyio.create_task_group() as conversations:
                for conv in range(self.config.conversations):
                    conversations.start_soon(self._conversation, conv)
            tasks.cancel_scope.cancel()
        return self.outcomes

    def _session(self, connection: ConversationConnector) -> aiohttp.ClientSession:
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
        connection = ConversationConnector(self._connected, limit=1, keepalive_timeout=c.keepalive_expiry,
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
        self, session: aiohttp.ClientSession, connection: ConversationConnector, conv: int, round_index: int,
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

        reader = ChunkReader()
        error: tuple[str, str, int | None, str] | None = None
        scope: anyio.CancelScope | None = None
        connection.round = state
        try:
            # One scope per round, for three reasons to end it: the round deadline, and the
            # watchdog's two (an abandoned stall, the read backstop), which it marks on the state
            # before cancelling. One scope, not a fail_after inside a CancelScope: a round costs
            # a few microseconds less, which a thousand streams of short rounds notice.
            with anyio.CancelScope(deadline=anyio.current_time() + c.round_timeout) as scope:
                state.scope = scope
                error = await self._stream(session, body, state, reader)
            if scope.cancelled_caught and not _ended_by_stall(state):
                error = ((state.phase, f"ReadTimeout: no byte for {self._read_backstop:g} s", None, "timeout")
                         if state.read_timed_out
                         else (state.phase, f"round deadline of {c.round_timeout:g} s passed", None, "timeout"))
        except aiohttp.ConnectionTimeoutError:
            error = (state.phase, f"ConnectTimeout: no connection within {c.connect_timeout:g} s", None,
                     "connect-timeout")
        except aiohttp.ServerTimeoutError as exc:
            error = (state.phase, f"ReadTimeout: {exc}", None, "timeout")
        except (aiohttp.ClientError, OSError) as exc:
            error = (state.phase, transport_error(exc, state.phase), None, transport_failure(exc))
        finally:
            connection.round = None
            connection.released_at = time.monotonic()
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
            phase, message, status, failure = error
            self.emit(ev.RoundFailed(t=now, conv=conv, round=round_index, phase=phase, error=message,
                                     status=status, duration_s=round(duration, 6), events=state.events,
                                     failure=failure, local=state.local, reused=state.reused,
                                     idle_s=None if state.idle_s is None else round(state.idle_s, 3),
                                     server=state.server, via=state.via, last_progress_t=state.last_progress))
            return RoundOutcome(conv, round_index, "failed", ttft_s=ttft, duration_s=duration,
                                max_gap_s=state.max_gap, events=state.events, error=message), ""
        text = "".join(reader.reply)
        mean_itl = None
        if state.first_token is not None and state.events > 2:
            mean_itl = (state.last_progress - state.first_token) / max(1, state.events - 2)
        self.emit(ev.RoundDone(
            t=now, conv=conv, round=round_index, status=200, reply_chars=len(text),
            completion_tokens=reader.completion_tokens, prompt_tokens=reader.prompt_tokens,
            ttfb_s=None if state.first_byte is None else round(state.first_byte - state.started, 6),
            ttft_s=None if ttft is None else round(ttft, 6), duration_s=round(duration, 6), events=state.events,
            max_gap_s=round(state.max_gap, 6), finish_reason=reader.finish_reason,
        ))
        return RoundOutcome(conv, round_index, "completed", ttft_s=ttft, duration_s=duration,
                            max_gap_s=state.max_gap, events=state.events, mean_itl_s=mean_itl), text

    def _connected(self, state: RoundState, local: str | None, reused: bool, idle_s: float | None,
                   transport=None) -> None:
        """The round has its connection (the conversation's kept-alive one, or a new one)."""
        state.local = local
        state.reused = reused
        state.transport = transport
        state.idle_s = idle_s
        now = self.now()
        self.emit(ev.RoundConnected(t=now, conv=state.conv, round=state.round, local=local or "?",
                                    reused=reused, pool_wait_s=round(now - state.started, 6)))

    async def _stream(self, session: aiohttp.ClientSession, body, state: RoundState, reader: ChunkReader):
        """Send one round and read its stream. Returns None on success or (phase, error, status, failure kind)."""
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
                state.server, state.via = response.headers.get("Server"), response.headers.get("Via")
                return ("before-first-byte", await error_text(response, self.config.api_key), status, "http")
            content_type = response.headers.get("Content-Type", "")
            if "text/event-stream" not in content_type:
                return ("mid-stream", f"status 200 but content-type {content_type or 'missing'!r}, not an SSE stream: "
                        "is the target an OpenAI-compatible base URL?", 200, "stream")
            decoder = SSEDecoder()
            emit, monotonic, origin, event_type = self.emit, time.monotonic, self.origin, ev.SSEReceived
            # readany() directly, not iter_any(): one coroutine frame less per chunk. It returns
            # whatever bytes arrived (b"" at the end), which the SSE decoder reassembles.
            readany = response.content.readany
            feed = reader.feed
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
                first_seq = state.events
                chars, done_here, failure = feed(events)
                state.events = seq = reader.events
                if done_here:
                    state.phase = "after-last-event"
                if chars and state.first_token is None:
                    state.first_token = now
                # One record for the read (see ev.SSEReceived), the failing event included: it arrived.
                emit(event_type(t=now, conv=conv, round=round_index, seq=seq, chars=chars, done=done_here,
                                events=seq - first_seq))
                if failure is not None:
                    return ("mid-stream", failure, 200, "stream")
            if not reader.done:
                return ("mid-stream", "stream ended without data: [DONE]", 200, "truncated")
            return None


def _ended_by_stall(state: RoundState) -> bool:
    """Whether a cancelled round was a stall: abandoned after its verdict, or cut by the read
    backstop while its stall was being judged. A round whose deadline passed mid-judgement (bytes
    may have resumed by then) is not: the deadline is what ended it."""
    return state.abandoned or (state.read_timed_out and state.stalled_at is not None)
