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
it; with workers, their segments merged in at the end), bench.json (self-describing results)
and bench.html.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from probes.deployment import record_deployment
from probes.sampler import Sampler
from repro.core import events as ev
from repro.core.bench_stats import level_rows, percentile
from repro.core.bench_window import WindowMeter
from repro.core.errors import ReproError
from repro.core.evidence_book import EvidenceBook
from repro.core.hop import Hop
from repro.io.runlog import RunLogWriter, merge_segments_or_keep
from repro.judging.live_judge import LiveJudge, fresh_canary
from repro.load.conversation import PromptSource
from repro.load.driver import Driver, DriverConfig, RoundOutcome
from repro.load.gc_policy import gc_tuned_for_streaming
from repro.load.shards import ShardedDriver
from repro.reporting.summary import summarize
from repro.reporting.terminal import VerdictFeed, verdict_tally
from repro.session.run import default_run_dir, redacted, versions

BENCH_FILE = "bench.json"
BENCH_KIND = "repro-bench"
BENCH_VERSION = 1
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
    """A deployment while the bench runs: its stack, what it has seen, its judge, its window's driver."""

    deployment: Deployment
    hops: list[Hop]
    book: EvidenceBook
    judge: LiveJudge | None = None
    sampler: Sampler | None = None
    driver: Driver | ShardedDriver | None = None
    record: dict[str, dict[str, Any]] = field(default_factory=dict)  # its hops' deployment records


@dataclass
class BenchResult:
    data: dict[str, Any]  # what bench.json holds
    run_dir: Path
    reason: str


class Bench:
    def __init__(self, settings: BenchSettings, console: Console | None = None) -> None:
        self.settings = settings
        self.console = console or Console(stderr=True)
        self.run_dir = Path(settings.out) if settings.out else default_run_dir()
        self.origin = time.monotonic()
        self.log = RunLogWriter(self.run_dir)
        self.sides: dict[str, _Side] = {}
        self.reason = "completed"
        self.windows: list[dict[str, Any]] = []
        self._meter: WindowMeter | None = None
        self._pooled: dict[tuple[int, str], dict[str, list[float]]] = {}  # TTFT/ITL samples per (level, side)
        self._next_conv = 0  # the first conversation number of the next window
        self._conv_side: dict[int, _Side] = {}
        self._conv_window: dict[int, int] = {}  # conversation -> index of its window in self.windows
        self._window_verdicts: dict[int, list[dict[str, Any]]] = {}
        self._window_index = 0
        self._interrupted = False
        self._died: dict[int, str] = {}  # worker index -> why the current window is invalid
        self._lost: list[RoundOutcome] = []  # rounds in flight of a worker that died
        self._judgements: anyio.abc.TaskGroup | None = None
        self.outcomes: list[RoundOutcome] = []
        self.verdicts: list[dict[str, Any]] = []

    def now(self) -> float:
        return time.monotonic() - self.origin

    # --- events -----------------------------------------------------------------------------

    def emit(self, event: ev.Event) -> None:
        self.log.write(event)
        if type(event) is ev.SSEReceived:  # by far the most frequent event: only the log and the meter want it
            meter = self._meter
            if meter is not None:
                meter.add(event)
            return
        self.observe(event)

    def observe(self, event: ev.Event) -> None:
        """What the bench learns from an event, whichever process logged it: with workers, their
        events (SSE reads included) arrive here, already in their segments."""
        meter = self._meter
        if meter is not None:
            meter.add(event)
        if type(event) is ev.SSEReceived:
            return
        for side in self.sides.values():
            side.book.add(event)
        if isinstance(event, ev.RoundFailed):
            side = self._conv_side.get(event.conv)
            if self._judgements is not None and side is not None and side.judge is not None:
                self._judgements.start_soon(self._judge_failure, side.judge, event)
        elif isinstance(event, ev.VerdictReached):
            verdict = event.verdict.to_dict()
            self.verdicts.append(verdict)
            window = self._conv_window.get(event.verdict.conversation)
            if window is not None:
                self._window_verdicts.setdefault(window, []).append(verdict)

    async def _judge_failure(self, judge: LiveJudge, failure: ev.RoundFailed) -> None:
        with anyio.move_on_after(self.settings.driver.judge_budget):
            await judge.judge_failure(failure)

    # --- the run ----------------------------------------------------------------------------

    def execute(self) -> BenchResult:
        try:
            return anyio.run(self._main)
        finally:
            self.log.close()
            if self.settings.workers > 1 and (warning := merge_segments_or_keep(self.run_dir)):
                self.console.print(f"[yellow]{warning}[/]")

    async def _main(self) -> BenchResult:
        s = self.settings
        with contextlib.ExitStack() as stack:
            for deployment in s.deployments:
                await self._start_side(deployment, stack)
            hops = [hop for side in self.sides.values() for hop in side.hops]
            self.emit(ev.RunStarted(
                t=self.now(),
                config=redacted({
                    **dataclasses.asdict(s.driver), "bench": True, "levels": s.levels, "duration": s.duration,
                    "warmup": s.warmup, "repeat": s.repeat, "bin_s": s.bin_s, "grace": s.window_grace,
                    "deployments": [self._describe(d) for d in s.deployments], "probe_interval": s.probe_interval,
                    "workers": s.workers,
                }),
                versions=versions(), monotonic_origin=self.origin, wall_clock_origin=time.time(), hops=hops,
            ))
            # What each deployment runs, read once before any load (bounded: 2 s at most, every hop
            # at once), so that `repro diff` and `repro compare` can say what differed.
            records = await record_deployment(hops, timeout=2.0, api_key=s.driver.api_key)
            for side in self.sides.values():
                side.record = {hop.name: records[hop.name] for hop in side.hops}
            self.emit(ev.DeploymentRecorded(t=self.now(), hops=records))
            deadline = s.run_timeout if s.run_timeout is not None else 2 * s.planned_s + 60
            progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                                TimeRemainingColumn(), console=self.console, transient=False)
            with progress:
                bar = progress.add_task("bench", total=s.planned_s)
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._watch_signals, tasks.cancel_scope)
                    for side in self.sides.values():
                        if side.sampler is not None:
                            tasks.start_soon(side.sampler.run)
                    async with anyio.create_task_group() as self._judgements:
                        with anyio.move_on_after(deadline) as timer, gc_tuned_for_streaming():
                            for done, (level, name, repeat) in enumerate(s.order()):
                                if self._interrupted:
                                    break
                                progress.update(bar, description=f"c={level} {name} #{repeat + 1}",
                                                completed=done * (s.warmup + s.duration))
                                await self._window(self.sides[name], level, repeat, progress, bar,
                                                   done * (s.warmup + s.duration))
                            progress.update(bar, completed=s.planned_s)
                        if timer.cancelled_caught:
                            self.reason = f"bench deadline of {deadline:g} s passed"
                            self._judgements.cancel_scope.cancel()
                    self._judgements = None
                    tasks.cancel_scope.cancel()
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
        side = _Side(deployment, hops, EvidenceBook(hops, stall_after=s.driver.stall_after))
        if s.probe_interval > 0 and any(h.metrics_url for h in hops):
            side.sampler = Sampler(hops, interval=s.probe_interval, emit=self.emit, origin=self.origin)
        side.judge = LiveJudge(
            side.book, emit=self.emit, now=self.now,
            sample_all=side.sampler.sample_now if side.sampler is not None else None,
            canary=functools.partial(fresh_canary, model=deployment.model, timeout=s.canary_timeout,
                                     api_key=s.driver.api_key),
            on_verdict=VerdictFeed(self.console), canary_timeout=s.canary_timeout,
            driver_in_flight=lambda: len(side.driver.in_flight) if side.driver is not None else 0,
        )
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
        self.outcomes.extend(o for o in driver.outcomes if o.status != "skipped")
        self.outcomes.extend(self._lost)
        died, self._died, self._lost = self._died, {}, []
        if self._interrupted:
            return
        result = meter.result(cpu_seconds=_busiest(cpu[-2], cpu[-1]), verdicts=self._window_verdicts.get(index))
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
                for side in self.sides.values():
                    side.book.add(failed)
                self._lost.append(RoundOutcome(r.conv, r.round, "failed", duration_s=failed.duration_s, error=error))

    async def _watch_signals(self, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                self.reason = f"interrupted by {signal.Signals(signum).name}"
                self._interrupted = True
                for side in self.sides.values():
                    if side.driver is not None:
                        side.driver.stop_requested = True
                scope.cancel()
                return

    # --- results ----------------------------------------------------------------------------

    def _finish(self) -> BenchResult:
        s = self.settings
        data = bench_data(s, self.windows, self._pooled, verdicts=self.verdicts,
                          deployments=[self._describe(d) for d in s.deployments])
        # A slot numbers its rounds on across its conversations: the summary's rows are by round of
        # a conversation (1 .. rounds_per_conversation), as one conversation's history grows.
        per_conversation = s.driver.rounds
        folded = [dataclasses.replace(o, round=(o.round - 1) % per_conversation + 1) for o in self.outcomes]
        summary = summarize(folded, conversations=max(1, self._next_conv), rounds=1)
        summary["rounds_total"] = len(self.outcomes)  # a bench has no planned total: the rounds it ran
        summary["rounds_skipped"] = 0
        summary["verdicts"] = self.verdicts
        summary["verdict_tally"] = verdict_tally(self.verdicts)
        summary["run_dir"] = str(self.run_dir)
        summary["reason"] = self.reason
        summary["interrupted"] = self.reason.startswith("interrupted")
        summary["bench"] = BENCH_FILE
        summary["windows_invalid"] = sum(1 for w in self.windows if w.get("invalid"))
        data["summary"] = {k: summary[k] for k in ("rounds_total", "rounds_completed", "rounds_stalled",
                                                   "rounds_failed", "reason", "interrupted", "windows_invalid")}
        data["verdict_tally"] = summary["verdict_tally"]
        (self.run_dir / BENCH_FILE).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        from repro.reporting.bench_html import write_bench_html

        write_bench_html(self.run_dir, data)
        self.emit(ev.RunFinished(t=self.now(), summary=summary, reason=self.reason))
        self.log.flush()
        return BenchResult(data=data, run_dir=self.run_dir, reason=self.reason)


def _cpu_seconds(driver: Driver | ShardedDriver) -> list[float | None]:
    """CPU seconds so far of each process that drives the window: ours, and each worker's."""
    ours = time.process_time()
    return [ours, *driver.cpu_seconds()] if isinstance(driver, ShardedDriver) else [ours]


def _busiest(before: list[float | None], after: list[float | None]) -> float | None:
    """The most CPU seconds one process used between two readings: a process, not the sum, is
    what saturates a core."""
    used = [b - a for a, b in zip(before, after, strict=False) if a is not None and b is not None]
    return max(used) if used else None


def _quantiles_ms(values: list[float]) -> dict[str, float | None]:
    return {name: (None if (v := percentile(values, q)) is None else round(v * 1000, 2))
            for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))}


def per_level(windows: list[dict[str, Any]], pooled: dict[tuple[int, str], dict[str, list[float]]] | None = None
              ) -> list[dict[str, Any]]:
    """Each (level, deployment): its windows folded (throughput the mean of windows, latency
    quantiles over every sample when the raw samples are at hand, else the windows' worst)."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for w in windows:
        groups.setdefault((w["concurrency"], w["deployment"]), []).append(w)
    rows = []
    for (level, name), group in sorted(groups.items()):
        valid = [w for w in group if not w.get("invalid")]

        def mean(key: str, valid=valid) -> float | None:
            values = [w[key] for w in valid if w.get(key) is not None]
            return round(sum(values) / len(values), 2) if values else None

        raw = (pooled or {}).get((level, name))
        if raw is not None:
            ttft, itl = _quantiles_ms(raw["ttft"]), _quantiles_ms(raw["itl"])
        else:
            ttft = {q: max((w["ttft_ms"][q] for w in valid if w["ttft_ms"][q] is not None), default=None)
                    for q in ("p50", "p95", "p99")}
            itl = {q: max((w["itl_ms"][q] for w in valid if w["itl_ms"][q] is not None), default=None)
                   for q in ("p50", "p95", "p99")}
        limited = sorted({w["driver_limited"] for w in valid if w.get("driver_limited")})
        rows.append({
            "concurrency": level, "deployment": name, "windows": len(valid),
            "windows_invalid": len(group) - len(valid),
            "tokens_counted_by": "/".join(sorted({w.get("tokens_counted_by") or "usage" for w in valid})) or None,
            "output_tokens_per_s": mean("output_tokens_per_s"), "requests_per_s": mean("requests_per_s"),
            "ttft_ms": ttft, "itl_ms": itl,
            "rounds_without_first_token": sum(w.get("rounds_without_first_token") or 0 for w in valid),
            "errors": sum(w["errors"] for w in group), "stalls": sum(w["stalls"] for w in group),
            "verdicts": [v for w in group for v in w.get("verdicts", [])],
            "driver_limited": "; ".join(limited) or None,
        })
    return rows


def bins_by_level(windows: list[dict[str, Any]], deployment: str) -> dict[int, list[list[float]]]:
    """Each level's valid windows of one deployment, as their bins of tokens/s."""
    found: dict[int, list[list[float]]] = {}
    for w in windows:
        if w["deployment"] == deployment and not w.get("invalid"):
            found.setdefault(w["concurrency"], []).append(w["bins_tokens_per_s"])
    return found


def units_by_level(windows: list[dict[str, Any]], deployment: str) -> dict[int, set[str]]:
    """How each level's valid windows counted tokens: usage, or SSE events where no round reported it."""
    found: dict[int, set[str]] = {}
    for w in windows:
        if w["deployment"] == deployment and not w.get("invalid"):
            found.setdefault(w["concurrency"], set()).add(w.get("tokens_counted_by") or "usage")
    return found


def unit_mismatches(a: dict[int, set[str]], b: dict[int, set[str]], name_a: str = "A",
                    name_b: str = "B") -> dict[int, str]:
    """Levels whose windows counted tokens in different units: SSE events are not tokens, so a
    ratio of the two would measure the counting, not the deployment."""
    found = {}
    for level in sorted(set(a) & set(b)):
        if len(a[level] | b[level]) > 1:
            found[level] = (f"counted in different units ({name_a} by {'/'.join(sorted(a[level]))}, "
                            f"{name_b} by {'/'.join(sorted(b[level]))})")
    return found


# What shapes the load a bench puts on a deployment: two runs that differ in one of these do not
# measure the deployment alike, so `repro compare` will not call their difference significant.
LOAD_SETTINGS = ("levels", "duration_s", "warmup_s", "bin_s", "max_tokens", "rounds_per_conversation",
                 "prompt_chars", "prompts_file", "prompts_sha256", "tools", "client", "connections",
                 "client_timeouts", "workers")


def settings_differ(a: dict[str, Any], b: dict[str, Any]) -> dict[str, list[Any]]:
    """{setting: [run A's, run B's]} for each load-shaping setting that differs (None: not recorded)."""
    found = {key: [a.get(key), b.get(key)] for key in LOAD_SETTINGS if a.get(key) != b.get(key)}
    if a.get("prompts_sha256") and a.get("prompts_sha256") == b.get("prompts_sha256"):
        found.pop("prompts_file", None)  # the same prompts under another path
    return found


def bench_data(settings: BenchSettings, windows: list[dict[str, Any]],
               pooled: dict[tuple[int, str], dict[str, list[float]]], *, verdicts: list[dict[str, Any]],
               deployments: list[dict[str, Any]]) -> dict[str, Any]:
    names = [d["name"] for d in deployments]
    levels = []
    if len(names) > 1:
        held = unit_mismatches(units_by_level(windows, names[0]), units_by_level(windows, names[1]))
        levels = level_rows(bins_by_level(windows, names[0]), bins_by_level(windows, names[1]), seed=settings.seed,
                            noise_pct=settings.noise_pct, held=held)
        rows = per_level(windows)
        mark_driver_limited(levels, {"A": limited_levels(rows, names[0]), "B": limited_levels(rows, names[1])})
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


class BenchFileError(ReproError):
    """A folder that holds no readable bench results; one line naming it and the fix."""


def read_bench(folder: Path) -> dict[str, Any]:
    path = Path(folder) / BENCH_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BenchFileError(f"{folder} is not a bench run (no {BENCH_FILE}); pass a folder written by "
                             "`repro bench --out DIR`") from None
    except (OSError, ValueError) as exc:
        raise BenchFileError(f"cannot read {path} ({exc}); pass a folder written by `repro bench --out DIR`") from None
    if not isinstance(data, dict) or data.get("kind") != BENCH_KIND or not isinstance(data.get("windows"), list):
        raise BenchFileError(f"{path} is not a repro bench result; pass a folder written by `repro bench --out DIR`")
    for number, window in enumerate(data["windows"], start=1):
        if problem := _window_problem(window):
            raise BenchFileError(f"{path}: window {number} {problem}; restore the file or bench again with "
                                 "`repro bench --out DIR`")
    if not isinstance(data.get("settings", {}), dict) or not isinstance(data.get("per_level", []), list):
        raise BenchFileError(f"{path}: 'settings' or 'per_level' is malformed; restore the file or bench again "
                             "with `repro bench --out DIR`")
    return data


def _window_problem(window: Any) -> str | None:
    """What makes one bench.json window unusable, or None."""
    if not isinstance(window, dict):
        return "is not an object"
    missing = [key for key in ("deployment", "concurrency", "bins_tokens_per_s") if key not in window]
    if missing:
        return f"lacks {', '.join(repr(k) for k in missing)}"
    if not isinstance(window["concurrency"], int) or isinstance(window["concurrency"], bool):
        return f"has concurrency {window['concurrency']!r}, not a whole number"
    bins = window["bins_tokens_per_s"]
    if not isinstance(bins, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in bins):
        return "has 'bins_tokens_per_s' that is not a list of numbers"
    return None


def limited_levels(per_level_rows: list[dict[str, Any]], deployment: str) -> set[int]:
    """The levels where the driver measuring `deployment` was itself the limit."""
    return {row["concurrency"] for row in per_level_rows
            if row.get("deployment") == deployment and row.get("driver_limited")}


def mark_driver_limited(rows: list[dict[str, Any]], sides: dict[str, set[int]]) -> None:
    """Mark the comparison rows where a side's driver was the limit (`driver_limited`: which sides,
    e.g. "A and B"): their difference may be the client's, not the deployment's."""
    for row in rows:
        found = [side for side, levels in sides.items() if row["concurrency"] in levels]
        row["driver_limited"] = " and ".join(found) or None
        if found:
            row["verdict"] += f" [driver-limited: {row['driver_limited']}]"


def warnings_of(data: dict[str, Any]) -> list[str]:
    """The levels where the driver itself was the limit, and the windows left out, as lines for people."""
    lines = [f"c={row['concurrency']} {row['deployment']}: the driver was the limit ({row['driver_limited']}); "
             "its throughput there measures this client, not the deployment"
             for row in data.get("per_level", []) if row.get("driver_limited")]
    lines += [f"c={w['concurrency']} {w['deployment']} window #{w.get('repeat', 0) + 1}: invalid ({w['invalid']}); "
              "left out of the statistics" for w in data.get("windows", []) if w.get("invalid")]
    return lines
