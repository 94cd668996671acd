"""The scenario matrix: a topology x a fault x the verdict it must produce, each on its own
stack on 127.0.0.1 (simulated engines, the real sglang-router, the real mitmproxy fault proxy,
the TCP relay), a short multi-round run, and everything torn down, even on failure.

A scenario's expectation comes from what the fault does to the bytes and to the engine,
not from what the code happens to say: a fault that cuts connections is a failure, not a
stall; a fault that withholds bytes is a stall, and its verdict names the side and hop.
"""

from __future__ import annotations

import contextlib
import fnmatch
import io
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

NO_STALL = "no-stall"
FAILURE = "failure"


@dataclass(frozen=True)
class Expect:
    """A verdict (side, kind, and the acceptable hops) or an outcome with no verdict."""

    side: str | None = None
    kinds: tuple[str, ...] = ()
    wheres: tuple[str, ...] = ()
    outcome: str | None = None  # NO_STALL or FAILURE when no verdict is expected

    def text(self) -> str:
        if self.outcome:
            return self.outcome
        return f"{self.side}/{'|'.join(self.wheres)}/{'|'.join(self.kinds)}"


@dataclass(frozen=True)
class Scenario:
    name: str
    topology: str  # direct | proxy | router | proxy-router | pd | relay
    expect: Expect
    engine_fault: str | None = None
    fault_engines: tuple[int, ...] | None = None  # which engines get it (None: all)
    proxy_fault: str | None = None
    relay_fault: str | None = None
    dialect: str = "sglang"
    rounds: int = 4
    conversations: int = 1
    stall_after: float = 1.5
    probe_interval: float = 0.5
    max_tokens: int = 16
    itl: float = 0.005
    kill_proxy_after: float | None = None  # seconds into the run: the proxy's listener dies
    on_failure: str = "continue"
    think_time: float = 0.0


def _verdict(side: str, where: str | tuple[str, ...], *kinds: str) -> Expect:
    return Expect(side=side, kinds=kinds, wheres=(where,) if isinstance(where, str) else where)


CLIENT_AT_PROXY = ("proxy", "connection")
MATRIX: tuple[Scenario, ...] = (
    # Engine direct: every engine fault, and healthy controls.
    Scenario("direct/healthy", "direct", Expect(outcome=NO_STALL), conversations=2),
    Scenario("direct/hang", "direct", _verdict("server", "engine-0", "engine-hung"), engine_fault="hang,after=2"),
    Scenario("direct/lose", "direct", _verdict("server", "engine-0", "engine-frontend-lost"),
             engine_fault="lose,after=2"),
    Scenario("direct/saturate", "direct", _verdict("server", "engine-0", "engine-saturated"),
             engine_fault="saturate", conversations=8, rounds=2, stall_after=0.5, probe_interval=0.25),
    Scenario("direct/saturate-below-trigger", "direct", Expect(outcome=NO_STALL), engine_fault="saturate",
             conversations=8, rounds=2, stall_after=5.0),
    Scenario("direct/crash", "direct", Expect(outcome=FAILURE), engine_fault="crash,after=2"),
    Scenario("direct/metrics-down", "direct", Expect(outcome=NO_STALL), engine_fault="metrics-down"),
    Scenario("direct/zombie", "direct", Expect(outcome=NO_STALL), engine_fault="zombie"),
    Scenario("direct-vllm/healthy", "direct", Expect(outcome=NO_STALL), dialect="vllm", conversations=2),
    Scenario("direct-vllm/hang", "direct", _verdict("server", "engine-0", "engine-hung"),
             engine_fault="hang,after=2", dialect="vllm"),
    # Proxy -> engine: every proxy fault.
    Scenario("proxy/pass", "proxy", Expect(outcome=NO_STALL), proxy_fault="pass", conversations=2),
    Scenario("proxy/wedge-after", "proxy", _verdict("client", CLIENT_AT_PROXY, "connection-wedged"),
             proxy_fault="wedge-after=2"),
    Scenario("proxy/hold-request", "proxy", _verdict("client", "proxy", "request-withheld"),
             proxy_fault="hold-request,after=2"),
    Scenario("proxy/hold-response", "proxy", _verdict("client", "proxy", "response-withheld"),
             proxy_fault="hold-response,after=2"),
    Scenario("proxy/truncate-hold", "proxy", _verdict("client", "proxy", "response-withheld"),
             proxy_fault="truncate-hold=3,after=2"),
    Scenario("proxy/hold-eom", "proxy", _verdict("client", "proxy", "response-withheld"),
             proxy_fault="hold-eom,after=2"),
    Scenario("proxy/buffer-long", "proxy", _verdict("client", "proxy", "response-withheld"),
             proxy_fault="buffer,after=2", max_tokens=150, itl=0.02),
    Scenario("proxy/truncate-reset", "proxy", Expect(outcome=FAILURE), proxy_fault="truncate-reset=3,after=2"),
    Scenario("proxy/drop", "proxy", Expect(outcome=FAILURE), proxy_fault="drop,after=2"),
    Scenario("proxy/delay-small", "proxy", Expect(outcome=NO_STALL), proxy_fault="delay=50"),
    Scenario("proxy/slow-drip-small", "proxy", Expect(outcome=NO_STALL), proxy_fault="slow-drip=20"),
    Scenario("proxy/dead-listener", "proxy", Expect(outcome=FAILURE), proxy_fault="pass", kill_proxy_after=0.3,
             rounds=30, think_time=0.05),
    Scenario("proxy/engine-hang", "proxy", _verdict("server", "engine-0", "engine-hung"),
             proxy_fault="pass", engine_fault="hang,after=2"),
    # TCP relay -> engine: socket-level faults.
    Scenario("relay/freeze", "relay", _verdict("client", "relay", "request-withheld", "response-withheld",
                                                   "connection-wedged"), relay_fault="freeze,after=1s", rounds=100, on_failure="retire"),
    Scenario("relay/latency-small", "relay", Expect(outcome=NO_STALL), relay_fault="latency=20"),
    # Proxy -> real sglang-router -> two engines.
    Scenario("router/healthy", "router", Expect(outcome=NO_STALL), conversations=2),
    Scenario("router/hang-both", "router", _verdict("server", ("engine-0", "engine-1"), "engine-hung"),
             engine_fault="hang,after=1"),
    Scenario("router/one-worker-lost", "router", _verdict("server", "engine-1", "engine-frontend-lost"),
             engine_fault="lose", fault_engines=(1,), conversations=4, rounds=2),
    Scenario("proxy-router/wedge-after", "proxy-router", _verdict("client", CLIENT_AT_PROXY, "connection-wedged"),
             proxy_fault="wedge-after=2"),
    Scenario("proxy-router/hold-response", "proxy-router", _verdict("client", "proxy", "response-withheld"),
             proxy_fault="hold-response,after=2"),
    # The router in PD mode: a prefill and a decode engine.
    Scenario("pd/healthy", "pd", Expect(outcome=NO_STALL)),
    Scenario("pd/decode-hang", "pd", _verdict("server", "decode-0", "engine-hung"), engine_fault="hang,after=2",
             fault_engines=(1,)),
    # The KV transfer never reaches decode: decode parks the request in its transfer queue
    # (sglang:num_decode_transfer_queue_reqs counts it) and no token moves there: decode is hung.
    Scenario("pd/no-transfer", "pd", _verdict("server", "decode-0", "engine-hung"),
             engine_fault="no-transfer,after=2", fault_engines=(1,)),
)


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

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "expected": self.expected, "got": self.got, "match": self.match,
                "confidence": self.confidence, "time_to_verdict_s": self.time_to_verdict_s,
                "verdict_budget_s": self.verdict_budget_s, "duration_s": self.duration_s, "error": self.error}


def select(pattern: str | None) -> list[Scenario]:
    if not pattern:
        return list(MATRIX)
    globbed = pattern if any(c in pattern for c in "*?[") else f"*{pattern}*"
    return [s for s in MATRIX if fnmatch.fnmatch(s.name, globbed)]


def run_scenario(scenario: Scenario, out_dir: Path) -> ScenarioResult:
    started = time.monotonic()
    result = ScenarioResult(scenario.name, scenario.expect.text(), "?", False)
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
    from repro.conversation import PromptSource
    from repro.core.hop import Hop
    from repro.driver import DriverConfig
    from repro.router import start_router
    from repro.run import Run, RunSettings, default_canary_timeout
    from repro.sim import SimConfig, serve_in_thread

    def engine(index: int, role: str = "unified"):
        faulty = scenario.fault_engines is None or index in scenario.fault_engines
        config = SimConfig(dialect=scenario.dialect, itl=scenario.itl, role=role,
                           fault=scenario.engine_fault if faulty else None)
        sim = stack.enter_context(serve_in_thread(config))
        result.urls.append(sim.url)
        return sim

    topology = scenario.topology
    hops: list[Hop] = []
    if topology in ("direct", "proxy", "relay"):
        sim = engine(0)
        hops.append(Hop("engine-0", sim.url, sim.metrics_url))
    elif topology in ("router", "proxy-router"):
        sims = [engine(0), engine(1)]
        router = stack.enter_context(start_router([s.url for s in sims]))
        result.urls.append(router.url)
        hops.append(Hop("router", router.url, router.metrics_url, "router"))
        hops += [Hop(f"engine-{i}", s.url, s.metrics_url) for i, s in enumerate(sims)]
    elif topology == "pd":
        prefill, decode = engine(0, "prefill"), engine(1, "decode")
        router = stack.enter_context(start_router(prefill=[prefill.url], decode=[decode.url]))
        result.urls.append(router.url)
        hops += [Hop("router", router.url, router.metrics_url, "router"),
                 Hop("prefill-0", prefill.url, prefill.metrics_url),
                 Hop("decode-0", decode.url, decode.metrics_url)]
    else:
        raise ValueError(f"unknown topology {topology!r}")
    if topology == "relay":
        from proxies.relay import start_relay

        relay = stack.enter_context(start_relay(hops[0].url, scenario.relay_fault))
        result.urls.append(relay.url)
        hops.insert(0, Hop("relay", relay.url, None, "proxy"))

    inject = scenario.proxy_fault if topology in ("proxy", "proxy-router") else None
    driver = DriverConfig(base_url=hops[0].url, model="sim-model", rounds=scenario.rounds,
                          conversations=scenario.conversations, max_tokens=scenario.max_tokens,
                          think_time=scenario.think_time,
                          stall_after=scenario.stall_after, connect_timeout=2.0, round_timeout=30.0,
                          on_failure=scenario.on_failure)
    settings = RunSettings(driver=driver, prompts=PromptSource(prompt_chars=80), out=out_dir / f"{_slug(scenario.name)}-{time.time_ns()}",
                           hops=hops, inject=inject, probe_interval=scenario.probe_interval,
                           canary_timeout=default_canary_timeout(scenario.stall_after, scenario.probe_interval),
                           run_timeout=90.0)
    run = Run(settings, console=Console(file=io.StringIO(), width=100))
    if scenario.kill_proxy_after is not None:
        run.on_started = lambda handles: _kill_later(handles, scenario.kill_proxy_after)
    outcome = run.execute()
    proxy = run.handles.get("proxy")
    if proxy is not None:
        result.urls += [proxy.url, proxy.metrics_url]
    return outcome.summary, outcome.run_dir


def _kill_later(handles: dict, delay: float) -> None:
    import threading

    proxy = handles.get("proxy")
    if proxy is not None:
        timer = threading.Timer(delay, proxy.stop)
        timer.daemon = True
        timer.start()


def _judge_result(scenario: Scenario, summary: dict, run_dir: Path, result: ScenarioResult) -> None:
    from repro.core import events as ev
    from repro.runlog import read_run_log

    verdicts = summary.get("verdicts") or []
    expect = scenario.expect
    if verdicts:
        first = verdicts[0]
        result.verdict = first
        result.got = f"{first['side']}/{first['where']}/{first['kind']}"
        result.confidence = first["confidence"]
        result.match = (expect.outcome is None and all(
            v["side"] == expect.side and v["kind"] in expect.kinds and v["where"] in expect.wheres for v in verdicts))
        log = read_run_log(run_dir)
        stalls = {(e.conv, e.round): e for e in log.events if isinstance(e, ev.RoundStalled)}
        reached = next((e for e in log.events if isinstance(e, ev.VerdictReached)), None)
        if reached is not None:
            stall = stalls.get((reached.verdict.conversation, reached.verdict.round))
            if stall is not None:
                result.time_to_verdict_s = round(reached.t - stall.last_progress_t, 3)
        result.verdict_budget_s = round(scenario.stall_after + 2 * scenario.probe_interval, 3)
        return
    if summary.get("rounds_failed"):
        result.got = FAILURE
    elif summary.get("rounds_stalled"):
        result.got = "stall-without-verdict"
    else:
        result.got = NO_STALL
    result.match = expect.outcome == result.got


def _slug(name: str) -> str:
    return name.replace("/", "--")
