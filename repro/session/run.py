"""One `repro run`: set up the stack (embedded engine, optional fault proxy), drive it, record it.

Everything started here is stopped here, in reverse order, within bounded time, whatever
happened in between; the log is closed last so that nothing recorded is lost.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import platform
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
from rich.console import Console

from probes.deployment import fault_proxy_record, record_deployment
from probes.sampler import Sampler
from repro.core import events as ev
from repro.core.evidence_book import EvidenceBook
from repro.core.hop import Hop, origin_of, unique_hops
from repro.io.runlog import RunLogWriter, merge_segments_or_keep
from repro.judging.live_judge import LiveJudge, fresh_canary
from repro.load.conversation import PromptSource
from repro.load.driver import Driver, DriverConfig, RoundOutcome
from repro.load.gc_policy import gc_tuned_for_streaming
from repro.load.shards import ShardedDriver
from repro.reporting.summary import summarize
from repro.reporting.terminal import VerdictFeed, verdict_tally

INJECTED_PROXY = "proxy"  # the hop name of the fault proxy `--inject` puts in front


@dataclass
class RunSettings:
    driver: DriverConfig  # base_url "" means: start the embedded engine and drive it
    prompts: PromptSource
    out: Path | None = None
    sim_fault: str | None = None
    sim_dialect: str = "sglang"
    run_timeout: float = 3600.0
    hops: list[Hop] = field(default_factory=list)  # the user's stack, client side first
    inject: str | None = None  # a fault proxy spec to put in front of the first hop
    proxy_mode: str = "inprocess"  # or "subprocess": the injected proxy as its own mitmdump process
    probe_interval: float = 0.5
    canary_timeout: float = 3.0
    embedded_model: str = ""
    workers: int = 1  # above 1: conversations sharded across that many processes (repro/load/shards.py)

    @property
    def embedded(self) -> bool:
        return not self.driver.base_url


@dataclass
class RunResult:
    summary: dict[str, Any]
    run_dir: Path
    reason: str
    outcomes: list[RoundOutcome]


def default_run_dir() -> Path:
    return Path("runs") / f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in ("repro", "aiohttp", "httpx", "anyio", "mitmproxy", "prometheus-client", "msgspec"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def redacted(config: dict[str, Any]) -> dict[str, Any]:
    return {key: ("<redacted>" if "key" in key.lower() and value else value) for key, value in config.items()}


class Run:
    def __init__(self, settings: RunSettings, console: Console | None = None) -> None:
        self.settings = settings
        self.console = console or Console(stderr=True)
        self._verdict_feed = VerdictFeed(self.console)
        self.run_dir = Path(settings.out) if settings.out else default_run_dir()
        self.origin = time.monotonic()
        self.log = RunLogWriter(self.run_dir)
        self.counts = {"done": 0, "failed": 0, "stalled": 0}
        self.flagged: set[tuple[int, int]] = set()  # rounds the watchdog flagged as stalled
        self.driver: Driver | ShardedDriver | None = None
        self.judge: LiveJudge | None = None
        self.book: EvidenceBook | None = None
        self.reason = "completed"
        self.handles: dict[str, Any] = {}  # what this run started itself: "engine", "proxy"
        self._flow_log: Path | None = None  # the injected proxy's flow log, merged as it grows
        self._flow_offset = 0
        self._judgements: anyio.abc.TaskGroup | None = None  # failure verdicts in progress
        # Called once the stack is up, with self.handles (scenarios use it to kill a listener mid-run).
        self.on_started: Any = None

    def now(self) -> float:
        return time.monotonic() - self.origin

    def emit(self, event: ev.Event) -> None:
        self.log.write(event)
        if type(event) is ev.SSEReceived:
            return  # by far the most frequent event, and only the log wants it
        self.observe(event)

    def observe(self, event: ev.Event) -> None:
        """What the run learns from an event (evidence, counts, failures to judge), whichever
        process logged it: a sharded run's workers log their own events and stream them here."""
        if self.book is not None:
            self.book.add(event)
        if isinstance(event, ev.RoundDone):
            self.counts["done"] += 1
        elif isinstance(event, ev.RoundFailed):
            self.counts["failed"] += 1
            if self._judgements is not None and self.judge is not None:
                self._judgements.start_soon(self._judge_failure, event)
        elif isinstance(event, ev.RoundStalled):
            self.counts["stalled"] += 1
            self.flagged.add((event.conv, event.round))

    def execute(self) -> RunResult:
        try:
            return anyio.run(self._main)
        finally:
            self.log.close()
            if self.settings.workers > 1 and (warning := merge_segments_or_keep(self.run_dir)):
                self.console.print(f"[yellow]{warning}[/]")

    async def _main(self) -> RunResult:
        s = self.settings
        with contextlib.ExitStack() as stack:  # everything started is stopped, in reverse order
            hops = await self._build_stack(stack)
            driver_config = dataclasses.replace(s.driver, base_url=hops[0].url,
                                                model=s.driver.model or s.embedded_model)
            self.book = EvidenceBook(hops, stall_after=driver_config.stall_after)
            self.emit(ev.RunStarted(
                t=self.now(),
                config=redacted({
                    **dataclasses.asdict(driver_config), "embedded": s.embedded, "sim_fault": s.sim_fault,
                    "sim_dialect": s.sim_dialect if s.embedded else None, "inject": s.inject,
                    "probe_interval": s.probe_interval, "run_timeout": s.run_timeout, "workers": s.workers,
                }),
                versions=versions(), monotonic_origin=self.origin, wall_clock_origin=time.time(),
                hops=hops,
            ))
            # What each hop runs, read once before any load (bounded: 2 s at most), so that `repro
            # diff` can set two runs' deployments beside their verdicts. The injected proxy is ours:
            # its state is known, and a request through it would count toward its fault.
            known = {INJECTED_PROXY: fault_proxy_record(hops[0].url, s.inject, s.proxy_mode)} if s.inject else {}
            self.emit(ev.DeploymentRecorded(t=self.now(), hops=await record_deployment(
                hops, timeout=2.0, api_key=driver_config.api_key, known=known)))
            sampler = self._sampler(hops)
            self.judge = LiveJudge(
                self.book, emit=self.emit, now=self.now,
                sample_all=sampler.sample_now if sampler is not None else None,
                canary=self._canary_for(driver_config), on_verdict=self._verdict_feed,
                canary_timeout=s.canary_timeout, driver_in_flight=lambda: len(self.driver.in_flight),
            )
            self.driver = (Driver(driver_config, s.prompts, self.emit, origin=self.origin, judge=self.judge)
                           if s.workers <= 1 else
                           ShardedDriver(driver_config, s.prompts, self.observe, workers=s.workers, run_dir=self.run_dir,
                                         origin=self.origin, judge=self.judge, emit=self.emit))
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._watch_signals, tasks.cancel_scope)
                if sampler is not None:
                    tasks.start_soon(sampler.run)
                if self._flow_log is not None:
                    tasks.start_soon(self._follow_flow_log, self._flow_log)
                # Failed rounds are judged beside the run; the run waits for their verdicts (each
                # bounded by the judge budget) before it stops sampling.
                async with anyio.create_task_group() as self._judgements:
                    with anyio.move_on_after(s.run_timeout) as deadline, gc_tuned_for_streaming():
                        await self.driver.run()
                    if deadline.cancelled_caught:
                        self.reason = f"run deadline of {s.run_timeout:g} s passed"
                        self._judgements.cancel_scope.cancel()
                self._judgements = None
                tasks.cancel_scope.cancel()
            if self._flow_log is not None:
                self._drain_flow_log(self._flow_log)
            return self._finish()

    async def _build_stack(self, stack: contextlib.ExitStack) -> list[Hop]:
        """The hops from the client side: an injected proxy, then the user's hops or the embedded engine."""
        s = self.settings
        if s.embedded:
            from repro.sim import SimConfig, start_sim_process

            sim_config = SimConfig(dialect=s.sim_dialect, fault=s.sim_fault)
            sim = await anyio.to_thread.run_sync(start_sim_process, sim_config)
            stack.callback(sim.stop)
            self.handles["engine"] = sim
            s.embedded_model = sim_config.model
            hops = [Hop("engine-0", sim.url)]
        else:
            hops = list(s.hops) or [Hop("target", s.driver.base_url)]
        if s.inject:
            from proxies import start_proxy

            self._flow_log = self.run_dir / "proxy-flows.jsonl"
            upstream = origin_of(hops[0].url)
            proxy = await anyio.to_thread.run_sync(
                lambda: start_proxy(upstream, s.inject, flow_log=self._flow_log, mode=s.proxy_mode))
            stack.callback(proxy.stop)
            self.handles["proxy"] = proxy
            hops = unique_hops([Hop(INJECTED_PROXY, proxy.url + urlsplit(hops[0].url).path, proxy.metrics_url, "proxy"),
                                *hops], "--inject")
        if self.on_started is not None:
            self.on_started(self.handles)
        return hops

    def _sampler(self, hops: list[Hop]) -> Sampler | None:
        if not any(h.metrics_url for h in hops) or self.settings.probe_interval <= 0:
            return None
        return Sampler(hops, interval=self.settings.probe_interval, emit=self.emit, origin=self.origin)

    async def _judge_failure(self, failure: ev.RoundFailed) -> None:
        with anyio.move_on_after(self.settings.driver.judge_budget):
            await self.judge.judge_failure(failure)

    def _canary_for(self, config: DriverConfig):
        return functools.partial(fresh_canary, model=config.model, timeout=self.settings.canary_timeout,
                                 api_key=config.api_key)

    async def _follow_flow_log(self, path: Path) -> None:
        """Merge the proxy's flow log into the run log as it grows (the proxy may be another process)."""
        while True:
            self._drain_flow_log(path)
            await anyio.sleep(0.1)

    def _drain_flow_log(self, path: Path) -> None:
        try:
            with open(path, "rb") as f:
                f.seek(self._flow_offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1  # leave a half-written line for the next pass
        self._flow_offset += end
        for line in data[:end].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            t = record.pop("t_mono", None)
            self.emit(ev.ProxyFlow(t=(t - self.origin) if isinstance(t, (int, float)) else self.now(), data=record))

    async def _watch_signals(self, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                self.reason = f"interrupted by {signal.Signals(signum).name}"
                if self.driver is not None:
                    self.driver.stop_requested = True
                scope.cancel()
                return

    def _finish(self) -> RunResult:
        driver = self.driver
        outcomes = list(driver.outcomes) if driver else []
        if driver is not None:
            recorded = {(o.conv, o.round) for o in outcomes}
            # A round the watchdog had flagged and that never ended stays a stall: that is what
            # on-call saw before pressing Ctrl-C.
            for conv, round_index in sorted(self.flagged - recorded):
                outcomes.append(RoundOutcome(conv, round_index, "stalled", error=self.reason))
                recorded.add((conv, round_index))
            for state in driver.in_flight.values():
                if (state.conv, state.round) not in recorded:
                    outcomes.append(RoundOutcome(state.conv, state.round, "skipped", error=self.reason))
        config = self.settings.driver
        summary = summarize(outcomes, conversations=config.conversations, rounds=config.rounds)
        summary["verdicts"] = [v.to_dict() for v in self.judge.verdicts] if self.judge else []
        summary["verdict_tally"] = verdict_tally(summary["verdicts"])
        summary["run_dir"] = str(self.run_dir)
        summary["reason"] = self.reason
        summary["interrupted"] = self.reason.startswith("interrupted")
        self.emit(ev.RunFinished(t=self.now(), summary=summary, reason=self.reason))
        self.log.flush()
        return RunResult(summary=summary, run_dir=self.run_dir, reason=self.reason, outcomes=outcomes)


def default_canary_timeout(stall_after: float, probe_interval: float) -> float:
    """Two probe intervals (at least 1 s), but short enough that an evidence wave started
    halfway to the trigger ends within the verdict budget: the trigger plus two intervals."""
    interval = probe_interval or 0.5
    return round(min(max(1.0, 2 * interval), stall_after / 2 + 2 * interval - 0.1), 3)

