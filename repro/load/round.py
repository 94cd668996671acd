"""A round's state machine: everything that changes a round's state lives here.

A round is one model call of a conversation, from its start to its end. Its state (RoundState)
is stamped by the client's read loop, watched by the watchdog and read by the driver when the
round ends; every change goes through one method per transition, so what a round can go through
reads in one place:

    new ── bounded_by (the round deadline's scope) ── waiting for a connection (the client's own wait)
    connected ──> headers (the first byte) ──> received | trickle per read (progressed per SDK chunk) ──> end
    client_waiting: the client holds the round again (an SDK's back-off before its retry)
    silent on the wire: suspected ──> stalled ──> resumed (bytes came back) | abandon (judged stuck)
    time_out_read: no byte for the read backstop, stall or not
    released: the round ended, whatever ended it; its connection is idle from then on

The per-read transitions (`received`, `trickle`) are the hot path of every stream: plain
attribute stamps, no allocation.

Also here: how a round failed (RoundFailureSeen, from the clients) and how it ended (RoundOutcome, for
the driver's callers), and the connection a round holds (TrackedConnection).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import anyio

from repro.core.error_shapes import ErrorAnswer
from repro.core.kinds import Phase, RoundFailure

WAITING_FOR_A_CONNECTION = "waiting for a connection"


class TrackedConnection:
    """One TCP connection as the driver knows it: where it is, and when its last round let go of it
    (a reused connection's idle time tells a keep-alive race from a reset)."""

    __slots__ = ("local", "transport", "released_at")

    def __init__(self, local: str | None, transport: Any) -> None:
        self.local = local
        self.transport = transport  # anything with get_extra_info("socket"): the watchdog reads it at a stall
        self.released_at: float | None = None

    def idle_s(self) -> float | None:
        return None if self.released_at is None else time.monotonic() - self.released_at


@dataclass(frozen=True, slots=True)
class RoundFailureSeen:
    """How a round failed, as its client saw it: the RoundFailed event says it to the run log."""

    phase: Phase
    message: str  # one line for people, secret-free
    status: int | None  # the HTTP status, when an answer came
    failure: RoundFailure
    answer: ErrorAnswer | None = None  # a non-200 answer's body and identifying headers, bounded


@dataclass
class RoundOutcome:
    conv: int
    round: int
    status: str  # completed | failed | stalled | skipped
    ttft_s: float | None = None
    duration_s: float = 0.0
    max_gap_s: float | None = 0.0  # None: not read (a wrapped harness's round)
    events: int | None = 0
    mean_itl_s: float | None = None
    error: str | None = None


class RoundState:
    """A round in flight: its clocks, where it is, and why it ended if it was cut. Changed only by
    its methods; the watchdog and the driver read its fields."""

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
        self.phase: Phase = "before-first-byte"
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
        self.transport: Any = None  # its connection's transport: the watchdog reads its socket at a stall
        self.connection: TrackedConnection | None = None
        # Reads that brought bytes but no SSE event (keep-alive comments, partial events) since
        # `trickle_since` (the last progress): how often a trickle would reset a per-read timeout.
        self.trickle_since: float | None = None
        self.trickle_reads = 0
        # What the client itself holds the round for, while it does; the stall clock stops meanwhile:
        # connecting (bounded by the connect timeout, a failure judged as such), a slot of its own pool
        # (its queue, bounded by the round deadline), an SDK's own back-off between retries.
        self.client_wait: str | None = WAITING_FOR_A_CONNECTION

    # --- the driver ---------------------------------------------------------------------------

    def bounded_by(self, scope: anyio.CancelScope) -> None:
        """The scope that ends the round: its deadline, and the watchdog's cancel."""
        self.scope = scope

    def connected(self, connection: TrackedConnection, reused: bool, now: float) -> None:
        """The round has its connection (a kept-alive one, or a new one). Runs on the loop's thread."""
        self.connection = connection
        self.local = connection.local
        self.reused = reused
        self.transport = connection.transport
        self.idle_s = connection.idle_s() if reused else None
        self.client_wait = None
        if self.first_byte is None:
            # The round deadline bounds the round on the wire: a wait in the client's own queue
            # (a pool slot, an SDK back-off) does not eat it. That wait had the deadline too, which
            # started counting at last_progress (the round's start, or its previous connection).
            # Moved by the time elapsed, not set from anyio.current_time(): this may run as a plain
            # loop callback (the sync SDK's thread hops here), where anyio finds no async context.
            if self.scope is not None:
                self.scope.deadline += now - self.last_progress
            # The stall clock starts when the round has a connection: time spent waiting for a slot
            # of the client's own pool (--connections pool=N) is the client's queue, not a silent
            # server. The wait is logged as pool_wait_s, and the round deadline still bounds it.
            self.last_progress = now

    def released(self) -> None:
        """The round ended: its connection (if it got one) is idle from now on."""
        if self.connection is not None:
            self.connection.released_at = time.monotonic()

    @property
    def ended_by_stall(self) -> bool:
        """Whether a cancelled round was a stall: abandoned after its verdict, or cut by the read
        backstop while its stall was being judged. A round whose deadline passed mid-judgement (bytes
        may have resumed by then) is not: the deadline is what ended it."""
        return self.abandoned or (self.read_timed_out and self.stalled_at is not None)

    # --- the client ---------------------------------------------------------------------------

    def client_waiting(self, why: str) -> None:
        """The client holds the round again (an SDK's back-off before it retries): no hop is silent."""
        self.client_wait = why

    def headers(self, now: float) -> None:
        """The response's headers arrived: the first byte; whatever the client waited for is over."""
        self.first_byte = self.last_byte = self.last_progress = now
        self.client_wait = None
        self.phase = "mid-stream"

    def answered_by(self, server: str | None, via: str | None) -> None:
        """An answer other than a stream: its Server and Via headers name the hop that made it."""
        self.server, self.via = server, via

    def trickle(self, now: float) -> None:
        """A read of bytes that carried no SSE event (a keep-alive comment, part of an event)."""
        self.last_byte = now
        if self.trickle_since != self.last_progress:
            self.trickle_since = self.last_progress
            self.trickle_reads = 0
        self.trickle_reads += 1

    def received(self, now: float, seq: int, chars: int, done: bool) -> None:
        """A read of bytes that carried SSE events, `seq` of them so far: bytes and progress at once."""
        self.last_byte = now
        self.progressed(now, seq, chars, done)

    def progressed(self, now: float, seq: int, chars: int, done: bool) -> None:
        """An SSE event handed over by an SDK, `seq` so far: progress only (its transport stamped
        the bytes as they came, with `trickle`)."""
        gap = now - self.last_progress
        if gap > self.max_gap:
            self.max_gap = gap
        self.last_progress = now
        self.events = seq
        if done:
            self.phase = "after-last-event"
        if chars and self.first_token is None:
            self.first_token = now

    # --- the watchdog -------------------------------------------------------------------------

    def suspected(self, now: float) -> None:
        """Silent long enough for the judge to start gathering evidence ahead of the trigger."""
        self.suspected_at = now

    def stalled(self, now: float) -> None:
        """Silent past the stall trigger: flagged, to be judged while the stream is still open."""
        self.stalled_at = now

    def resumed(self) -> None:
        """Bytes arrived while the stall was judged: slow, not stuck; the round goes on."""
        self.stalled_at = None

    def abandon(self) -> None:
        """The judged stall ends the round."""
        if self.scope is not None:
            self.abandoned = True
            self.scope.cancel()

    def time_out_read(self) -> None:
        """No byte for the read backstop: the round ends, stall or not."""
        self.read_timed_out = True
        if self.scope is not None:
            self.scope.cancel()

    def trickle_every(self) -> float | None:
        """Seconds between reads of bytes without progress since the last progress, if any came."""
        if self.trickle_since != self.last_progress or not self.trickle_reads or self.last_byte is None:
            return None
        return (self.last_byte - self.last_progress) / self.trickle_reads
