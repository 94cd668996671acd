"""One `repro run`: set up the stack (embedded engine, optional fault proxy), drive it, record it.

Everything started here is stopped here, in reverse order, within bounded time, whatever
happened in between; the log is closed last so that nothing recorded is lost.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import signal
import time
from dataclasses import dataclass
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console

from repro import events as ev
from repro.conversation import PromptSource
from repro.driver import Driver, DriverConfig, RoundOutcome
from repro.runlog import RunLogWriter
from repro.summary import summarize


@dataclass
class RunSettings:
    driver: DriverConfig  # base_url "" means: start the embedded engine and drive it
    prompts: PromptSource
    out: Path | None = None
    sim_fault: str | None = None
    sim_dialect: str = "sglang"
    run_timeout: float = 3600.0

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
    for name in ("repro", "httpx", "anyio", "mitmproxy", "prometheus-client", "msgspec"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def redacted(config: dict[str, Any]) -> dict[str, Any]:
    return {key: ("<redacted>" if "key" in key.lower() and value else value) for key, value in config.items()}


class Run:
    def __init__(self, settings: RunSettings, console: Console | None = None) -> None:
        self.settings = settings
        self.console = console or Console(stderr=True)
        self.run_dir = Path(settings.out) if settings.out else default_run_dir()
        self.origin = time.monotonic()
        self.log = RunLogWriter(self.run_dir)
        self.counts = {"done": 0, "failed": 0, "stalled": 0}
        self.driver: Driver | None = None
        self.reason = "completed"

    def now(self) -> float:
        return time.monotonic() - self.origin

    def emit(self, event: ev.Event) -> None:
        self.log.write(event)
        if isinstance(event, ev.RoundDone):
            self.counts["done"] += 1
        elif isinstance(event, ev.RoundFailed):
            self.counts["failed"] += 1
        elif isinstance(event, ev.RoundStalled):
            self.counts["stalled"] += 1

    def execute(self) -> RunResult:
        try:
            return anyio.run(self._main)
        finally:
            self.log.close()

    async def _main(self) -> RunResult:
        s = self.settings
        with contextlib.ExitStack() as stack:
            driver_config = s.driver
            if s.embedded:
                driver_config = await self._start_embedded_engine(stack)
            self.emit(ev.RunStarted(
                t=self.now(),
                config=redacted({
                    **dataclasses.asdict(driver_config), "embedded": s.embedded, "sim_fault": s.sim_fault,
                    "sim_dialect": s.sim_dialect if s.embedded else None, "run_timeout": s.run_timeout,
                }),
                versions=versions(), monotonic_origin=self.origin, wall_clock_origin=time.time(),
                hops=[{"name": "engine-0" if s.embedded else "target", "url": driver_config.base_url}],
            ))
            self.driver = Driver(driver_config, s.prompts, self.emit, origin=self.origin)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._watch_signals, tasks.cancel_scope)
                with anyio.move_on_after(s.run_timeout) as deadline:
                    await self.driver.run()
                if deadline.cancelled_caught:
                    self.reason = f"run deadline of {s.run_timeout:g} s passed"
                tasks.cancel_scope.cancel()
            return self._finish()

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
            for state in driver.in_flight.values():
                outcomes.append(RoundOutcome(state.conv, state.round, "skipped", error=self.reason))
        config = self.settings.driver
        summary = summarize(outcomes, conversations=config.conversations, rounds=config.rounds)
        summary["verdicts"] = []
        summary["run_dir"] = str(self.run_dir)
        summary["reason"] = self.reason
        summary["interrupted"] = self.reason.startswith("interrupted")
        self.emit(ev.RunFinished(t=self.now(), summary=summary, reason=self.reason))
        self.log.flush()
        return RunResult(summary=summary, run_dir=self.run_dir, reason=self.reason, outcomes=outcomes)

    async def _start_embedded_engine(self, stack: contextlib.ExitStack) -> DriverConfig:
        from repro.sim import SimConfig, start_sim_process

        s = self.settings
        sim_config = SimConfig(dialect=s.sim_dialect, fault=s.sim_fault)
        sim = await anyio.to_thread.run_sync(start_sim_process, sim_config)
        stack.callback(sim.stop)
        return dataclasses.replace(s.driver, base_url=sim.url, model=s.driver.model or sim_config.model)
