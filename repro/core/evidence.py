"""What a verdict is judged from, and how it is read: the evidence of one stalled or failed round
(each hop's probe samples and fresh canary, the driver's own state, the harness's sockets), each
hop's samples split at the moment the round stopped progressing (after it: the present; before
it: history), and the evidence entries (hop, signal, value, time) every sentence of a verdict
is made from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.text import number
from repro.core.thread_state import ProcessThreads

Fact = dict[str, Any]  # {hop, signal, value, at} and its typed fields (see fact): one evidence entry


@dataclass(frozen=True)
class HopEvidence:
    """One hop around the stall: its probe samples over the window and a fresh canary."""

    name: str
    role: str  # proxy | router | engine
    samples: tuple[ev.ProbeSample, ...] = ()  # oldest first
    canary: ev.CanaryResult | None = None  # fresh connection straight to this hop
    # When its metrics page last answered in the run (or watch) as a whole, whatever the window:
    # a page read long before this stall's window was still seen answering (None: never).
    page_answered_t: float | None = None
    wall_at_zero: float | None = None  # the wall clock at t=0 of its run (its header), to say when in words


@dataclass(frozen=True)
class Evidence:
    stall: ev.RoundStalled  # stalled_for_s counts up to the moment the evidence was collected
    hops: tuple[HopEvidence, ...]  # ordered from the client side, the first is what the driver talks to
    stall_after: float
    driver_in_flight: int = 1
    loop_lag_p99_ms: float | None = None  # the loop that drove this round
    # A sharded run's parent: it drives no round but reads the hops and times the canaries.
    judge_loop_lag_p99_ms: float | None = None
    flows: tuple[dict[str, Any], ...] = ()  # the proxy flow-log records of this round's connection
    # TCP connections' kernel state: this round's own socket (driver), or a harness's (triage --pid)
    sockets: tuple[ev.SocketSample, ...] = ()
    failure: ev.RoundFailed | None = None  # set when the round failed rather than stalled
    # A failed round's conversation: its latest round starts (this round's last) and the last
    # round of it that was answered in full: how its request grew, and when it crossed a limit.
    sent: tuple[ev.RoundStarted, ...] = ()
    last_answered: int | None = None
    # A harness's threads, read from outside (triage --pid): where each one waits; every read, oldest first.
    threads: tuple[ProcessThreads, ...] = ()
    # False: no round was watched (triage): `stall` is a stand-in whose phase and duration were not
    # observed; the verdict takes them from the harness's sockets, or leaves them unknown.
    round_watched: bool = True


def fact(hop: str, signal: str, value: str, at: float | None, **typed: int | bool) -> Fact:
    """An evidence entry: its words (`value`) for people, and beside them the typed fields a reader
    decides by, set here where the words are made, never read back from them: a fresh canary's
    `ok` and `status` (the HTTP status it got, when one came), the `pid` whose socket an entry
    shows (a process triage read, named first in the words), `restates` (True: the words begin
    with the signal itself, "round failed: ..."). A field not known is left out."""
    entry = {"hop": hop, "signal": signal, "value": value, "at": None if at is None else round(at, 3)}
    return entry | {k: v for k, v in typed.items() if v is not None}


# --- a hop's samples, split at the moment the round stopped progressing -----------------------

PROGRESS_COUNTERS = ("itl_count", "gen_tokens_total")


@dataclass(frozen=True)
class Reading:
    """What a hop's metrics say about the stall. `present` is the latest readable sample taken
    after the round stopped progressing; `history` the latest one from before, which describes
    the past only."""

    present: ev.ProbeSample | None
    history: ev.ProbeSample | None
    went_silent: ev.ProbeSample | None  # the last failed sample, when every sample since the stall failed
    progress: float | None  # counter movement per second since the stall; None: not measurable
    # When the page last answered up to the stall: `history`'s time, or, before the window, the
    # run's own record of it (HopEvidence.page_answered_t). None: never seen answering.
    answered_t: float | None = None
    stall_t: float = 0.0  # the moment the round stopped progressing, which answered_t is before
    answered_wall: float | None = None  # answered_t on the wall clock (None: the run's header not read)

    @property
    def busy(self) -> bool:
        s = self.present.snapshot if self.present else None
        return s is not None and ((s.running or 0) > 0 or (s.queued or 0) > 0)

    @property
    def idle(self) -> bool:
        """Gauges read since the stall show nothing running and nothing queued: both read (a queue
        not read is not an empty one)."""
        s = self.present.snapshot if self.present else None
        return s is not None and s.running == 0 and s.queued == 0


def read_hop(hop: HopEvidence, since: float) -> Reading:
    fresh = [s for s in hop.samples if s.t > since]
    readable = [s for s in fresh if s.snapshot.ok]
    history = next((s for s in reversed(hop.samples) if s.t <= since and s.snapshot.ok), None)
    silent = fresh[-1] if fresh and not readable else None
    answered = history.t if history is not None else (
        hop.page_answered_t if hop.page_answered_t is not None and hop.page_answered_t <= since else None)
    wall = None if answered is None or hop.wall_at_zero is None else hop.wall_at_zero + answered
    return Reading(readable[-1] if readable else None, history, silent, progress(readable, history),
                   answered_t=answered, stall_t=since, answered_wall=wall)


def counter(sample: ev.ProbeSample) -> float | None:
    for name in PROGRESS_COUNTERS:
        value = getattr(sample.snapshot, name)
        if value is not None:
            return value
    return None


def progress(readable: Sequence[ev.ProbeSample], before: ev.ProbeSample | None) -> float | None:
    """Counter movement per second among samples taken since the stall. With a single one, the
    sample before the stall can show that nothing moved (a counter only grows), never that
    something did: that movement may predate the stall."""
    if len(readable) >= 2:
        first, last = readable[0], readable[-1]
        a, b = counter(first), counter(last)
        span = last.t - first.t
        if a is None or b is None or span <= 0:
            return None
        return max(0.0, (b - a) / span)
    if len(readable) == 1 and before is not None:
        a, b = counter(before), counter(readable[0])
        if a is not None and b is not None and b <= a:
            return 0.0
    return None


def recent_seconds_per_token(samples: Sequence[ev.ProbeSample]) -> float | None:
    """Mean inter-token latency over the last span in which the ITL histogram moved.

    Tells an engine that is slow per token (each step slower than the trigger, so a window can
    hold no token at all) from one that stopped: a hang keeps the last healthy mean."""
    usable = [s.snapshot for s in samples
              if s.snapshot.ok and s.snapshot.itl_count is not None and s.snapshot.itl_sum is not None]
    for newer, older in zip(reversed(usable), list(reversed(usable))[1:], strict=False):
        count = newer.itl_count - older.itl_count
        if count > 0:
            return max(0.0, (newer.itl_sum - older.itl_sum) / count)
    return None


def gauge_text(sample: ev.ProbeSample) -> str | None:
    """The running/queued gauges as read: a gauge the page did not give is left out (never `?`);
    None when it gave neither."""
    s = sample.snapshot
    read = [f"{number(value)} {name}" for value, name in ((s.running, "running"), (s.queued, "queued"))
            if value is not None]
    return ", ".join(read) + (" (stale gauge)" if s.stale else "") if read else None


def silent_page_text(reading: Reading) -> str:
    """What a page that answered no read since the stall did: stop (when it last answered, from
    the whole run's record, not only this stall's window), or never answer at all."""
    if reading.answered_t is not None:
        at = ("" if reading.answered_wall is None
              else f"at {datetime.fromtimestamp(reading.answered_wall, UTC):%H:%M:%S} UTC, ")
        return f"stopped answering (last answered {at}{reading.stall_t - reading.answered_t:.1f} s before the stall)"
    return "answered no read (never seen answering)"


def metrics_facts(name: str, reading: Reading, has_page: bool, stall: ev.RoundStalled) -> list[Fact]:
    """The gauges as evidence: read since the stall, history from before, or not read."""
    facts = []
    if reading.present is not None:
        gauges = gauge_text(reading.present)
        if gauges is not None:
            facts.append(fact(name, "running/queued", gauges, reading.present.t))
        elif reading.present.snapshot.in_flight is not None:
            facts.append(fact(name, "in flight", number(reading.present.snapshot.in_flight), reading.present.t))
        else:
            facts.append(fact(name, "metrics page", "read since the stall; it gives no running, queued or in-flight "
                              "count", reading.present.t))
    elif reading.went_silent is not None:
        # "Stopped answering" only of a page seen answering before (a run's history, or earlier in
        # the same triage): one never seen answering may have a wrong URL as well as a frozen owner.
        facts.append(fact(name, "metrics page", silent_page_text(reading)
                          + (f" ({reading.went_silent.snapshot.error})" if reading.went_silent.snapshot.error else ""),
                          reading.went_silent.t))
    else:
        facts.append(fact(name, "metrics page", "not read since the stall" if has_page else "none given: not read",
                          stall.t))
    if reading.present is None and reading.history is not None and gauge_text(reading.history) is not None:
        before = stall.last_progress_t - reading.history.t
        facts.append(fact(name, "running/queued before the stall",
                          f"{gauge_text(reading.history)}, {before:.1f} s before it (history)", reading.history.t))
    if reading.progress is not None:
        facts.append(fact(name, "token progress since the stall", f"{reading.progress:.1f}/s",
                          reading.present.t if reading.present else stall.t))
    return facts


# --- canaries ---------------------------------------------------------------------------------


FRESH_CANARY = "fresh canary"  # the words a canary entry's value begins with


def canary_status(outcome: CanaryOutcome) -> int | None:
    """The HTTP status a canary is said to have got: an answer in full without one is a 200."""
    return (outcome.status or 200) if outcome.ok else outcome.status


def canary_text(canary: ev.CanaryResult | None) -> str:
    if canary is None:
        return "no canary"
    outcome = canary.outcome
    if outcome.ok:
        return f"{FRESH_CANARY} {canary_status(outcome)} in {outcome.total_s:.2f} s"
    return f"{FRESH_CANARY} failed ({outcome.error or 'status ' + str(outcome.status)})"


def health_text(canary: ev.CanaryResult) -> str:
    status = canary.outcome.health_status
    return "no answer" if status is None else str(status)


def canary_facts(name: str, canary: ev.CanaryResult | None) -> list[Fact]:
    if canary is None:
        return []
    return [fact(name, "canary", canary_text(canary), canary.t, ok=canary.outcome.ok,
                 status=canary_status(canary.outcome)),
            fact(name, "/health", health_text(canary), canary.t)]


def canary_ok(hop: HopEvidence) -> bool:
    return hop.canary is not None and hop.canary.outcome.ok


def canary_timed_out(canary: ev.CanaryResult | None) -> bool:
    """Connected, then no answer at all within the deadline: not a status, not a reset."""
    return canary is not None and canary.outcome.failure == "timeout" and canary.outcome.status is None
