"""The multi-turn conversation driver: many agent-like conversations over keep-alive connections.

Each conversation streams through a client (repro/load/clients/: aiohttp by default, httpx, the
openai SDK async or sync), the way each agent of a harness owns its SDK client; every round
records which local port it used and whether the connection was reused, from the library's own
hooks. The aiohttp client pins one keep-alive connection per conversation unless
--connections says otherwise; the others keep their library's own pool.

anyio structures the driver: it runs on the asyncio backend, where aiohttp lives. Chunks are
decoded by repro/core/openai_chunks.py (the SDK clients: by the SDK itself).

A round's state and its transitions are repro/load/round.py's. Stalls are found by the watchdog
(repro/load/watchdog.py) from what the read loop stamps on each round: the time of the last SSE
event (progress; a keep-alive comment or a trickle of bytes is not) and of the last byte. It also
enforces a read backstop, so the clients get only connect deadlines, no read or total timeout
(unless --client-timeouts native keeps the library's own). The clients see the driver only
through RoundHooks (repro/load/clients/base.py).

Judging goes through one Judge (repro/load/watchdog.py): the watchdog hands it the stalls, the
driver each failed round, right after its RoundFailed, bounded by the judge budget; `run()` ends
once those judgements have.

Whoever runs the driver chooses the garbage-collector settings (repro/load/gc_policy.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import anyio.abc

from repro.core import events as ev
from repro.core.hop import api_url
from repro.core.pacer import StartPacer
from repro.core.wire_api import WIRE_APIS, Api
from repro.io.tls import Trust
from repro.load.clients import client_family
from repro.load.clients.base import ClientFamily, ClientOptions, ConversationClient, RoundHooks, json_encode
from repro.load.history import History
from repro.load.prompts import PromptSource
from repro.load.round import RoundFailureSeen, RoundOutcome, RoundState, TrackedConnection
from repro.load.watchdog import Judge, Watchdog
from repro.load.wire_bodies import request_body

Emit = Callable[[ev.Event], None]
# Makes the run's client family from the hooks, on the running loop (aiohttp wants it).
FamilyFactory = Callable[[RoundHooks], ClientFamily]


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
    api: Api = "chat"  # the wire API the conversations speak (repro/core/wire_api.py)
    connections: str = "per-conversation"  # or pool=N, fresh: the aiohttp client only
    client_timeouts: str = "repro"  # or native: the library's own timeouts and retries
    # Which conversation numbers this driver runs (None: 0 .. conversations-1). A worker process of
    # a sharded run (repro/load/shards.py) runs its share under the run's global numbers.
    conversation_ids: tuple[int, ...] | None = None
    # TLS trust for an https target (repro/io/tls.py): a CA file added to the system's, or no check.
    ca_file: str | None = None
    insecure: bool = False
    # A closed loop for `repro bench`: a conversation that ends its `rounds` is followed by a fresh
    # one (new history, new connection) in the same slot, numbered on (round rounds+1 is the next
    # conversation's first), until the driver is told to stop; nothing is "skipped" at the stop.
    until_stopped: bool = False


class Driver:
    def __init__(
        self,
        config: DriverConfig,
        prompts: PromptSource,
        emit: Emit,
        *,
        origin: float | None = None,
        judge: Judge | None = None,
        family: FamilyFactory | None = None,
    ) -> None:
        """`family` makes the client family (None: the one config.client names)."""
        self.config = config
        self.prompts = prompts
        self.emit = emit
        self.judge = judge
        self.in_flight: dict[tuple[int, int], RoundState] = {}
        self.outcomes: list[RoundOutcome] = []
        self.stop_requested = False
        # No byte for this long ends a round even if a stall was never flagged or judged. The
        # watchdog enforces it, not the client's read timeout: aiohttp's sock_read re-arms a timer
        # on every chunk received (~6% of the driver's CPU at 256 streams) for a deadline that
        # never fires first.
        self.read_backstop = config.stall_after + config.judge_budget + 5.0
        self.hooks = RoundHooks(
            url=api_url(config.base_url, config.api),
            options=ClientOptions(client=config.client, api_key=config.api_key, connect_timeout=config.connect_timeout,
                                  keepalive_expiry=config.keepalive_expiry, connections=config.connections,
                                  client_timeouts=config.client_timeouts, conversations=config.conversations,
                                  trust=Trust(config.ca_file, config.insecure), api=config.api),
            origin=time.monotonic() if origin is None else origin,
            emit=emit,
            connected=self._connected,
            read_backstop=self.read_backstop,
        )
        self._make_family = client_family if family is None else family
        self._clients: ClientFamily | None = None  # made in run(): aiohttp wants the running loop
        self._judgements: anyio.abc.TaskGroup | None = None  # failed rounds being judged, in run()
        self._pacer = StartPacer(config.max_start_rate, config.start_burst) if config.max_start_rate > 0 else None
        self._watchdog = Watchdog(self.in_flight, now=self.now, emit=emit, judge=judge, stall_after=config.stall_after,
                                  judge_budget=config.judge_budget, read_backstop=self.read_backstop)

    def now(self) -> float:
        return self.hooks.now()

    def cpu_seconds(self) -> list[float | None]:
        """No process of its own: the rounds run on the caller's, whose CPU the caller reads."""
        return []

    async def run(self) -> list[RoundOutcome]:
        self._clients = clients = self._make_family(self.hooks)
        try:
            # Outside the rounds' group: a failure judged as the last round ends is waited for
            # (each judgement bounded by the judge budget), not cut when the rounds are done.
            async with anyio.create_task_group() as self._judgements:
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
            self._judgements = None
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
                # The agent loop (repro/load/history.py): a user turn, or the results of the tool
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
        body = request_body(c.api, c.model, history.messages, history.tools, c.max_tokens)
        reader = WIRE_APIS[c.api].reader()
        error: RoundFailureSeen | None = None
        scope: anyio.CancelScope | None = None
        try:
            # One scope per round, for three reasons to end it: the round deadline, and the
            # watchdog's two (an abandoned stall, the read backstop), which it marks on the state
            # before cancelling. One scope, not a fail_after inside a CancelScope: a round costs
            # a few microseconds less, which a thousand streams of short rounds notice.
            with anyio.CancelScope(deadline=anyio.current_time() + c.round_timeout) as scope:
                state.bounded_by(scope)
                error = await client.stream(body, state, reader)
            if scope.cancelled_caught and not state.ended_by_stall:
                if state.read_timed_out:
                    error = RoundFailureSeen(state.phase, f"ReadTimeout: no byte for {self.read_backstop:g} s", None,
                                       "timeout")
                elif state.client_wait is not None:
                    # Never connected: nothing was sent. Else an SDK's back-off after an attempt a hop answered.
                    never_sent = ": the request never left the client" if state.connection is None else ""
                    error = RoundFailureSeen(state.phase, f"round deadline of {c.round_timeout:g} s passed while "
                                       f"{state.client_wait}{never_sent}", None, "client-wait")
                else:
                    error = RoundFailureSeen(state.phase, f"round deadline of {c.round_timeout:g} s (from its connection) "
                                       "passed", None, "deadline")
        finally:
            state.released()
            del self.in_flight[key]

        now = self.now()
        duration = now - state.started
        ttft = state.first_token - state.started if state.first_token is not None else None
        if scope is not None and scope.cancelled_caught and state.ended_by_stall:
            self.emit(ev.RoundAbandoned(t=now, conv=conv, round=round_index, phase=state.phase,
                                        stalled_for_s=round(now - state.last_progress, 3),
                                        duration_s=round(duration, 6), events=state.events))
            return RoundOutcome(conv, round_index, "stalled", ttft_s=ttft, duration_s=duration,
                                max_gap_s=max(state.max_gap, now - state.last_progress), events=state.events,
                                error=f"stalled {state.phase}"), "", []
        if error is not None:
            message = error.message
            if error.status == 400 and history.tools:
                # vLLM without --enable-auto-tool-choice (and other servers without a tool parser)
                # refuse any request that carries tools: the one thing this round added.
                message += (f" (the request carried {len(history.tools)} tool definitions: a server without a "
                            "tool-call parser refuses them; drop --tools or enable the engine's tool calling)")
            failed = ev.RoundFailed(t=now, conv=conv, round=round_index, phase=error.phase, error=message,
                                    status=error.status, duration_s=round(duration, 6), events=state.events,
                                    failure=error.failure, local=state.local, reused=state.reused,
                                    idle_s=None if state.idle_s is None else round(state.idle_s, 3),
                                    server=state.server, via=state.via, last_progress_t=state.last_progress,
                                    answer=error.answer,
                                    # the body as the byte-reading clients encode it (the SDK's own encoding
                                    # is the same compact JSON): what a hop's body-size limit measured
                                    request_bytes=len(json_encode(body)) if error.failure == "http" else None,
                                    tool_definitions=len(history.tools or ()) if error.failure == "http" else None)
            self.emit(failed)
            if self.judge is not None and self._judgements is not None:
                self._judgements.start_soon(self._judge_failure, failed)
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

    def _connected(self, state: RoundState, connection: TrackedConnection, reused: bool) -> None:
        """The round has its connection (a kept-alive one, or a new one). Called on the loop's thread."""
        now = self.now()
        state.connected(connection, reused, now)
        self.emit(ev.RoundConnected(t=now, conv=state.conv, round=state.round, local=connection.local or "?",
                                    reused=reused, pool_wait_s=round(now - state.started, 6)))

    async def _judge_failure(self, failed: ev.RoundFailed) -> None:
        with anyio.move_on_after(self.config.judge_budget):
            await self.judge.failed(failed)
