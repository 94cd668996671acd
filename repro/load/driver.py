"""The multi-turn conversation driver: many agent-like conversations over keep-alive connections.

Each conversation streams through a client (repro/load/clients/: aiohttp by default, httpx, the
openai SDK async or sync), the way each agent of a harness owns its SDK client; every round
records which local port it used and whether the connection was reused, from the library's own
hooks. The aiohttp client pins one keep-alive connection per conversation unless
--connections says otherwise; the others keep their library's own pool.

anyio structures the driver: it runs on the asyncio backend, where aiohttp lives. Chunks are
decoded by repro/core/openai_chunks.py (the SDK clients: by the SDK itself).

Stalls are found by the watchdog (repro/load/watchdog.py) from what the read loop stamps on each
round: the time of the last SSE event (progress; a keep-alive comment or a trickle of bytes is
not) and of the last byte. It also enforces a read backstop, so the clients get only connect
deadlines, no read or total timeout (unless --client-timeouts native keeps the library's own).

Whoever runs the driver chooses the garbage-collector settings (repro/load/gc_policy.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from repro.core import events as ev
from repro.core.hop import chat_url
from repro.core.openai_chunks import ChunkReader
from repro.core.pacer import StartPacer
from repro.load.clients import client_family
from repro.load.clients.base import ClientFamily, Connection, ConversationClient
from repro.load.conversation import History, PromptSource
from repro.load.watchdog import Judge, Watchdog

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
    # that end together do not all start in one loop iteration (see repro/core/pacer.py). 0: unpaced.
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
    client: str = "aiohttp"  # aiohttp | httpx | openai | openai-async (repro/load/clients/)
    connections: str = "per-conversation"  # or pool=N, fresh: the aiohttp client only
    client_timeouts: str = "repro"  # or native: the library's own timeouts and retries
    # Which conversation numbers this driver runs (None: 0 .. conversations-1). A worker process of
    # a sharded run (repro/load/shards.py) runs its share under the run's global numbers.
    conversation_ids: tuple[int, ...] | None = None
    # A closed loop for `repro bench`: a conversation that ends its `rounds` is followed by a fresh
    # one (new history, new connection) in the same slot, numbered on (round rounds+1 is the next
    # conversation's first), until the driver is told to stop; nothing is "skipped" at the stop.
    until_stopped: bool = False


WAITING_FOR_A_CONNECTION = "waiting for a connection"


class RoundState:
    """A round in flight. Mutable and driver-internal: the read loop stamps it, the watchdog reads it."""

    __slots__ = (
        "conv", "round", "started", "last_progress", "phase", "events", "local", "reused", "idle_s", "server", "via",
        "stalled_at", "suspected_at", "scope", "first_byte", "first_token", "max_gap", "last_byte",
        "read_timed_out", "abandoned", "transport", "connection", "trickle_since", "trickle_reads", "client_wait",
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
        self.transport = None  # its connection's transport: the watchdog reads its socket at a stall
        self.connection: Connection | None = None
        # Reads that brought bytes but no SSE event (keep-alive comments, partial events) since
        # `trickle_since` (the last progress): how often a trickle would reset a per-read timeout.
        self.trickle_since: float | None = None
        self.trickle_reads = 0
        # What the client itself holds the round for, while it does; the stall clock stops meanwhile:
        # connecting (bounded by the connect timeout, a failure judged as such), a slot of its own pool
        # (its queue, bounded by the round deadline), an SDK's own back-off between retries.
        self.client_wait: str | None = WAITING_FOR_A_CONNECTION

    def trickle(self, now: float) -> None:
        if self.trickle_since != self.last_progress:
            self.trickle_since = self.last_progress
            self.trickle_reads = 0
        self.trickle_reads += 1

    def trickle_every(self) -> float | None:
        """Seconds between reads of bytes without progress since the last progress, if any came."""
        if self.trickle_since != self.last_progress or not self.trickle_reads or self.last_byte is None:
            return None
        return (self.last_byte - self.last_progress) / self.trickle_reads


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
        # No byte for this long ends a round even if a stall was never flagged or judged. The
        # watchdog enforces it, not the client's read timeout: aiohttp's sock_read re-arms a timer
        # on every chunk received (~6% of the driver's CPU at 256 streams) for a deadline that
        # never fires first.
        self._read_backstop = config.stall_after + config.judge_budget + 5.0
        self._clients: ClientFamily | None = None  # made in run(): aiohttp wants the running loop
        self._pacer = StartPacer(config.max_start_rate, config.start_burst) if config.max_start_rate > 0 else None
        self._watchdog = Watchdog(self.in_flight, now=self.now, emit=emit, judge=judge, stall_after=config.stall_after,
                                  judge_budget=config.judge_budget, read_backstop=self._read_backstop)

    def now(self) -> float:
        return time.monotonic() - self.origin

    async def run(self) -> list[RoundOutcome]:
        self._clients = clients = client_family(self)
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._watchdog.watch_stalls)
                tasks.start_soon(self._watchdog.watch_loop_lag)
                async with anyio.create_task_group() as conversations:
                    ids = self.config.conversation_ids
                    ids = range(self.config.conversations) if ids is None else ids
                    for position, conv in enumerate(ids):
                        # Spread over the whole ramp by position among this driver's conversations
                        # (a worker of a sharded run holds a share of them, and ramps its share alike).
                        conversations.start_soon(self._conversation, conv, position / len(ids))
                tasks.cancel_scope.cancel()
        finally:
            with anyio.move_on_after(1.0, shield=True):
                await clients.aclose()
        return self.outcomes

    @property
    def ramp_up(self) -> float:
        c = self.config
        return min(2.0, 0.002 * c.conversations) if c.ramp_up is None else c.ramp_up

    async def _conversation(self, conv: int, ramp_share: float) -> None:
        if ramp_share and self.ramp_up > 0:
            await anyio.sleep(self.ramp_up * ramp_share)
        first = 1
        while True:
            completed = await self._one_conversation(conv, first)
            first += self.config.rounds
            if not self.config.until_stopped or self.stop_requested:
                return
            if not completed:
                await anyio.sleep(0.5)  # a slot whose rounds all fail at once (a refused connection) must not spin

    async def _one_conversation(self, conv: int, first: int) -> bool:
        """Rounds `first` .. `first + rounds - 1` of one history and one client; whether any completed."""
        c = self.config
        history = History()
        client = self._clients.conversation(conv)
        last = first + c.rounds - 1
        completed = False
        try:
            for round_index in range(first, last + 1):
                if self.stop_requested:
                    if c.until_stopped:
                        return completed
                    self._skip(conv, round_index, "run stopped")
                    continue
                paced = 0.0
                if self._pacer is not None:
                    wait = self._pacer.reserve(time.monotonic())
                    if wait > 0:
                        before = time.monotonic()
                        await anyio.sleep(wait)
                        paced = time.monotonic() - before
                        if self.stop_requested:  # told to stop while it waited its turn: start nothing
                            if not c.until_stopped:
                                self._skip(conv, round_index, "run stopped")
                            continue
                # The agent loop (repro/load/conversation.py): a user turn, or the results of the tool
                # calls the last reply made; the prompts number turns from 1 in every conversation.
                history.start_round(self.prompts, conv, round_index - first + 1)
                outcome, reply, tool_calls = await self._round(client, conv, round_index, history, paced)
                self.outcomes.append(outcome)
                if outcome.status == "completed":
                    completed = True
                    history.finish_round(reply, tool_calls)
                else:
                    history.withdraw_question()
                    if c.on_failure == "retire":
                        if not c.until_stopped:
                            for later in range(round_index + 1, last + 1):
                                self._skip(conv, later, "conversation retired after a failed round")
                        return completed
                if c.think_time and round_index < last:
                    await anyio.sleep(c.think_time)
            return completed
        finally:
            # Shielded and bounded: a cancelled run still closes its sockets (closing is synchronous;
            # the wait is only for the transports to report it), and never hangs on it.
            with anyio.move_on_after(1.0, shield=True):
                await client.aclose()

    def _skip(self, conv: int, round_index: int, why: str) -> None:
        self.outcomes.append(RoundOutcome(conv, round_index, "skipped", error=why))

    async def _round(
        self, client: ConversationClient, conv: int, round_index: int, history: History, paced: float = 0.0,
    ) -> tuple[RoundOutcome, str, list[dict]]:
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
        if history.tools:  # never "tools": [] (OpenAI rejects an empty list)
            body["tools"] = history.tools

        reader = ChunkReader()
        error: tuple[str, str, int | None, str] | None = None
        scope: anyio.CancelScope | None = None
        try:
            # One scope per round, for three reasons to end it: the round deadline, and the
            # watchdog's two (an abandoned stall, the read backstop), which it marks on the state
            # before cancelling. One scope, not a fail_after inside a CancelScope: a round costs
            # a few microseconds less, which a thousand streams of short rounds notice.
            with anyio.CancelScope(deadline=anyio.current_time() + c.round_timeout) as scope:
                state.scope = scope
                error = await client.stream(body, state, reader)
            if scope.cancelled_caught and not _ended_by_stall(state):
                if state.read_timed_out:
                    error = (state.phase, f"ReadTimeout: no byte for {self._read_backstop:g} s", None, "timeout")
                elif state.client_wait is not None:
                    # Never connected: nothing was sent. Else an SDK's back-off after an attempt a hop answered.
                    never_sent = ": the request never left the client" if state.connection is None else ""
                    error = (state.phase, f"round deadline of {c.round_timeout:g} s passed while {state.client_wait}"
                             f"{never_sent}", None, "client-wait")
                else:
                    error = (state.phase, f"round deadline of {c.round_timeout:g} s (from its connection) passed",
                             None, "deadline")
        finally:
            if state.connection is not None:
                state.connection.released_at = time.monotonic()
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
                                error=f"stalled {state.phase}"), "", []
        if error is not None:
            phase, message, status, failure = error
            if status == 400 and history.tools:
                # vLLM without --enable-auto-tool-choice (and other servers without a tool parser)
                # refuse any request that carries tools: the one thing this round added.
                message += (f" (the request carried {len(history.tools)} tool definitions: a server without a "
                            "tool-call parser refuses them; drop --tools or enable the engine's tool calling)")
            self.emit(ev.RoundFailed(t=now, conv=conv, round=round_index, phase=phase, error=message,
                                     status=status, duration_s=round(duration, 6), events=state.events,
                                     failure=failure, local=state.local, reused=state.reused,
                                     idle_s=None if state.idle_s is None else round(state.idle_s, 3),
                                     server=state.server, via=state.via, last_progress_t=state.last_progress))
            return RoundOutcome(conv, round_index, "failed", ttft_s=ttft, duration_s=duration,
                                max_gap_s=state.max_gap, events=state.events, error=message), "", []
        text = "".join(reader.reply)
        tool_calls = reader.tool_calls
        mean_itl = None
        if state.first_token is not None and state.events > 2:
            mean_itl = (state.last_progress - state.first_token) / max(1, state.events - 2)
        self.emit(ev.RoundDone(
            t=now, conv=conv, round=round_index, status=200, reply_chars=len(text),
            completion_tokens=reader.completion_tokens, prompt_tokens=reader.prompt_tokens,
            ttfb_s=None if state.first_byte is None else round(state.first_byte - state.started, 6),
            ttft_s=None if ttft is None else round(ttft, 6), duration_s=round(duration, 6), events=state.events,
            max_gap_s=round(state.max_gap, 6), finish_reason=reader.finish_reason,
            tool_calls=len(tool_calls),
        ))
        return RoundOutcome(conv, round_index, "completed", ttft_s=ttft, duration_s=duration,
                            max_gap_s=state.max_gap, events=state.events, mean_itl_s=mean_itl), text, tool_calls

    def _connected(self, state: RoundState, connection: Connection, reused: bool) -> None:
        """The round has its connection (a kept-alive one, or a new one). Called on the loop's thread."""
        state.connection = connection
        state.local = connection.local
        state.reused = reused
        state.transport = connection.transport
        state.idle_s = connection.idle_s() if reused else None
        now = self.now()
        state.client_wait = None
        if state.first_byte is None:
            # The round deadline bounds the round on the wire: a wait in the client's own queue
            # (a pool slot, an SDK back-off) does not eat it. That wait had the deadline too, which
            # started counting at last_progress (the round's start, or its previous connection).
            # Moved by the time elapsed, not set from anyio.current_time(): this may run as a plain
            # loop callback (the sync SDK's thread hops here), where anyio finds no async context.
            if state.scope is not None:
                state.scope.deadline += now - state.last_progress
            # The stall clock starts when the round has a connection: time spent waiting for a slot
            # of the client's own pool (--connections pool=N) is the client's queue, not a silent
            # server. The wait is logged as pool_wait_s, and the round deadline still bounds it.
            state.last_progress = now
        self.emit(ev.RoundConnected(t=now, conv=state.conv, round=state.round, local=connection.local or "?",
                                    reused=reused, pool_wait_s=round(now - state.started, 6)))


def _ended_by_stall(state: RoundState) -> bool:
    """Whether a cancelled round was a stall: abandoned after its verdict, or cut by the read
    backstop while its stall was being judged. A round whose deadline passed mid-judgement (bytes
    may have resumed by then) is not: the deadline is what ended it."""
    return state.abandoned or (state.read_timed_out and state.stalled_at is not None)
