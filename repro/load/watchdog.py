"""The stall watchdog and the event-loop lag monitor, beside the driver's rounds.

Stalls are found by one watchdog task, not a timer per read: the read loop only stamps the
time of the last SSE event (progress; a keep-alive comment or a trickle of bytes is not), and
the watchdog flags a round silent for `stall_after` seconds while its stream is still open, so
the stall can be judged live (canaries, an extra probe sample) before the driver gives up on
it. The same watchdog enforces a read backstop behind that (no byte at all for longer than a
stall plus its judging), so aiohttp needs no read timeout.

Right after flagging a stall it reads the round's own socket once (ev.SocketSample: bytes left
unread, a request not acknowledged, seconds since the last byte), while the stream is still open.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import anyio

from probes.sockets import own_socket_state
from repro.core import events as ev

if TYPE_CHECKING:
    from repro.load.round import RoundState

Emit = Callable[[ev.Event], None]


class Judge(Protocol):
    """The one way into judging a round. The watchdog calls `prepare` when a round has been silent
    for the trigger minus `lead_s` (evidence takes time to gather), then `stalled` when the trigger
    passes, while the stream is still open; the driver calls `failed` right after a round failed
    (ev.RoundFailed). Each call is bounded by the caller (the judge budget)."""

    lead_s: float

    async def prepare(self, t: float) -> None: ...

    async def stalled(self, stall: ev.RoundStalled) -> None: ...

    async def failed(self, failure: ev.RoundFailed) -> None: ...


class Watchdog:
    """Watches the rounds in flight (the driver's own dict, read live) on the driver's clock.

    With no judge, a stall is still flagged (ev.RoundStalled) and its round abandoned at once,
    and the read backstop still ends rounds that receive nothing.
    """

    def __init__(
        self,
        in_flight: dict[tuple[int, int], RoundState],
        *,
        now: Callable[[], float],
        emit: Emit,
        judge: Judge | None,
        stall_after: float,
        judge_budget: float,
        read_backstop: float,
    ) -> None:
        self.in_flight = in_flight
        self.now = now
        self.emit = emit
        self.judge = judge
        self.stall_after = stall_after
        self.judge_budget = judge_budget
        self.read_backstop = read_backstop

    async def watch_stalls(self) -> None:
        stall_after = self.stall_after
        tick = min(0.1, max(0.02, stall_after / 20))
        judge = self.judge
        # A judge that needs time to gather evidence (canaries have deadlines) starts that
        # long before the trigger, so the verdict lands right at it, not a canary timeout later.
        lead = float(judge.lead_s) if judge is not None else 0.0
        prepare = judge.prepare if judge is not None else None
        suspect_after = max(stall_after / 2, stall_after - lead)
        backstop = self.read_backstop
        in_flight = self.in_flight
        async with anyio.create_task_group() as judges:
            while True:
                await anyio.sleep(tick)
                now = self.now()
                for state in list(in_flight.values()):
                    if state.client_wait is not None:
                        # The client holds it (connecting, its own pool, its own back-off): no hop
                        # has been silent yet. Its own deadlines bound the wait.
                        continue
                    silent = now - state.last_progress
                    if (prepare is not None and silent >= suspect_after and state.stalled_at is None
                            and (state.suspected_at is None or state.suspected_at < state.last_progress)):
                        state.suspected(now)
                        judges.start_soon(prepare, now)
                    if state.stalled_at is None and silent >= stall_after:
                        state.stalled(now)
                        stall = ev.RoundStalled(
                            t=now, conv=state.conv, round=state.round, phase=state.phase,
                            stalled_for_s=round(now - state.last_progress, 3), started_t=state.started,
                            last_progress_t=state.last_progress, last_byte_t=state.last_byte,
                            local=state.local, reused=state.reused, events=state.events, in_flight=len(in_flight),
                            trickle_every_s=state.trickle_every(),
                        )
                        self.emit(stall)
                        sample = socket_sample(state, now)
                        if sample is not None:
                            self.emit(sample)
                        judges.start_soon(self._judge_then_abandon, state, stall)
                    # Before any byte: since the round got its connection (last_progress; see RoundState.connected).
                    last_byte = state.last_byte if state.last_byte is not None else state.last_progress
                    if now - last_byte >= backstop and not state.read_timed_out and state.scope is not None:
                        state.time_out_read()

    async def _judge_then_abandon(self, state: RoundState, stall: ev.RoundStalled) -> None:
        if self.judge is not None:
            with anyio.move_on_after(self.judge_budget):
                await self.judge.stalled(stall)
        if state.last_progress > stall.last_progress_t:
            # Bytes arrived while we judged: slow, not stuck. Let the round go on.
            self.emit(ev.Note(t=self.now(), level="info",
                              message=f"conversation {state.conv} round {state.round} resumed after a stall"))
            state.resumed()
            return
        state.abandon()

    async def watch_loop_lag(self) -> None:
        """Our own event-loop lag: if the driver starves itself, a stall may be ours."""
        await measure_loop_lag(lambda max_ms, p99_ms: self.emit(ev.LoopLag(
            t=self.now(), max_ms=max_ms, p99_ms=p99_ms, in_flight=len(self.in_flight))))


async def measure_loop_lag(report: Callable[[float, float], None], interval: float = 0.05,
                           report_every: float = 1.0) -> None:
    """The running event loop's lag, as report(max ms, p99 ms) about every `report_every` seconds."""
    # Measured on time.monotonic, not on a run's clock: the lag is how far the loop's own sleep
    # overshot, whatever clock stamps the events.
    lags: list[float] = []

    def flush() -> None:
        lags.sort()
        p99 = lags[min(len(lags) - 1, math.ceil(0.99 * len(lags)) - 1)]
        report(round(lags[-1] * 1000, 3), round(p99 * 1000, 3))
        lags.clear()

    last_report = time.monotonic()
    try:
        while True:
            before = time.monotonic()
            await anyio.sleep(interval)
            after = time.monotonic()
            lags.append(max(0.0, after - before - interval))
            if after - last_report >= report_every:
                flush()
                last_report = after
    finally:
        # The last partial interval too: a run shorter than `report_every` still reports its lag.
        if lags:
            flush()


def socket_sample(state: RoundState, now: float) -> ev.SocketSample | None:
    """The stalled round's own socket as the kernel sees it (unread bytes, unacknowledged request,
    time since the last byte), read once, when the stall is flagged: a getsockopt and two ioctls,
    no I/O that can block. None when the round has no connection yet (still connecting or waiting
    for one) or its socket is gone; never raises: a stall is flagged whatever this finds."""
    transport = state.transport
    if transport is None:
        return None
    try:
        sock = transport.get_extra_info("socket")
        if sock is None or sock.fileno() < 0:
            return None
        return ev.SocketSample(t=now, socket=own_socket_state(sock), conv=state.conv, round=state.round)
    except Exception:
        return None
