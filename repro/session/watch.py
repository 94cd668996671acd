"""One `repro watch`: canary conversations against a stack until a signal, the same live judge as
`repro run` for their stalls and failures, and what it all shows kept in a WatchStatus that the
HTTP server (repro/session/watch_server.py) exposes as metrics, a page and JSON.

This module is the session: its start (discovery, the stacks, the log's header), its signals,
what runs beside the driving, and its end. Each concern has a module of its own:
repro/session/watch_cycles.py (the canary cycles and waves), repro/session/watch_progress.py
(what the status learns from each event: rounds, incidents, hops up or down),
repro/session/watch_discovery.py (the hops from Prometheus), repro/session/watched_stack.py
(which stacks the hops make), repro/session/watch_cost.py (its cost and its first lines).

It never dies of what it watches: a hop that refuses, restarts, disappears or answers garbage
ends rounds as failed or stalled (evidence, judged), canaries as down; an exception out of a cycle
or a discovery is logged as an ev.Note and the watch goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
from rich.console import Console

from repro.core import events as ev
from repro.core.errors import ReproError
from repro.core.hop import Hop
from repro.core.watch_status import WatchStatus
from repro.io.daemon_thread import in_daemon_thread
from repro.io.rotating_log import RotatingRunLog
from repro.live.evidence_wave import EvidenceWave, fresh_canaries
from repro.reporting.prose import WIDTH, fitted
from repro.reporting.terminal import verdict_tally
from repro.reporting.watch_metrics import watch_registry
from repro.session.lifecycle import Session
from repro.session.watch_apis import ApiCanaries
from repro.session.watch_cost import Cost, stacks_cost, start_lines
from repro.session.watch_cycles import CanaryCycles, canary_waves
from repro.session.watch_discovery import HopDiscovery
from repro.session.watch_progress import WatchProgress
from repro.session.watch_server import bound_address, serve
from repro.session.watch_settings import LogBounds, WatchSettings, default_watch_dir
from repro.session.watched_stack import WatchedStack, hops_behind, wanted_stacks, watched_hops

__all__ = ["LogBounds", "Watch", "WatchSettings"]

LOOP_LAG_TICK_S = 0.1
VERDICTS_KEPT = 100  # the closing summary's verdicts: the last ones (every one is in the run log)
SAMPLES_MARGIN_S = 60.0  # probe samples kept past a round's deadline, trigger and judge budget


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
        self.stacks: dict[str, WatchedStack] = {}  # by target URL
        self.pending_notes: list[tuple[str, str]] | None = []  # None once the log has its header
        self.progress = WatchProgress(self.status, rounds=settings.driver.rounds,
                                      api=settings.driver.api if settings.canary_apis else None)
        self.discovery = HopDiscovery(settings, self.status, note=self.note, changed=self._sync_stacks)
        self.cycles = CanaryCycles(settings, self.stacks, self.progress, emit=self.emit, origin=self.origin,
                                   note=self.note, refresh_model=self._refresh_model, books=lambda: self.books,
                                   cycle_ended=self._cycle_ended)
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
        for incident in self.progress.observe(event, wall=time.time(), segment=self.segment):
            self.emit(ev.Note(t=self.now(), level="info", message=(
                f"incident cleared: {incident.side} side, {incident.where or 'where unknown'}, "
                f"{incident.kind}: conversation {event.conv}, started after its last verdict, "
                "completed every round")))

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

    def _judge(self, stack: WatchedStack) -> None:
        s = self.settings
        stack.judge = self.live_judge(stack.book, stack.sampler, model=stack.model, api_key=s.driver.api_key,
                                      canary_timeout=s.canary_timeout, api=s.driver.api,
                                      driver_in_flight=stack.driver_in_flight)
        # The other APIs' waves, with the model now known (their books stay: what they read stays).
        stack.apis = [ApiCanaries(each.api, each.book, EvidenceWave(
            stack.hops, emit=self.emit, now=self.now, sample_all=None, canary_timeout=s.canary_timeout,
            canary=fresh_canaries(model=stack.model, timeout=s.canary_timeout, api_key=s.api_keys.get(each.api),
                                  api=each.api))) for each in stack.apis]

    def _judge_apis(self, stack: WatchedStack, since: float, since_wall: float) -> None:
        """The other APIs' canaries of the wave begun at `since`: a verdict for each that failed at a
        hop (an incident of that API's), the API's incidents cleared when all answered."""
        path = {h.name for h in stack.hops}
        for each in stack.apis:
            failed = bool(each.failed(stack.hops, since=since))
            if failed:
                verdict = each.judged(since=since, until=self.now(), first=stack.book, first_api=self.settings.driver.api)
                self.emit(ev.VerdictReached(t=self.now(), verdict=verdict, api=each.api))
            elif not each.answered(stack.hops, since=since):
                continue  # not every canary read: nothing to say of the path
            # This wave's judgement is the API's state: what it found stays open, the rest clears.
            why = "found otherwise by the latest wave" if failed else "every canary answered"
            for incident in self.status.api_wave_judged(each.api, since=since_wall, at=time.time(), path=path):
                self.emit(ev.Note(t=self.now(), level="info", message=(
                    f"incident cleared: {incident.side} side, {incident.where or 'where unknown'}, "
                    f"{incident.kind}: {each.api} canaries to {stack.name}: {why}")))

    async def _refresh_model(self, stack: WatchedStack) -> None:
        """Ask a target that did not list its models again; once it does, its judge canaries that model."""
        stack.model, stack.model_listed = await self._model_for(stack.target)
        if stack.model_listed:
            self._judge(stack)

    async def _make_stack(self, name: str, hops: list[Hop], conversations: int) -> WatchedStack:
        s = self.settings
        # No conversation, no model to ask for (the hops may have no API to ask).
        model, listed = await self._model_for(hops[0].url) if conversations else ("", True)
        # With more APIs than one, each book keeps its own API's canaries (None: the one API's).
        # Samples by age too: a round's evidence reads none older than the round (its deadline),
        # the trigger and the judge's budget; a minute more for a late judge.
        kept_s = s.driver.round_timeout + s.driver.stall_after + s.driver.judge_budget + SAMPLES_MARGIN_S
        book = self.evidence_book(hops, stall_after=s.driver.stall_after, api=s.driver.api if s.canary_apis else None,
                                  samples_kept_s=kept_s)
        sampler = self.sampler(hops, s.probe_interval)
        stack = WatchedStack(name=name, hops=hops, conversations=conversations, model=model, model_listed=listed,
                             book=book, judge=None, sampler=sampler)  # type: ignore[arg-type]  (judged next)
        stack.apis = [ApiCanaries(api, self.evidence_book(hops, stall_after=s.driver.stall_after, api=api,
                                                          samples_kept_s=kept_s))
                      for api in s.canary_apis]  # their waves made by _judge, next
        self._judge(stack)
        return stack

    def watched_hops(self) -> list[Hop]:
        """Every hop watched, each once (a hop in several stacks is probed by each)."""
        return watched_hops(self.stacks.values())

    async def _sync_stacks(self) -> None:
        s = self.settings
        wanted = wanted_stacks(s.hops, self.discovery.discovered, conversations=s.driver.conversations,
                               per_engine=s.per_engine)
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
            # Its book stays fed while its cycle still runs; _cycle_ended drops it after. One in no
            # cycle goes now: replaced books stay at most one per stack a running cycle began with.
            if not self.cycles.runs(old):
                gone = {id(old.book), *(id(a.book) for a in old.apis)}
                self.books = [book for book in self.books if id(book) not in gone]
        for url, (name, hops, conversations) in wanted.items():
            if url not in self.stacks:
                stack = self.stacks[url] = await self._make_stack(name, hops, conversations)
                stack.book.page_answered.update({h.name: answered[h.name] for h in hops if h.name in answered})
                stack.book.wall_at_zero = wall_at_zero
                if stack.sampler is not None and self._tasks is not None:
                    self._tasks.start_soon(self._run_sampler, stack)
        watched = self.watched_hops()
        self.status.watch_hops([(h.name, h.url, h.role) for h in watched],
                               read_only={h.name for h in watched if not h.canary}, behind=hops_behind(s.hops))
        self.status.cost = self.cost().as_status()

    def _cycle_ended(self) -> None:
        # Books of stacks replaced during the cycle were fed while it ran; no longer.
        self.books = [book for st in self.stacks.values() for book in (st.book, *(a.book for a in st.apis))]

    def cost(self) -> Cost:
        """The watch's cost with the stacks as they are now (with none yet: one discovered engine's)."""
        return stacks_cost(self.settings, list(self.stacks.values()), self.watched_hops())

    async def _run_sampler(self, stack: WatchedStack) -> None:
        with anyio.CancelScope() as scope:
            stack.sampler_scope = scope
            try:
                await stack.sampler.run()
            except Exception as exc:  # a sampler that breaks stops sampling, never the watch
                self.note(f"probing {stack.name} stopped: {type(exc).__name__}: {exc}")

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
                    for line in start_lines(s, list(self.stacks.values()), self.watched_hops(), self.cost(),
                                            listen=self.status.listen, run_dir=str(self.run_dir),
                                            segment=self.segment):
                        self.say(line, indent="      ")
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
            await self.discovery.discover(first=True)
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
        self.interrupted(signum)
        self.stop_driving()
        if self._stop_scope is not None:
            self._stop_scope.cancel()

    def say(self, text: str, indent: str = "      ") -> None:
        """A line of the watch's own, wrapped to fit 80 columns (a number kept with its unit)."""
        for line in fitted(text, min(WIDTH, self.console.width), indent):
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    async def _watch(self) -> None:
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            for stack in self.stacks.values():
                if stack.sampler is not None:
                    tasks.start_soon(self._run_sampler, stack)
            tasks.start_soon(functools.partial(canary_waves, self.stacks, every=self.settings.canary_every,
                                               now=self.now, note=self.note, judge_apis=self._judge_apis))
            if self.settings.prometheus:
                tasks.start_soon(self.discovery.follow)
            await self.cycles.run()
            tasks.cancel_scope.cancel()
        self._tasks = None

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
        self.cycles.stop()

    def _finish(self) -> dict[str, Any]:
        status = self.status
        verdicts = [v.to_dict() for v in self.verdicts]
        summary = {"rounds": dict(status.rounds), "open_incidents": [i.to_dict() for i in status.open_incidents()],
                   "incidents": [i.to_dict() for i in status.incidents.values()],
                   "verdict_tally": verdict_tally(verdicts), "last_verdicts": verdicts[-10:],
                   "run_dir": str(self.run_dir), "reason": self.reason,
                   "interrupted": self.interrupted_by is not None}
        with contextlib.suppress(OSError):
            self.settings.sock.close()
        self.finished(summary)
        return summary
