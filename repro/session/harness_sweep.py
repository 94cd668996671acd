"""`repro harness`'s sweep: the harness run once per fault, each run on a fresh simulated engine
behind a fresh fault proxy, in a fresh working folder, bounded by the fault's limit.

Per fault:
- a folder of its own (the harness's working folder and `PWD`, as opencode finds its project by
  `PWD`) holding `notes.txt`, the file the engine's scripted tool calls name, and the harness's
  config rendered from `--config-template` (repro.session.harness_injection);
- the simulated engine playing a scripted agent loop (repro.sim.tool_calls.ToolScript): TOOL_ROUNDS
  rounds calling the first offered of the tool names (opencode's `read`, Claude Code's `Read`)
  on that file, then a text answer; the engine's fault or context length when the fault is its;
- the fault proxy in front of it, with the fault's spec when the fault is the proxy's (counting
  only the API's generation path, so a model list is not a round), and a hold limit past the
  fault's limit (so a hold outlasts the harness's patience, never the sweep's bound);
- the harness pointed at the proxy (environment variables, `{proxy_url}`, the config file), run
  as our child in its own process group and stopped by pid at the limit (repro.io.harness_child).

A harness still running shortly before the limit (repro.core.hung_judgement.judge_at_s) is
judged once, as `repro wrap --inject` judges a stall: triage (repro.live.triage) of the fault proxy
(`proxy`, first) and the simulated engine (`engine-0`), with the harness family's sockets and
threads, in a worker thread waited for at most JUDGE_BOUND_S (signals meanwhile go to the harness).
Then it is waited on to the limit and stopped as before. The judgement is kept only if the run is
hung: a harness that exits during or after it was not. Its canary through the proxy is left out
of the harness's flows.

What became of it is read from its exit and output (did it print the engine's final answer?),
and when the fault met it and what it did next from the proxy's flow log. Every process is
stopped by its handle before the next fault starts; an interrupt stops the sweep after the run
it interrupts.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx

from proxies.runner import start_proxy
from proxies.spec import parse_proxy_fault
from repro.core.harness_faults import HarnessFault
from repro.core.harness_flows import read_flow_facts
from repro.core.harness_outcome import read_outcome
from repro.core.harness_runs import FaultRun
from repro.core.hop import Hop
from repro.core.hung_judgement import (
    JUDGE_BOUND_S,
    JUDGE_CANARY_TIMEOUT_S,
    JUDGE_WINDOW_S,
    HungJudgement,
    judge_at_s,
)
from repro.io.harness_child import STOP_GRACE_S, HarnessChild, forwarding_signals, run_bounded, run_until
from repro.live.triage import judging_failure, triage
from repro.session.harness_injection import Injection, rendered_config
from repro.session.wrapped_harness import INJECTED_PROXY
from repro.sim import SimConfig, start_sim_process

API_PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
TOOL_NAMES = "read,Read,read_file"  # opencode's, Claude Code's, many SDK examples'
TOOL_ROUNDS = 3
REPLY_TOKENS = 20  # the final answer's length in words: long enough not to be printed by chance
NOTES = "notes.txt"
# What the harness reads each tool round: a few KB, so its history (and request body) grows as an
# agent's does when it reads files.
NOTES_TEXT = "".join(f"line {n}: the notes the simulated engine asked the harness to read.\n" for n in range(300))
SETUP_S = 40.0  # the most one fault's setup and teardown take: sim and proxy starts, stops, the harness's stop
STATE_TIMEOUT_S = 5.0
ENGINE_HOP = "engine-0"  # the simulated engine's hop name, as `repro wrap --hop name=engine-0,...` names it


@dataclass(frozen=True)
class SweepPlan:
    argv: tuple[str, ...]
    faults: tuple[HarnessFault, ...]
    api: str = "chat"
    config_template: Path | None = None
    env: Mapping[str, str] | None = None  # the harness's environment before ours is added; None: os.environ
    tool_names: str = TOOL_NAMES
    tool_rounds: int = TOOL_ROUNDS

    @property
    def bound_s(self) -> float:
        """The sweep's worst case: every fault to its limit (or to the end of its judgement, when that
        runs past a short limit), plus each one's setup and teardown."""
        return sum(max(fault.limit_s, judge_at_s(fault.limit_s) + JUDGE_BOUND_S) + SETUP_S for fault in self.faults)


@dataclass
class Sweep:
    plan: SweepPlan
    runs: list[FaultRun] = field(default_factory=list)
    interrupted: bool = False


def _sim_config(fault: HarnessFault, notes: Path, plan: SweepPlan) -> SimConfig:
    return SimConfig(dialect="vllm", reply_tokens=REPLY_TOKENS, tool_rounds=plan.tool_rounds, tool_name=plan.tool_names,
                     tool_path=str(notes), fault=fault.spec if fault.played_by == "engine" else None,
                     context_length=int(fault.spec) if fault.played_by == "context" else None)


def proxy_spec(fault: HarnessFault, api: str) -> str | None:
    """The proxy's spec: the fault's, counting only the API's generation path (unless it says its own)."""
    if fault.played_by != "proxy" or not fault.spec:
        return None
    return fault.spec if "path" in parse_proxy_fault(fault.spec).params else f"{fault.spec},path={API_PATHS[api]}"


def _answered(output: str, answers: Sequence[str]) -> bool:
    """The harness printed one of the engine's last text answers (whitespace aside)."""
    flat = " ".join(output.split())
    return any(answer and " ".join(answer.split()) in flat for answer in answers)


def _answers(sim_url: str) -> list[str]:
    try:
        return list(httpx.get(sim_url + "/sim/state", timeout=STATE_TIMEOUT_S).json().get("answers") or [])
    except (httpx.HTTPError, ValueError):
        return []


@dataclass(frozen=True)
class Judged:
    """A judgement of the running harness, with its moments on the flow log's clock."""

    judgement: HungJudgement
    began: float
    ended: float
    exited_at: float | None  # the harness ended while it was judged: then (so its judgement is dropped)


def judge_running(child: HarnessChild, hops: Sequence[Hop], *, model: str, api: str) -> Judged:
    """One triage of `hops` with the harness family's sockets and threads (its pid and descendants),
    as `repro wrap` judges a stall; in a worker thread, waited for at most JUDGE_BOUND_S. A judgement
    that fails or overruns is said in one line, never raised."""
    began = time.monotonic()
    at_s = began - child.started
    pids = child.family()
    found: list[HungJudgement] = []

    def judge() -> None:
        try:
            result = anyio.run(lambda: triage(list(hops), model=model, window=JUDGE_WINDOW_S,
                                              interval=min(1.0, JUDGE_WINDOW_S / 2),
                                              canary_timeout=JUDGE_CANARY_TIMEOUT_S, pids=pids, apis=(api,)))
        except Exception as exc:  # the judge's own failure is said; the sweep goes on
            found.append(HungJudgement(at_s, error=judging_failure(exc)))
            return
        found.append(HungJudgement(at_s, tuple(result.verdicts)))

    worker = threading.Thread(target=judge, name="harness-judge", daemon=True)
    worker.start()
    deadline = began + JUDGE_BOUND_S
    exited_at: float | None = None
    while worker.is_alive() and time.monotonic() < deadline:
        worker.join(0.05)
        if exited_at is None and child.poll() is not None:
            exited_at = time.monotonic()  # the moment it ended, not the judgement's
    judgement = found[0] if found else HungJudgement(
        at_s, error=f"judging failed: no judgement within {JUDGE_BOUND_S:g} s")
    return Judged(judgement, began, time.monotonic(), exited_at)


def judged_hops(proxy_url: str, proxy_metrics_url: str | None, engine_url: str) -> list[Hop]:
    """The hops a hung run is judged with: the fault proxy first, then the engine, named as `repro
    wrap --inject` names them."""
    return [Hop(INJECTED_PROXY, proxy_url, proxy_metrics_url, "proxy"), Hop(ENGINE_HOP, engine_url)]


def run_fault(plan: SweepPlan, fault: HarnessFault, folder: Path) -> tuple[FaultRun, bool]:
    """One run of the harness under `fault` in `folder`; (the run, whether an interrupt ended it)."""
    notes = folder / NOTES
    notes.write_text(NOTES_TEXT)
    output_path = folder.parent / f"{folder.name}.out"
    config = _sim_config(fault, notes, plan)
    with ExitStack() as stack:
        sim = stack.enter_context(start_sim_process(config))
        proxy = stack.enter_context(start_proxy(sim.url, proxy_spec(fault, plan.api),
                                                flow_log=folder.parent / f"{folder.name}.flows.jsonl",
                                                hold_max=fault.limit_s + STOP_GRACE_S * 4))
        injection = Injection(proxy.url)
        if plan.config_template is not None:
            stack.enter_context(rendered_config(plan.config_template, folder, injection))
        env = injection.environment(os.environ if plan.env is None else plan.env)
        env["PWD"] = str(folder)
        output = stack.enter_context(open(output_path, "wb"))
        child = HarnessChild.start(injection.command(plan.argv), env=env, cwd=folder, stdin=subprocess.DEVNULL,
                                   stdout=output, stderr=subprocess.STDOUT)
        judged: Judged | None = None
        with forwarding_signals(child):  # from its start to its end: a Ctrl-C while it is judged is its too
            end = run_until(child, judge_at_s(fault.limit_s))
            if end is None:  # still running shortly before the limit: judged once, then waited on to it
                judged = judge_running(child, judged_hops(proxy.url, proxy.metrics_url, sim.url),
                                       model=config.model, api=plan.api)
                end = run_bounded(child, fault.limit_s)
        exited_at = None if end.bounded else (judged.exited_at if judged and judged.exited_at else time.monotonic())
        took = (exited_at if exited_at is not None else time.monotonic()) - child.started
        answers = _answers(sim.url)
        records = proxy.flows()
    text = output_path.read_text(errors="replace")
    code = None if end.bounded else end.code
    reading = read_outcome(code, text, answered=code == 0 and _answered(text, answers))
    facts = read_flow_facts(records, engine_fault=fault.played_by != "proxy")
    # We began to stop it at the limit, or once judged if the judgement ran past a short limit.
    stopped_at = max(child.started + fault.limit_s, judged.ended if judged else 0.0) if end.bounded else None
    interrupted = end.interrupted is not None
    # Kept only for a hung run: a harness that ended during or after its judgement was not hung.
    judgement = judged.judgement if judged is not None and end.bounded and not interrupted else None
    return FaultRun(fault, reading, took, facts, child.started, exited_at, stopped_at, interrupted,
                    judgement), interrupted


def run_sweep(plan: SweepPlan, on_run: Callable[[FaultRun], None] = lambda run: None) -> Sweep:
    """Every fault of the plan in turn; `on_run` hears each run as it ends."""
    sweep = Sweep(plan)
    with tempfile.TemporaryDirectory(prefix="repro-harness-") as top:
        for index, fault in enumerate(plan.faults):
            folder = Path(top) / f"{index:02d}-{fault.name}"
            folder.mkdir()
            run, interrupted = run_fault(plan, fault, folder)
            sweep.runs.append(run)
            on_run(run)
            if interrupted:
                sweep.interrupted = True
                break
    return sweep
