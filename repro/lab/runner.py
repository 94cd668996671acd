"""Running one scenario of the matrix: its stack up, a short multi-round `repro run` on it (with
the scenario's timed action, if any), everything torn down, even on failure; then its verdicts
checked against what the scenario expects.
"""

from __future__ import annotations

import contextlib
import io
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from repro.lab.actions import TimedAction
from repro.lab.matrix import FAILURE, NO_STALL, Scenario
from repro.lab.topology import missing_parts, start_topology


@dataclass
class ScenarioResult:
    scenario: str
    expected: str
    got: str
    match: bool
    confidence: str | None = None
    time_to_verdict_s: float | None = None
    verdict_budget_s: float | None = None
    duration_s: float = 0.0
    error: str | None = None
    urls: list[str] = field(default_factory=list)
    verdict: dict[str, Any] | None = None
    verdicts: list[dict[str, Any]] = field(default_factory=list)  # every verdict, stalls' and failures'
    skipped: str | None = None  # why the scenario could not run here (a proxy not installed)
    known_issue: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "expected": self.expected, "got": self.got, "match": self.match,
                "confidence": self.confidence, "time_to_verdict_s": self.time_to_verdict_s,
                "verdict_budget_s": self.verdict_budget_s, "duration_s": self.duration_s, "error": self.error,
                "skipped": self.skipped, "known_issue": self.known_issue}


def run_scenario(scenario: Scenario, out_dir: Path) -> ScenarioResult:
    started = time.monotonic()
    result = ScenarioResult(scenario.name, scenario.expect.text(), "?", False, known_issue=scenario.known_issue)
    result.skipped = missing_parts(scenario)
    if result.skipped:
        result.got = "skipped"
        return result
    try:
        with contextlib.ExitStack() as stack:
            summary, run_dir = _run(scenario, stack, out_dir, result)
        _judge_result(scenario, summary, run_dir, result)
    except Exception as exc:  # a scenario that cannot run is a failed row, never a crashed matrix
        result.error = f"{type(exc).__name__}: {exc}"
        result.got = "error"
    result.duration_s = round(time.monotonic() - started, 2)
    return result


def _run(scenario: Scenario, stack: contextlib.ExitStack, out_dir: Path, result: ScenarioResult):
    from repro.live.evidence_wave import default_canary_timeout
    from repro.load.driver import DriverConfig
    from repro.load.prompts import PromptSource
    from repro.session.run import Run, RunSettings

    topology = start_topology(scenario, stack, result.urls)
    driver = DriverConfig(base_url=topology.hops[0].url, model="sim-model", rounds=scenario.rounds,
                          conversations=scenario.conversations, max_tokens=scenario.max_tokens,
                          think_time=scenario.think_time,
                          stall_after=scenario.stall_after, connect_timeout=2.0, round_timeout=30.0,
                          on_failure=scenario.on_failure, api=scenario.api)
    settings = RunSettings(driver=driver, prompts=PromptSource(prompt_chars=80), out=out_dir / f"{_slug(scenario.name)}-{time.time_ns()}",
                           hops=topology.hops, inject=topology.inject, probe_interval=scenario.probe_interval,
                           canary_timeout=default_canary_timeout(scenario.stall_after, scenario.probe_interval),
                           run_timeout=90.0)
    run = Run(settings, console=Console(file=io.StringIO(), width=100))
    action = TimedAction(*scenario.action_after) if scenario.action_after is not None else None
    if action is not None:
        stack.callback(action.undo)  # before the stack's parts stop: thaw what was frozen, close what was opened
        run.on_started = lambda handles: action.start({**handles, **topology.parts})
    outcome = run.execute()
    if action is not None and action.error:
        raise RuntimeError(f"action {action.action!r} failed: {action.error}")
    proxy = run.handles.get("proxy")
    if proxy is not None:
        result.urls += [proxy.url, proxy.metrics_url]
    return outcome.summary, outcome.run_dir


def _judge_result(scenario: Scenario, summary: dict, run_dir: Path, result: ScenarioResult) -> None:
    from repro.core import events as ev
    from repro.io.runlog import read_run_log

    # The matrix judges the verdicts of the rounds its expectation is about: stalled rounds', or
    # failed rounds' (an error answered: who answered and why). A fault that cuts connections is
    # expected as a failure, its verdicts not compared.
    every = summary.get("verdicts") or []
    result.verdicts = list(every)
    expect = scenario.expect
    judged = expect.round_outcome if expect.outcome is None else "stalled"
    verdicts = [v for v in every if v.get("outcome", "stalled") == judged]
    if verdicts:
        first = verdicts[0]
        result.verdict = first
        result.got = f"{first['side']}/{first['where']}/{first['kind']}"
        if judged != "stalled":
            result.got = f"{judged}: {result.got}"
        if expect.phase:
            result.got += f" {first.get('phase')}"
        facts = {(f.get("hop"), f.get("signal")) for f in first.get("evidence") or ()}
        result.got += "".join(f" +{hop}:{signal}" for hop, signal in expect.evidence if (hop, signal) in facts)
        result.confidence = first["confidence"]
        result.match = all(expect.matches(v) for v in verdicts)
        log = read_run_log(run_dir)
        stalls = {(e.conv, e.round): e for e in log.events if isinstance(e, ev.RoundStalled)}
        failures = {(e.conv, e.round): e for e in log.events if isinstance(e, ev.RoundFailed)}
        reached = next((e for e in log.events if isinstance(e, ev.VerdictReached)
                        and getattr(e.verdict, "outcome", "stalled") == judged), None)
        if reached is not None:
            key = (reached.verdict.conversation, reached.verdict.round)
            stall, failure = stalls.get(key), failures.get(key)
            if judged == "stalled" and stall is not None:
                result.time_to_verdict_s = round(reached.t - stall.last_progress_t, 3)
            elif judged == "failed" and failure is not None:
                result.time_to_verdict_s = round(reached.t - failure.t, 3)
        result.verdict_budget_s = round(scenario.stall_after + 2 * scenario.probe_interval, 3)
        return
    if summary.get("rounds_failed"):
        result.got = FAILURE
        result.verdict = every[0] if every else None
    elif summary.get("rounds_stalled"):
        result.got = "stall-without-verdict"
    else:
        result.got = NO_STALL
    result.match = expect.outcome == result.got


def _slug(name: str) -> str:
    return name.replace("/", "--")
