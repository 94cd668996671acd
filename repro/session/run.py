"""One `repro run`: set up the stack (embedded engine, optional fault proxy), drive it, record it.

Everything started here is stopped here, in reverse order, within bounded time, whatever
happened in between; the log is closed last so that nothing recorded is lost.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
from rich.console import Console

from probes.deployment import fault_proxy_record
from repro.core import events as ev
from repro.core.evidence_book import EvidenceBook
from repro.core.hop import Hop, origin_of, unique_hops
from repro.live.live_judge import LiveJudge
from repro.load.driver import Driver, DriverConfig
from repro.load.driving import RoundDriver
from repro.load.prompts import PromptSource
from repro.load.round import RoundOutcome
from repro.load.shards import ShardedDriver, conversation_ids
from repro.reporting.progress import DEFAULT_PERIOD_S, RunProgress, show_progress, start_lines
from repro.reporting.summary import summarize
from repro.session.lifecycle import Session

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
    progress_every: float = DEFAULT_PERIOD_S  # seconds between progress lines off a terminal; 0: no progress
    shard: str | None = None  # "K/N": this run drives the Kth slice of the conversations (driver.conversation_ids)

    @property
    def embedded(self) -> bool:
        return not self.driver.base_url


@dataclass
class RunResult:
    summary: dict[str, Any]
    run_dir: Path
    reason: str
    outcomes: list[RoundOutcome]


class Run(Session):
    def __init__(self, settings: RunSettings, console: Console | None = None) -> None:
        super().__init__(out=settings.out, console=console, workers=settings.workers)
        self.settings = settings
        self.conversations = len(conversation_ids(settings.driver))  # this run's own: a shard drives a slice
        self.progress = RunProgress(total_rounds=settings.driver.rounds * self.conversations, now=self.now)
        self.flagged: set[tuple[int, int]] = set()  # rounds the watchdog flagged as stalled
        self.tool_replies = self.tool_calls = 0  # completed rounds whose reply called tools, and its calls
        self.driver: RoundDriver | None = None
        self.judge: LiveJudge | None = None
        self.book: EvidenceBook | None = None
        self.handles: dict[str, Any] = {}  # what this run started itself: "engine", "proxy"
        self._flow_log: Path | None = None  # the injected proxy's flow log, merged as it grows
        self._flow_offset = 0
        # Called once the stack is up, with self.handles (scenarios use it to kill a listener mid-run).
        self.on_started: Any = None

    def observe(self, event: ev.Event) -> None:
        super().observe(event)
        self.progress.observe(event)
        if isinstance(event, ev.RoundDone) and event.tool_calls:
            self.tool_replies += 1
            self.tool_calls += event.tool_calls
        if isinstance(event, ev.RoundStalled):
            self.flagged.add((event.conv, event.round))


    def stop_driving(self) -> None:
        if self.driver is not None:
            self.driver.stop_requested = True

    async def main(self) -> RunResult:
        s = self.settings
        with contextlib.ExitStack() as stack:  # everything started is stopped, in reverse order
            hops = await self._build_stack(stack)
            driver_config = dataclasses.replace(s.driver, base_url=hops[0].url,
                                                model=s.driver.model or s.embedded_model)
            self.book = self.evidence_book(hops, stall_after=driver_config.stall_after)
            self.started({
                **dataclasses.asdict(driver_config), "embedded": s.embedded, "sim_fault": s.sim_fault,
                "sim_dialect": s.sim_dialect if s.embedded else None, "inject": s.inject,
                "probe_interval": s.probe_interval, "run_timeout": s.run_timeout, "workers": s.workers, "shard": s.shard,
            }, hops)
            self._say_start(hops)
            # So that `repro diff` can set two runs' deployments beside their verdicts. The injected
            # proxy is ours: its state is known, and a request through it would count toward its fault.
            known = {INJECTED_PROXY: fault_proxy_record(hops[0].url, s.inject, s.proxy_mode)} if s.inject else {}
            await self.record_deployment(hops, api_key=driver_config.api_key, known=known)
            sampler = self.sampler(hops, s.probe_interval)
            self.judge = self.live_judge(self.book, sampler, model=driver_config.model, api_key=driver_config.api_key,
                                         canary_timeout=s.canary_timeout, api=driver_config.api,
                                         driver_in_flight=lambda: len(self.driver.in_flight))
            self.driver = (Driver(driver_config, s.prompts, self.emit, origin=self.origin, judge=self.judge)
                           if s.workers <= 1 else
                           ShardedDriver(driver_config, s.prompts, self.observe, workers=s.workers, run_dir=self.run_dir,
                                         origin=self.origin, judge=self.judge, emit=self.emit))
            beside = [sampler.run] if sampler is not None else []
            beside.append(functools.partial(show_progress, self.progress, self.console,
                                            lambda: len(self.driver.in_flight), period=s.progress_every))
            if self._flow_log is not None:
                beside.append(functools.partial(self._follow_flow_log, self._flow_log))
            await self.drive(self.driver.run, deadline=s.run_timeout, name="run", beside=beside)
            if self._flow_log is not None:
                self._drain_flow_log(self._flow_log)
            return self._finish()

    def _say_start(self, hops: list[Hop]) -> None:
        s = self.settings
        notes = {INJECTED_PROXY: f"fault proxy: {s.inject}"} if s.inject else {}
        if s.embedded:
            notes[hops[-1].name] = "embedded simulated engine" + (f", fault {s.sim_fault}" if s.sim_fault else "")
        target = "the embedded simulated engine" if s.embedded else s.driver.base_url
        for line in start_lines(conversations=self.conversations, rounds=s.driver.rounds, target=target,
                                hops=hops, notes=notes, run_dir=self.run_dir, tools=len(s.prompts.tools),
                                workers=s.workers, shard=s.shard):
            # soft_wrap: a line is never cut, so a long run folder stays one path to copy.
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)

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
        summary = summarize(outcomes, conversations=self.conversations, rounds=config.rounds)
        # How the rounds were driven, beside what came of them: --tools and --workers say so.
        summary.update({"tools": len(self.settings.prompts.tools), "rounds_with_tool_calls": self.tool_replies,
                        "tool_calls": self.tool_calls, "workers": self.settings.workers})
        if self.settings.shard is not None:  # only a shard's summary says which slice it drove
            summary["shard"] = self.settings.shard
        summary.update(self.closing_summary())
        self.finished(summary)
        return RunResult(summary=summary, run_dir=self.run_dir, reason=self.reason, outcomes=outcomes)

