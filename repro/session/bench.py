"""One `repro bench`: a closed-loop concurrency sweep of one deployment, or two interleaved (A/B).

At level c, c slots each run conversations back to back (multi-turn, history growing). A
conversation ends after `rounds_per_conversation` rounds and a fresh one (new history, new
connection) takes its slot, the way a finished agent session is followed by the next: the
prompt stays bounded however long the window, and the slot never sits idle, so the load stays
closed-loop at c.

Each (level, deployment, repeat) is one window, driven by one driver in closed-loop mode
(DriverConfig.until_stopped: a slot's next conversation follows its last, its rounds numbered
on), or with `--workers N` one ShardedDriver over N processes; each window has its own range of
conversation numbers, so the log, the verdicts and `repro report` keep windows apart. A window
is a warmup, `duration` measured (repro.core.bench_window), then no new round starts and the
rounds in flight get a bounded grace. With B, the order per level is A B B A B A A B for four
repeats (Thue-Morse: a linear drift, and a quadratic one, hits both alike; B A A B A B B A at
the next level). The
live judge stays on: a stall or failure in a window is judged as in `repro run`. A window in
which a worker process died ran below its concurrency: it is kept in bench.json as invalid, with
the reason, and left out of the statistics; the dead worker's rounds in flight count as failed.

Each deployment's record (what its hops say they run, probes/deployment.py) is read once at the
start, before any load, into the log and bench.json, so that `repro diff` and `repro compare`
can say what differed between two benches or between A and B.

The folder holds the run log (events.jsonl, RunStarted .. RunFinished, so `repro report` reads
it; with workers, their segments merged in at the end), bench.json (self-describing results;
repro.reporting.bench_results folds, reads and checks them) and bench.html.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from probes.sampler import Sampler
from repro.core import events as ev
from repro.core.bench_window import WindowMeter
from repro.core.evidence_book import EvidenceBook
from repro.core.hop import Hop
from repro.core.verdict import Verdict
from repro.live.live_judge import LiveJudge
from repro.load.driver import Driver, DriverConfig
from repro.load.driving import RoundDriver
from repro.load.prompts import PromptSource
from repro.load.round import RoundOutcome
from repro.load.shards import ShardedDriver
from repro.reporting.bench_results import BENCH_FILE, BENCH_KIND, BENCH_VERSION, ab_level_rows, per_level
from repro.reporting.summary import summarize
from repro.reporting.terminal import VerdictFeed
from repro.session.lifecycle import Session

# How long a window waits for its worker processes to be up (an import each) before its clock starts.
WORKERS_READY_S = 30.0


@dataclass
class Deployment:
    name: str  # "A" or "B": also its hop name in the log and in verdicts
    url: str  # base URL; "" means: start the embedded simulated engine
    model: str = ""
    sim: Any = None  # the SimConfig of an embedded engine

    @property
    def embedded(self) -> bool:
        return not self.url


@dataclass
class BenchSettings:
    levels: list[int]
    duration: float
    warmup: float
    repeat: int
    deployments: list[Deployment]
    driver: DriverConfig  # the template of every window's driver (URL, model, conversations set per window)
    prompts: PromptSource
    bin_s: float = 1.0
    grace: float | None = None  # None: a stall caught at the window's end can still be judged
    out: Path | None = None
    probe_interval: float = 0.5
    canary_timeout: float = 3.0
    run_timeout: float | None = None  # None: twice the planned time plus a minute
    seed: int = 0
    prompts_file: str | None = None  # the --prompts path, and its content's digest (same name, other file)
    prompts_sha256: str | None = None
    noise_pct: float = 1.0  # a difference is significant when its CI lies beyond +-this (repro.core.bench_stats)
    workers: int = 1  # above 1: each window's conversations sharded across that many processes

    @property
    def window_grace(self) -> float:
        if self.grace is not None:
            return self.grace
        return self.driver.stall_after + self.canary_timeout + 2.0

    def order(self) -> list[tuple[int, str, int]]:
        """(level, deployment, repeat) in the order they run: A B B A B A A B, then B A A B A B B A, ..."""
        names = [d.name for d in self.deployments]
        plan = []
        for index, level in enumerate(self.levels):
            for repeat in range(self.repeat):
                # Thue-Morse: both sides' mean positions (and, over 4 pairs, mean squared ones) are equal.
                pair = names if (index + repeat.bit_count()) % 2 == 0 else names[::-1]
                plan.extend((level, name, repeat) for name in pair)
        return plan

    @property
    def planned_s(self) -> float:
        return len(self.order()) * (self.warmup + self.duration)


@dataclass
class _Side:
    """A deployment while the bench runs: its stack, what it has seen, its verdicts on the terminal,
    its judge, its window's driver."""

    deployment: Deployment
    hops: list[Hop]
    book: EvidenceBook
    feed: VerdictFeed
    judge: LiveJudge | None = None
    sampler: Sampler | None = None
    driver: RoundDriver | None = None
    record: dict[str, dict[str, Any]] = field(default_factory=dict)  # its hops' deployment records


@dataclass
class BenchResult:
    data: dict[str, Any]  # what bench.json holds
    run_dir: Path
    reason: str


class Bench(Session):
    def __init__(self, settings: BenchSettings, console: Console | None = None) -> None:
        super().__init__(out=settings.out, console=console, workers=settings.workers)
        self.settings = settings
        self.sides: dict[str, _Side] = {}
        self.windows: list[dict[str, Any]] = []
        self._meter: WindowMeter | None = None
        self._pooled: dict[tuple[int, str], dict[str, list[float]]] = {}  # TTFT/ITL samples per (level, side)
        self._next_conv = 0  # the first conversation number of the next window
        self._conv_side: dict[int, _Side] = {}
        self._conv_window: dict[int, int] = {}  # conversation -> index of its window in self.windows
        self._window_verdicts: dict[int, list[Verdict]] = {}
        self._window_index = 0
        self._interrupted = False
        self._died: dict[int, str] = {}  # worker index -> why the current window is invalid
        self._lost: list[RoundOutcome] = []  # rounds in flight of a worker that died
        self.outcomes: list[RoundOutcome] = []

    # --- events -----------------------------------------------------------------------------

    def observe(self, event: ev.Event) -> None:
        """The session's learning, and the current window's meter reads every event. With workers,
        their events (SSE reads included) arrive here, already in their segments."""
        meter = self._meter
        if meter is not None:
            meter.add(event)
        if type(event) is ev.SSEReceived:
            return
        super().observe(event)
        if isinstance(event, ev.VerdictReached):
            window = self._conv_window.get(event.verdict.conversation)
            if window is not None:
                self._window_verdicts.setdefault(window, []).append(event.verdict)


    def feed_for(self, verdict: Verdict) -> VerdictFeed:
        side = self._conv_side.get(verdict.conversation)
        return side.feed if side is not None else self.feed

    def stop_driving(self) -> None:
        self._interrupted = True
        for side in self.sides.values():
            if side.driver is not None:
                side.driver.stop_requested = True

    # --- the run ----------------------------------------------------------------------------

    async def main(self) -> BenchResult:
        s = self.settings
        with contextlib.ExitStack() as stack:
            for deployment in s.deployments:
                await self._start_side(deployment, stack)
            hops = [hop for side in self.sides.values() for hop in side.hops]
            self.started({
                **dataclasses.asdict(s.driver), "bench": True, "levels": s.levels, "duration": s.duration,
                "warmup": s.warmup, "repeat": s.repeat, "bin_s": s.bin_s, "grace": s.window_grace,
                "deployments": [self._describe(d) for d in s.deployments], "probe_interval": s.probe_interval,
                "workers": s.workers,
            }, hops)
            records = await self.record_deployment(hops, api_key=s.driver.api_key)
            for side in self.sides.values():
                side.record = {hop.name: records[hop.name] for hop in side.hops}
            deadline = s.run_timeout if s.run_timeout is not None else 2 * s.planned_s + 60
            for line in plan_lines(s):
                self.console.print(line, markup=False, highlight=False)
            progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                                TimeRemainingColumn(), console=self.console, transient=False)
            with progress:
                bar = progress.add_task("bench", total=s.planned_s)

                async def windows() -> None:
                    for done, (level, name, repeat) in enumerate(s.order()):
                        if self._interrupted:
                            break
                        progress.update(bar, description=f"c={level} {name} #{repeat + 1}",
                                        completed=done * (s.warmup + s.duration))
                        if not self.console.is_terminal:  # a log gets a line a window, not a bar at the end
                            self.console.print(
                                f"window {done + 1}/{len(s.order())}: c={level} {name} #{repeat + 1}, "
                                f"{duration_words(done * (s.warmup + s.duration))} of "
                                f"{duration_words(s.planned_s)} done", markup=False, highlight=False)
                        await self._window(self.sides[name], level, repeat, progress, bar,
                                           done * (s.warmup + s.duration))
                    progress.update(bar, completed=s.planned_s)

                await self.drive(windows, deadline=deadline, name="bench",
                                 beside=[side.sampler.run for side in self.sides.values() if side.sampler is not None])
            return self._finish()

    def _describe(self, deployment: Deployment) -> dict[str, Any]:
        found = {"name": deployment.name, "target": deployment.url or None, "model": deployment.model}
        if deployment.sim is not None:
            found["embedded_sim"] = {"itl": deployment.sim.itl, "ttft": deployment.sim.ttft,
                                     "max_running": deployment.sim.max_running, "fault": deployment.sim.fault}
        side = self.sides.get(deployment.name)
        if side is not None and side.record:
            found["record"] = side.record  # {hop name: what it said it runs}, as `repro diff` reads it
        return found

    async def _start_side(self, deployment: Deployment, stack: contextlib.ExitStack) -> None:
        s = self.settings
        if deployment.embedded:
            from repro.sim import SimConfig, start_sim_process

            deployment.sim = deployment.sim or SimConfig()
            sim = await anyio.to_thread.run_sync(start_sim_process, deployment.sim)
            stack.callback(sim.stop)
            deployment.url = sim.url
            deployment.model = deployment.model or deployment.sim.model
        hops = [Hop(deployment.name, deployment.url)]
        # Each side its own feed: a cause A showed in full is still shown in full when B first has it.
        side = _Side(deployment, hops, self.evidence_book(hops, stall_after=s.driver.stall_after),
                     VerdictFeed(self.console), sampler=self.sampler(hops, s.probe_interval))
        side.judge = self.live_judge(side.book, side.sampler, model=deployment.model, api_key=s.driver.api_key,
                                     canary_timeout=s.canary_timeout, api=s.driver.api,
                                     driver_in_flight=lambda: len(side.driver.in_flight) if side.driver is not None else 0)
        self.sides[deployment.name] = side

    async def _window(self, side: _Side, level: int, repeat: int, progress: Progress, bar: Any, done_s: float) -> None:
        s = self.settings
        index = self._window_index
        self._window_index += 1
        ids = tuple(range(self._next_conv, self._next_conv + level))
        self._next_conv += level
        for conv in ids:
            self._conv_side[conv] = side
            self._conv_window[conv] = index
        # Slots start spread over half the warmup: c connects and prefills at once cost CPU, and
        # conversations that start together stay in step on an engine with fixed-length replies,
        # so every sub-window would catch all of them between rounds at once, or none.
        config = dataclasses.replace(s.driver, base_url=side.deployment.url, model=side.deployment.model,
                                     conversations=level, conversation_ids=ids, until_stopped=True,
                                     ramp_up=min(s.warmup / 2, 2.0))
        sharded = s.workers > 1
        driver = (ShardedDriver(config, s.prompts, self.observe, workers=s.workers, run_dir=self.run_dir,
                                origin=self.origin, judge=side.judge, emit=self.emit, forward_sse=True)
                  if sharded else Driver(config, s.prompts, self.emit, origin=self.origin, judge=side.judge))
        side.driver = driver
        began = self.now()
        meter = WindowMeter(side.deployment.name, level, repeat, start=began + s.warmup,
                            end=began + s.warmup + s.duration, bin_s=s.bin_s)
        self._meter = meter
        self.sse_reader = meter.add
        cpu: list[list[float | None]] = []
        ended = anyio.Event()

        async def drive() -> None:
            try:
                await driver.run()
            finally:
                ended.set()

        async with anyio.create_task_group() as window:
            window.start_soon(drive)
            if sharded:
                # The window's clock starts once its workers are up: their start (an interpreter
                # and its imports each) is not the deployment's time.
                with anyio.move_on_after(WORKERS_READY_S):
                    await driver.ready.wait()
                began = self.now()
                meter.move(began + s.warmup, began + s.warmup + s.duration)
            for phase_end in (meter.start, meter.end):
                while (left := phase_end - self.now()) > 0 and not self._interrupted:
                    progress.update(bar, completed=done_s + min(self.now() - began, s.warmup + s.duration))
                    if sharded:
                        self._check_workers(driver, meter)
                    await anyio.sleep(min(0.2, left))
                cpu.append(_cpu_seconds(driver))
            # No new round starts; the rounds in flight get the grace, then are cut.
            if sharded:
                driver.drain()
            else:
                driver.stop_requested = True
            with anyio.move_on_after(s.window_grace):
                await ended.wait()
            if sharded and not self._interrupted:
                self._check_workers(driver, meter)  # before the cut: the workers we stop are not deaths
            window.cancel_scope.cancel()
        side.driver = None
        self._meter = None
        self.sse_reader = None
        self.outcomes.extend(o for o in driver.outcomes if o.status != "skipped")
        self.outcomes.extend(self._lost)
        died, self._died, self._lost = self._died, {}, []
        if self._interrupted:
            return
        result = meter.result(cpu_seconds=_busiest(cpu[-2], cpu[-1]),
                              verdicts=[v.to_dict() for v in self._window_verdicts.get(index, ())])
        result["order"] = index
        result["invalid"] = "; ".join(died[k] for k in sorted(died)) or None
        self.windows.append(result)
        if result["invalid"]:
            self.console.print(f"[yellow]warning:[/] c={level} {side.deployment.name} window #{repeat + 1} is invalid "
                               f"({result['invalid']}); it is left out of the statistics", highlight=False)
            return
        pooled = self._pooled.setdefault((level, side.deployment.name), {"ttft": [], "itl": []})
        pooled["ttft"] += meter.ttfts
        pooled["itl"] += meter.itls

    def _check_workers(self, driver: ShardedDriver, meter: WindowMeter) -> None:
        """A worker whose output ended before it reported its rounds died: the window ran below its
        concurrency from then on, and its rounds in flight will never end on their own."""
        for worker in driver.workers:
            if not worker.eof or worker.final is not None or worker.index in self._died:
                continue
            now = self.now()
            lost = [r for r in list(driver.in_flight.values()) if r.worker == worker.index]
            error = f"worker {worker.index} died"
            self._died[worker.index] = (f"{error} {now - meter.start:+.1f} s into the measured part, "
                                        f"{len(lost)} rounds in flight counted as failed")
            self.log.write(ev.Note(t=now, level="warning", message=f"{self._died[worker.index]}; the window "
                                   f"c={meter.concurrency} {meter.deployment} #{meter.repeat + 1} is invalid"))
            for r in lost:
                driver.in_flight.pop((r.conv, r.round), None)
                phase = "before-first-byte" if meter.awaits_first_token(r.conv, r.round) else "mid-stream"
                failed = ev.RoundFailed(t=now, conv=r.conv, round=r.round, phase=phase, error=error,
                                        duration_s=round(now - r.started, 3))
                # Logged and counted, not judged: the client lost it, the deployment did nothing.
                self.log.write(failed)
                meter.add(failed)
                for book in self.books:
                    book.add(failed)
                self._lost.append(RoundOutcome(r.conv, r.round, "failed", duration_s=failed.duration_s, error=error))

    # --- results ----------------------------------------------------------------------------

    def _finish(self) -> BenchResult:
        s = self.settings
        closing = self.closing_summary()
        data = bench_data(s, self.windows, self._pooled, verdicts=closing["verdicts"],
                          deployments=[self._describe(d) for d in s.deployments])
        # A slot numbers its rounds on across its conversations: the summary's rows are by round of
        # a conversation (1 .. rounds_per_conversation), as one conversation's history grows.
        per_conversation = s.driver.rounds
        folded = [dataclasses.replace(o, round=(o.round - 1) % per_conversation + 1) for o in self.outcomes]
        summary = summarize(folded, conversations=max(1, self._next_conv), rounds=1)
        summary["rounds_total"] = len(self.outcomes)  # a bench has no planned total: the rounds it ran
        summary["rounds_skipped"] = 0
        summary.update(closing)
        summary["bench"] = BENCH_FILE
        summary["windows_invalid"] = sum(1 for w in self.windows if w.get("invalid"))
        data["summary"] = {k: summary[k] for k in ("rounds_total", "rounds_completed", "rounds_stalled",
                                                   "rounds_failed", "reason", "interrupted", "windows_invalid")}
        data["verdict_tally"] = summary["verdict_tally"]
        (self.run_dir / BENCH_FILE).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        from repro.reporting.bench_html import write_bench_html

        write_bench_html(self.run_dir, data)
        self.finished(summary)
        return BenchResult(data=data, run_dir=self.run_dir, reason=self.reason)


def duration_words(seconds: float) -> str:
    """'18 min 40 s', '35 s', '1 h 2 min': a planned or elapsed time as read at a glance."""
    if seconds < 60:
        return f"{round(seconds, 1):g} s"
    whole = round(seconds)
    hours, minutes, secs = whole // 3600, whole % 3600 // 60, whole % 60
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def plan_lines(s: BenchSettings) -> list[str]:
    """What the bench will do and for how long, before it starts: its defaults take minutes."""
    sides = "/".join(d.name for d in s.deployments)
    window = s.warmup + s.duration
    return [f"repro bench: {len(s.order())} windows ({len(s.levels)} level{'s' if len(s.levels) != 1 else ''} "
            f"x {s.repeat} repeats x {sides}) of {duration_words(window)}: about {duration_words(s.planned_s)}",
            f"  each: {duration_words(s.warmup)} warm-up, {duration_words(s.duration)} measured, up to "
            f"{duration_words(s.window_grace)} of grace",
            "  Ctrl-C ends it early, with what it measured"]


def _cpu_seconds(driver: RoundDriver) -> list[float | None]:
    """CPU seconds so far of each process that drives the window: ours, and each worker's."""
    return [time.process_time(), *driver.cpu_seconds()]


def _busiest(before: list[float | None], after: list[float | None]) -> float | None:
    """The most CPU seconds one process used between two readings: a process, not the sum, is
    what saturates a core."""
    used = [b - a for a, b in zip(before, after, strict=False) if a is not None and b is not None]
    return max(used) if used else None


def bench_data(settings: BenchSettings, windows: list[dict[str, Any]],
               pooled: dict[tuple[int, str], dict[str, list[float]]], *, verdicts: list[dict[str, Any]],
               deployments: list[dict[str, Any]]) -> dict[str, Any]:
    """What bench.json holds (repro.reporting.bench_results reads it back)."""
    names = [d["name"] for d in deployments]
    levels = (ab_level_rows(windows, names[0], names[1], seed=settings.seed, noise_pct=settings.noise_pct)
              if len(names) > 1 else [])
    d = settings.driver
    return {
        "kind": BENCH_KIND,
        "version": BENCH_VERSION,
        "settings": {
            "levels": settings.levels, "duration_s": settings.duration, "warmup_s": settings.warmup,
            "repeat": settings.repeat, "bin_s": settings.bin_s, "grace_s": settings.window_grace,
            "max_tokens": d.max_tokens, "rounds_per_conversation": d.rounds,
            "prompt_chars": None if settings.prompts_file else settings.prompts.prompt_chars,
            "prompts_file": settings.prompts_file, "prompts_sha256": settings.prompts_sha256,
            "tools": len(settings.prompts.tools), "client": d.client, "connections": d.connections,
            "client_timeouts": d.client_timeouts, "workers": settings.workers,
            "stall_after_s": d.stall_after, "order": [list(o) for o in settings.order()],
            "noise_band_pct": settings.noise_pct,
        },
        "deployments": deployments,
        "per_level": per_level(windows, pooled),
        "levels": levels,
        "windows": windows,
        "verdicts": verdicts,
    }
