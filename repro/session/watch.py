"""One `repro watch`: canary conversations against a stack until a signal, the same live judge as
`repro run` for their stalls and failures, and what it all shows kept in a WatchStatus that the
HTTP server (repro/session/watch_server.py) exposes as metrics, a page and JSON.

A watch is a sequence of cycles. In each, one Driver per watched stack runs its canary
conversations (multi-round, kept-alive connections, a think time between rounds: what a harness
does, the one traffic shape a wedged keep-alive connection stalls); the cycle ends when they have
done their --rounds, and the next cycle starts fresh ones, numbered on. A Driver per cycle keeps
the history and the Driver's outcome list bounded by one cycle: the status keeps counts only.

A stack is what one set of canary conversations goes through, judged together: with --target or
--hop given, one stack (the first hop is what the conversations talk to, every hop is probed and
canaried); with hops discovered from Prometheus and no --target, one stack per discovered engine,
talked to directly, so that a verdict's `where` is that engine.

It never dies of what it watches: a hop that refuses, restarts, disappears or answers garbage
ends rounds as failed or stalled (evidence, judged), canaries as down; an exception out of a cycle
or a discovery is logged as an ev.Note and the watch goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import math
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
from rich.console import Console

from probes.sampler import Sampler
from repro.core import events as ev
from repro.core.errors import ReproError
from repro.core.evidence_book import EvidenceBook
from repro.core.hop import Hop
from repro.core.watch_status import WatchStatus
from repro.io.rotating_log import (
    DEFAULT_KEEP_BYTES,
    DEFAULT_KEEP_SECONDS,
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_SEGMENT_SECONDS,
    RotatingRunLog,
)
from repro.judging.live_judge import LiveJudge
from repro.load.driver import Driver, DriverConfig
from repro.load.prompts import PromptSource
from repro.reporting.prose import WIDTH, fitted
from repro.reporting.terminal import verdict_tally
from repro.reporting.watch_metrics import watch_registry
from repro.session.lifecycle import Session
from repro.session.watch_server import bound_address, serve

# A cycle that ended this fast (every round refused at once) waits the rest of it before the next:
# a dead hop costs a round a second at most, not a spin.
MIN_CYCLE_S = 1.0
LOOP_LAG_TICK_S = 0.1
READ_ONLY = "read-only"  # the key of the stack of discovered hops that take no conversation (only read)
VERDICTS_KEPT = 100  # the closing summary's verdicts: the last ones (every one is in the run log)


def default_watch_dir() -> Path:
    return Path("runs") / f"watch-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


@dataclass(frozen=True)
class LogBounds:
    """The rotating run log's bounds (repro/io/rotating_log.py has why these defaults)."""

    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    segment_seconds: float = DEFAULT_SEGMENT_SECONDS
    keep_seconds: float = DEFAULT_KEEP_SECONDS
    keep_bytes: int = DEFAULT_KEEP_BYTES


@dataclass
class WatchSettings:
    driver: DriverConfig  # base_url and model are set per stack; conversations: per stack
    prompts: PromptSource
    sock: socket.socket  # the --listen socket, bound by the command (a port in use is a usage error there)
    # target URL -> (model, listed): the first model it lists, or (unlisted_model, False) when it did
    # not answer; a ReproError when it answered without a model list. Blocking: run in a thread.
    model_of: Callable[[str], tuple[str, bool]] = lambda url: ("", False)
    unlisted_model: str = "unlisted"
    hops: list[Hop] = field(default_factory=list)  # given (--hop, --topology, --target), client side first
    prometheus: str | None = None  # discovery: Prometheus's base URL
    selector: str = '{job="sglang"}'
    name_label: str = "instance"
    discover_every: float = 30.0
    per_engine: int = 1  # conversations per discovered engine (no --target)
    canary_every: float = 15.0
    canary_timeout: float = 3.0
    probe_interval: float = 2.0
    duration: float | None = None  # None: until a signal
    out: Path | None = None
    log: LogBounds = field(default_factory=LogBounds)


@dataclass
class Stack:
    """What one set of canary conversations goes through, with its judge."""

    name: str
    hops: list[Hop]  # client side first: hops[0] is what the conversations talk to
    conversations: int
    model: str
    model_listed: bool  # False: the target did not list its models (asked again each cycle)
    book: EvidenceBook
    judge: LiveJudge
    sampler: Sampler | None
    sampler_scope: anyio.CancelScope | None = None
    driver: Driver | None = None  # this cycle's

    @property
    def target(self) -> str:
        return self.hops[0].url


@dataclass
class Conversation:
    """A canary conversation of the current cycle: the hops it goes through, when its first round
    started (wall clock), how many of its rounds completed."""

    path: frozenset[str]
    started_at: float | None = None
    completed: int = 0


@dataclass
class Cost:
    """What the watch sends, at most, per minute (None: unbounded, --think 0)."""

    requests_per_min: float | None
    completion_tokens_per_min: float | None
    prompt_tokens_per_min: float | None
    canary_requests_per_min: float
    scrapes_per_min: float

    def as_status(self) -> dict[str, float]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def watch_cost(*, conversations: int, rounds: int, think: float, max_tokens: int, prompt_chars: int,
               hops: int, canary_every: float, metric_hops: int, probe_interval: float) -> Cost:
    """Upper bounds from the settings: a conversation starts a round at most once per think time
    (a cycle's next conversation also waits a think time), each round generates at most
    max_tokens; its prompt is the conversation so far (user turns of prompt_chars, ~4 characters
    a token, and earlier replies), averaged over a cycle's rounds. Canaries ask for one token.
    Metrics are read every probe_interval, and once more with each canary wave (its extra sample:
    without it, 30 GETs/min were stated where 34 were sent, measured at the defaults)."""
    per_min = None if think <= 0 else conversations * 60.0 / think
    mean_prompt = sum(r * prompt_chars / 4 + (r - 1) * max_tokens for r in range(1, rounds + 1)) / rounds
    canaries = hops * 60.0 / canary_every if canary_every > 0 else 0.0
    return Cost(requests_per_min=per_min,
                completion_tokens_per_min=None if per_min is None else per_min * max_tokens,
                prompt_tokens_per_min=None if per_min is None else per_min * mean_prompt,
                canary_requests_per_min=canaries,
                scrapes_per_min=(metric_hops * (60.0 / probe_interval + (60.0 / canary_every if canary_every > 0
                                                                         else 0.0))
                                 if probe_interval > 0 else 0.0))


def cost_lines(cost: Cost, *, conversations: int, think: float, max_tokens: int, hops: int, canary_every: float,
               metric_hops: int, probe_interval: float) -> list[str]:
    if cost.requests_per_min is None:
        first = (f"cost: {conversations} canary conversations with --think 0: unbounded (a round as soon as the "
                 "last ends); give --think SECONDS for a bounded cost")
    else:
        first = (f"cost: at most {cost.requests_per_min:.0f} chat requests/min ({conversations} conversations, a "
                 f"round per {think:g} s), {cost.completion_tokens_per_min:.0f} completion tokens/min (max_tokens "
                 f"{max_tokens}), ~{cost.prompt_tokens_per_min:.0f} prompt tokens/min")
    lines = [first]
    if cost.requests_per_min is not None:
        lines.append(f"      with canaries ({hops} hop{'s' if hops != 1 else ''} every {canary_every:g} s, 1 token "
                     "each): at most "
                     f"{cost.requests_per_min + cost.canary_requests_per_min:.0f} requests/min, "
                     f"{cost.completion_tokens_per_min + cost.canary_requests_per_min:.0f} completion tokens/min; "
                     "plus one canary per hop for each verdict")
    if metric_hops and cost.scrapes_per_min:
        in_all = ("" if cost.requests_per_min is None else
                  f"; {cost.requests_per_min + cost.canary_requests_per_min + cost.scrapes_per_min:.0f} requests/min "
                  "in all")
        lines.append(f"      metrics read at {metric_hops} hop{'s' if metric_hops != 1 else ''} every {probe_interval:g} s "
                     f"and with each canary wave ({cost.scrapes_per_min:.0f} GETs/min){in_all}")
    return lines


def in_flight_of(sample: ev.ProbeSample) -> float | None:
    """A hop's requests in flight as its page says: the HTTP layer's open requests when it has the
    gauge, else an engine's batch plus its queue; None when not read (never 0 for "not read")."""
    snap = sample.snapshot
    if not snap.ok:
        return None
    if snap.in_flight is not None:
        return snap.in_flight
    if snap.running is not None:
        return snap.running + (snap.queued or 0.0)
    return None


async def in_daemon_thread[T](blocking: Callable[[str], T], arg: str) -> T:
    """`blocking(arg)` in a daemon thread of its own, awaited. Cancelled (a signal), it is
    abandoned and the process exits at once: anyio's worker threads are not daemons, so one still
    in a blocking call (a model lookup, up to --connect-timeout) would hold the exit until its
    own deadline passed."""
    done = anyio.Event()
    outcome: list[tuple[bool, Any]] = []
    token = anyio.lowlevel.current_token()

    def run() -> None:
        try:
            outcome.append((True, blocking(arg)))
        except BaseException as exc:  # noqa: BLE001  (handed to the awaiting task, raised there)
            outcome.append((False, exc))
        with contextlib.suppress(Exception):  # the loop may be gone (the watch stopped): nobody waits
            anyio.from_thread.run_sync(done.set, token=token)

    threading.Thread(target=run, name=f"repro-watch {getattr(blocking, '__name__', 'call')}", daemon=True).start()
    await done.wait()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


class Watch(Session):
    def __init__(self, settings: WatchSettings, console: Console | None = None,
                 held_signals: list[int] | None = None) -> None:
        self._log_settings = settings.log  # open_log, called by Session.__init__, reads it
        super().__init__(out=settings.out or default_watch_dir(), console=console, workers=1)
        self.settings = settings
        listen = bound_address(settings.sock)
        self.status = WatchStatus(started_at=time.time(), listen=str(listen))
        self.registry = watch_registry(self.status)
        self.verdicts = deque(maxlen=VERDICTS_KEPT)  # type: ignore[assignment]  (bounded: a watch never ends)
        self.stacks: dict[str, Stack] = {}  # by target URL
        self.discovered: list[Hop] = []
        self.stopping = False
        self.discovery_failing = False  # the last discovery got no answer (said once, until it answers)
        self.pending_notes: list[tuple[str, str]] | None = []  # None once the log has its header
        self._numbers = itertools.count()  # conversation numbers, growing across cycles
        self.in_progress: dict[int, Conversation] = {}  # this cycle's conversations
        self._tasks: anyio.abc.TaskGroup | None = None  # where samplers start (stacks come and go)
        # SIGINT/SIGTERM that came before the event loop could receive them (the command holds them
        # from its first line): the watch stops as soon as it runs.
        self.held_signals = held_signals if held_signals is not None else []
        self._stop_scope: anyio.CancelScope | None = None  # the start and the driving (main makes it)
        self.starting = "starting"  # what the start is doing, for the line a signal during it leaves

    # --- the log: one place, swapped for the rotating log at merge ------------------------------

    def open_log(self) -> RotatingRunLog:
        # Rotating segments bounded in size and age: a watch runs for days. Session.__init__ calls
        # this, before self.settings is set: the bounds are set first (see __init__).
        log = self._log_settings
        return RotatingRunLog(self.run_dir, segment_bytes=log.segment_bytes, segment_seconds=log.segment_seconds,
                              keep_seconds=log.keep_seconds, keep_bytes=log.keep_bytes)

    @property
    def segment(self) -> str:
        """The log segment now being written: each verdict points to it."""
        return self.log.segment

    # --- events -----------------------------------------------------------------------------

    def observe(self, event: ev.Event) -> None:
        super().observe(event)
        wall = time.time()
        status = self.status
        kind = type(event)
        if kind is ev.RoundStarted:
            progress = self.in_progress.get(event.conv)
            if progress is not None and event.round == 1:  # each cycle's Driver numbers rounds from 1
                progress.started_at = wall
        elif kind is ev.RoundDone:
            status.round_ended("completed", at=wall)
            progress = self.in_progress.get(event.conv)
            if progress is not None and progress.started_at is not None:
                progress.completed += 1
                if progress.completed >= self.settings.driver.rounds:
                    del self.in_progress[event.conv]
                    for incident in status.conversation_completed(started_at=progress.started_at, at=wall,
                                                                  path=progress.path):
                        self.emit(ev.Note(t=self.now(), level="info", message=(
                            f"incident cleared: {incident.side} side, {incident.where or 'where unknown'}, "
                            f"{incident.kind}: conversation {event.conv}, started after its last verdict, "
                            "completed every round")))
        elif kind is ev.RoundFailed:
            status.round_ended("failed", at=wall)
        elif kind is ev.RoundAbandoned:
            status.round_ended("stalled", at=wall)
        elif kind is ev.VerdictReached:
            status.verdict(event.verdict.to_dict(), at=wall, segment=self.segment)
        elif kind is ev.CanaryResult:
            hop = status.hops.get(event.hop)
            if hop is not None:
                outcome = event.outcome
                hop.canary(answered=outcome.ok, seconds=outcome.total_s, at=wall,
                           reason=outcome.error or (outcome.failure and str(outcome.failure)),
                           failure=outcome.failure, health_answered=outcome.health_status is not None)
                status.settle_up()
        elif kind is ev.ProbeSample:
            hop = status.hops.get(event.hop)
            if hop is not None:
                snap = event.snapshot
                hop.sampled(in_flight=in_flight_of(event), at=wall, answered=snap.ok,
                            reason=None if snap.ok else snap.error or "metrics not read")
                if hop.takes_canary:
                    status.settle_up()

    def note(self, message: str, level: str = "warning") -> None:
        """A remark in the log and on the terminal; one made before the log's header waits for it."""
        if self.pending_notes is not None:
            self.pending_notes.append((message, level))
            return
        self.emit(ev.Note(t=self.now(), level=level, message=message))
        self.say(f"{level}: {message}", indent="  ")

    # --- the stacks ---------------------------------------------------------------------------

    async def _model_for(self, stack_url: str) -> tuple[str, bool]:
        """--model, else the first model the target lists (and whether it listed one)."""
        if self.settings.driver.model:
            return self.settings.driver.model, True
        self.starting = f"listing the models at {stack_url}"
        try:
            return await in_daemon_thread(self.settings.model_of, stack_url)
        except ReproError as exc:  # answered, without a model list: its rounds will say more
            self.note(str(exc))
            return self.settings.unlisted_model, False

    async def _make_stack(self, name: str, hops: list[Hop], conversations: int) -> Stack:
        s = self.settings
        # No conversation, no model to ask for (the hops may have no API to ask).
        model, listed = await self._model_for(hops[0].url) if conversations else ("", True)
        book = self.evidence_book(hops, stall_after=s.driver.stall_after)
        sampler = self.sampler(hops, s.probe_interval)
        stack: Stack | None = None
        judge = self.live_judge(book, sampler, model=model, api_key=s.driver.api_key, canary_timeout=s.canary_timeout,
                                api=s.driver.api,
                                driver_in_flight=lambda: len(stack.driver.in_flight) if stack and stack.driver else 0)
        stack = Stack(name=name, hops=hops, conversations=conversations, model=model, model_listed=listed,
                      book=book, judge=judge, sampler=sampler)
        return stack

    def behind(self) -> dict[str, tuple[str, ...]]:
        """Each given hop's canaried hops behind it: the hops given are the canaries' path, client
        side first (discovered hops are each talked to directly, or only read: none is behind another)."""
        given = self.settings.hops
        return {hop.name: tuple(h.name for h in given[i + 1:] if h.canary) for i, hop in enumerate(given)}

    def watched_hops(self) -> list[Hop]:
        """Every hop watched, each once (a hop in several stacks is probed by each)."""
        seen: dict[str, Hop] = {}
        for stack in self.stacks.values():
            for hop in stack.hops:
                seen.setdefault(hop.name, hop)
        return list(seen.values())

    def _wanted_stacks(self) -> dict[str, tuple[str, list[Hop], int]]:
        """target URL -> (name, hops, conversations) for the hops given and discovered now."""
        s = self.settings
        if s.hops:  # the canaries go through the first hop given; discovered hops are watched beside
            names = {h.name for h in s.hops}
            urls = {h.url for h in s.hops}
            extra = [h for h in self.discovered if h.name not in names and h.url not in urls]
            return {s.hops[0].url: (s.hops[0].name, [*s.hops, *extra], s.driver.conversations)}
        # A hop read by its metrics only (a router on its metrics port: discovery cannot know its
        # API) takes no conversation, and no canary: it is read, in a stack of its own with none.
        talkable = [h for h in self.discovered if h.canary]
        engines = [h for h in talkable if h.role == "engine"] or talkable
        wanted = {h.url: (h.name, [h], s.per_engine) for h in engines}
        read_only = [h for h in self.discovered if h not in engines]
        if read_only:
            wanted[READ_ONLY] = ("read only", read_only, 0)
        return wanted

    async def _sync_stacks(self) -> None:
        wanted = self._wanted_stacks()
        # When each hop's page last answered is the watch's history, not a stack's: a stack remade
        # (a hop discovered beside the hops given) keeps it, or its next verdict would say a page
        # read for hours was "never seen answering".
        answered: dict[str, tuple[float, ...]] = {}
        wall_at_zero = None
        for stack in self.stacks.values():
            answered.update(stack.book.page_answered)
            wall_at_zero = stack.book.wall_at_zero  # the log's header, read by the books made before it
        for url in [u for u in self.stacks if u not in wanted or self.stacks[u].hops != wanted[u][1]]:
            old = self.stacks.pop(url)
            if old.sampler_scope is not None:
                old.sampler_scope.cancel()
            # Its book stays fed while its cycle still runs; _cycles drops it after.
        for url, (name, hops, conversations) in wanted.items():
            if url not in self.stacks:
                stack = self.stacks[url] = await self._make_stack(name, hops, conversations)
                stack.book.page_answered.update({h.name: answered[h.name] for h in hops if h.name in answered})
                stack.book.wall_at_zero = wall_at_zero
                if stack.sampler is not None and self._tasks is not None:
                    self._tasks.start_soon(self._run_sampler, stack)
        watched = self.watched_hops()
        self.status.watch_hops([(h.name, h.url, h.role) for h in watched],
                               read_only={h.name for h in watched if not h.canary}, behind=self.behind())
        self.status.cost = self.cost().as_status()

    def cost(self) -> Cost:
        """The watch's cost with the stacks as they are now (with none yet: one discovered engine's)."""
        s = self.settings
        hops = self.watched_hops()
        conversations = sum(st.conversations for st in self.stacks.values()) or s.per_engine
        return watch_cost(conversations=conversations, rounds=s.driver.rounds, think=s.driver.think_time,
                          max_tokens=s.driver.max_tokens, prompt_chars=s.prompts.prompt_chars,
                          hops=sum(1 for h in hops if h.canary) or 1,
                          canary_every=s.canary_every, metric_hops=sum(1 for h in hops if h.metrics_url),
                          probe_interval=s.probe_interval)

    async def _run_sampler(self, stack: Stack) -> None:
        with anyio.CancelScope() as scope:
            stack.sampler_scope = scope
            try:
                await stack.sampler.run()
            except Exception as exc:  # a sampler that breaks stops sampling, never the watch
                self.note(f"probing {stack.name} stopped: {type(exc).__name__}: {exc}")

    # --- discovery ----------------------------------------------------------------------------

    async def _discover(self, *, first: bool = False) -> None:
        """Re-read the hops from Prometheus; on no answer keep the last set (said in the log)."""
        from probes.discovery import discover_hops  # written beside this module; absent: a usage error at start
        from probes.fleet import FleetError
        from repro.core.hop_changes import hop_changes

        s = self.settings
        try:
            found = await discover_hops(s.prometheus, s.selector, timeout=5.0, name_label=s.name_label)
        except FleetError:
            if first:
                raise
            return
        except ReproError as exc:
            if not self.discovery_failing:  # said once an outage, not every --discover-every
                self.note(f"discovery: {exc}; keeping the last {len(self.discovered)} hops until it answers")
            self.discovery_failing = True
            return
        if self.discovery_failing:
            self.note("discovery: Prometheus answers again", "info")
            self.discovery_failing = False
        added, removed = hop_changes(self.discovered, found)
        if not (added or removed):
            return
        if not first:  # the first set is the start's (its lines and RunStarted say it), not a change
            for hop in added:
                self.note(f"hop added: {hop.name} {hop.url} ({hop.role})", "info")
            for hop in removed:
                self.note(f"hop removed: {hop.name} {hop.url}", "info")
            self.status.hops_changed(added=len(added), removed=len(removed))
        self.discovered = list(found)
        await self._sync_stacks()

    async def _follow_discovery(self) -> None:
        while True:
            await anyio.sleep(self.settings.discover_every)
            try:
                await self._discover()
            except Exception as exc:  # noqa: BLE001  (a discovery that breaks is said, never fatal)
                self.note(f"discovery failed: {type(exc).__name__}: {exc}; keeping the last set")

    # --- the watch ----------------------------------------------------------------------------

    async def main(self) -> dict[str, Any]:
        """SIGTERM and SIGINT are honoured from the first instant: while it starts (discovery and
        the model lookup wait up to 5 s each, before `drive` listens for signals), a signal stops
        the start, and the log gets its header and its end all the same (exit 0, nothing lost).
        This receiver stays open while `drive` has its own: a signal in between reaches this one."""
        s = self.settings
        self._stop_scope = anyio.CancelScope()  # made here: a cancel scope belongs to the event loop
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with anyio.create_task_group() as listening:
                listening.start_soon(self._stop_on, signals)
                with self._stop_scope:
                    if self.held_signals:  # came before the event loop ran (see repro/commands/watch.py)
                        self._stopped_by(self.held_signals[0])
                    await anyio.lowlevel.checkpoint()  # stopped already: the start has no await to end at
                    await self._start()
                    self._header()
                    self._say_start(self.watched_hops())
                    beside: list[Callable[[], Any]] = [functools.partial(serve, s.sock, self.status, self.registry),
                                                       self._measure_loop_lag]
                    await self.drive(self._watch, deadline=s.duration if s.duration else math.inf, name="watch",
                                     beside=beside)
                listening.cancel_scope.cancel()
        if self.pending_notes is not None:  # stopped while starting: the header, then the end
            self._header()
            self.say(f"repro watch: {self.reason} while starting ({self.starting}); nothing watched", indent="  ")
        return self._finish()

    async def _start(self) -> None:
        s = self.settings
        if s.prometheus:
            self.starting = f"discovering the hops at {s.prometheus}"
            await self._discover(first=True)
        self.starting = "setting up the stacks"
        await self._sync_stacks()

    def _header(self) -> None:
        """The log's header (the hops watched so far), then the notes made before it."""
        s = self.settings
        self.started({**dataclasses.asdict(dataclasses.replace(s.driver, api_key=None)),
                      "listen": self.status.listen, "prometheus": s.prometheus, "selector": s.selector,
                      "discover_every": s.discover_every, "canary_every": s.canary_every,
                      "probe_interval": s.probe_interval, "duration": s.duration}, self.watched_hops())
        pending, self.pending_notes = self.pending_notes or [], None
        for message, level in pending:
            self.note(message, level)

    async def _stop_on(self, signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            self._stopped_by(signum)

    def _stopped_by(self, signum: int) -> None:
        self.reason = f"interrupted by {signal.Signals(signum).name}"
        self.stop_driving()
        if self._stop_scope is not None:
            self._stop_scope.cancel()

    def say(self, text: str, indent: str = "      ") -> None:
        """A line of the watch's own, wrapped to fit 80 columns (a number kept with its unit)."""
        for line in fitted(text, min(WIDTH, self.console.width), indent):
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def _say_start(self, hops: list[Hop]) -> None:
        s = self.settings
        say = self.say
        conversations = sum(st.conversations for st in self.stacks.values())
        cost = self.cost()
        listen = self.status.listen
        talked = [st for st in self.stacks.values() if st.conversations]
        if talked:
            say(f"repro watch: {conversations} canary conversations of {s.driver.rounds} rounds, "
                f"{s.driver.think_time:g} s apart, to " + ", ".join(f"{st.name} ({st.target})" for st in talked))
        else:
            say(f"repro watch: no engine found yet; {s.per_engine} canary conversation of {s.driver.rounds} rounds, "
                f"{s.driver.think_time:g} s apart, to each engine discovered (asked every {s.discover_every:g} s)")
        if hops:
            say("watching: " + ", ".join(f"{h.name} {h.url}" + ("" if h.canary else " (read only)") for h in hops))
        lines = cost_lines(cost, conversations=conversations or s.per_engine, think=s.driver.think_time,
                           max_tokens=s.driver.max_tokens, hops=sum(1 for h in hops if h.canary) or 1,
                           canary_every=s.canary_every,
                           metric_hops=sum(1 for h in hops if h.metrics_url), probe_interval=s.probe_interval)
        if not talked:
            lines[0] = lines[0].replace("cost:", "cost for each engine:", 1)
        for line in lines:
            say(line)
        say(f"metrics: http://{listen}/metrics   status: http://{listen}/")
        say(f"log: {self.run_dir}/")
        say(f"      segments {self.segment}, ...")
        say("stop with Ctrl-C or SIGTERM")

    async def _watch(self) -> None:
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            for stack in self.stacks.values():
                if stack.sampler is not None:
                    tasks.start_soon(self._run_sampler, stack)
            tasks.start_soon(self._canaries)
            if self.settings.prometheus:
                tasks.start_soon(self._follow_discovery)
            await self._cycles()
            tasks.cancel_scope.cancel()
        self._tasks = None

    async def _cycles(self) -> None:
        s = self.settings
        while not self.stopping:
            started = time.monotonic()
            stacks = list(self.stacks.values())
            if stacks:
                async with anyio.create_task_group() as cycle:
                    for stack in stacks:
                        cycle.start_soon(self._cycle, stack)
                # Books of stacks replaced during the cycle were fed while it ran; no longer.
                self.books = [st.book for st in self.stacks.values()]
            if self.stopping:
                return
            await anyio.sleep(max(s.driver.think_time, MIN_CYCLE_S - (time.monotonic() - started)))

    async def _cycle(self, stack: Stack) -> None:
        s = self.settings
        if not stack.conversations:  # hops only read (and canaried, when they take canaries)
            return
        ids = tuple(next(self._numbers) for _ in range(stack.conversations))
        if not stack.model_listed:  # it did not answer before: ask again
            stack.model, stack.model_listed = await self._model_for(stack.target)
            if stack.model_listed:
                stack.judge = self.live_judge(stack.book, stack.sampler, model=stack.model, api_key=s.driver.api_key,
                                              canary_timeout=s.canary_timeout, api=s.driver.api,
                                              driver_in_flight=lambda: len(stack.driver.in_flight) if stack.driver else 0)
        path = frozenset(h.name for h in stack.hops)
        for conv in ids:
            self.in_progress[conv] = Conversation(path)
        config = dataclasses.replace(s.driver, base_url=stack.target, model=stack.model, conversations=len(ids),
                                     conversation_ids=ids)
        stack.driver = Driver(config, s.prompts, self.emit, origin=self.origin, judge=stack.judge)
        try:
            await stack.driver.run()
        except Exception as exc:  # noqa: BLE001  (what the stack did is judged; a bug here must not end the watch)
            self.note(f"cycle of conversations {ids[0]}..{ids[-1]} on {stack.name} ended by "
                      f"{type(exc).__name__}: {exc}", "error")
        finally:
            stack.driver = None  # its outcomes go with it: the status has the counts
            for conv in ids:
                self.in_progress.pop(conv, None)
            # Its rounds are judged (Driver.run waits for the judgements): the books forget them.
            for book in self.books:
                book.forget(set(ids))

    async def _canaries(self) -> None:
        """A fresh-connection canary to every hop every --canary-every (with an extra probe sample):
        the evidence wave of the stack's judge, so a stall's wave and these never double up."""
        while True:
            async with anyio.create_task_group() as wave:
                for stack in list(self.stacks.values()):
                    wave.start_soon(self._one_wave, stack)
            await anyio.sleep(self.settings.canary_every)

    async def _one_wave(self, stack: Stack) -> None:
        try:
            await stack.judge.wave.gather(since=self.now())
        except Exception as exc:  # noqa: BLE001
            self.note(f"canaries to {stack.name} failed: {type(exc).__name__}: {exc}")

    async def _measure_loop_lag(self) -> None:
        """The watcher's own loop lag, worst over the last second: how late a sleep wakes."""
        window: deque[tuple[float, float]] = deque()
        while True:
            before = time.monotonic()
            await anyio.sleep(LOOP_LAG_TICK_S)
            now = time.monotonic()
            window.append((now, max(0.0, now - before - LOOP_LAG_TICK_S)))
            while window[0][0] < now - 1.0:
                window.popleft()
            self.status.loop_lag_s = round(max(lag for _t, lag in window), 6)

    def stop_driving(self) -> None:
        self.stopping = True
        for stack in self.stacks.values():
            if stack.driver is not None:
                stack.driver.stop_requested = True

    def _finish(self) -> dict[str, Any]:
        status = self.status
        verdicts = [v.to_dict() for v in self.verdicts]
        summary = {"rounds": dict(status.rounds), "open_incidents": [i.to_dict() for i in status.open_incidents()],
                   "incidents": [i.to_dict() for i in status.incidents.values()],
                   "verdict_tally": verdict_tally(verdicts), "last_verdicts": verdicts[-10:],
                   "run_dir": str(self.run_dir), "reason": self.reason,
                   "interrupted": self.reason.startswith("interrupted")}
        with contextlib.suppress(OSError):
            self.settings.sock.close()
        self.finished(summary)
        return summary
