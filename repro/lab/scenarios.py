"""The scenario matrix: a topology x a fault x the verdict it must produce, each on its own
stack on 127.0.0.1 (simulated engines, the real sglang-router, the real mitmproxy fault proxy,
the TCP relay, and real third-party proxies: nginx, HAProxy, socat, Caddy, a buffering
mitmdump), a short multi-round run, and everything torn down, even on failure.

Real proxies are given to the run as the README tells users (`--hop name=...,url=...,role=proxy
[,metrics=...]`, parsed by the same code), and their faults come from outside, as a timed action
(`action_after`): SIGSTOP of a proxy's processes, of its per-connection children only, or of the
engine process behind it (the simulated engine then runs in its own process); a slow client
holding a server slot. Whatever an action did is undone (SIGCONT, sockets closed) before teardown.

A scenario's expectation comes from what the fault does to the bytes and to the engine,
not from what the code happens to say: a fault that cuts connections is a failure, not a
stall; a fault that withholds bytes is a stall, and its verdict names the side and hop.
"""

from __future__ import annotations

import contextlib
import fnmatch
import io
import signal
import socket
import threading
import time
from collections.abc import Callable
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
    phase: str | None = None  # the stall phase the fault is timed to land in, when the scenario is about it
    evidence: tuple[tuple[str, str], ...] = ()  # (hop, signal) entries every verdict must carry

    def text(self) -> str:
        if self.outcome:
            return self.outcome
        text = f"{self.side}/{'|'.join(self.wheres)}/{'|'.join(self.kinds)}"
        if self.phase:
            text += f" {self.phase}"
        return text + "".join(f" +{hop}:{signal}" for hop, signal in self.evidence)

    def matches(self, verdict: dict[str, Any]) -> bool:
        facts = {(f.get("hop"), f.get("signal")) for f in verdict.get("evidence") or ()}
        return (self.outcome is None and verdict["side"] == self.side and verdict["kind"] in self.kinds
                and verdict["where"] in self.wheres and (self.phase is None or verdict.get("phase") == self.phase)
                and all(needed in facts for needed in self.evidence))


# What a timed action does to a part of the stack (a proxy by its kind, or "engine-0", or the
# injected fault proxy "proxy"): SIGSTOP all its processes; SIGSTOP only its per-connection
# children or workers; stop it (its listener dies); open a request that sends its headers and
# then nothing more (a slow client holding one of the proxy's server slots).
ACTIONS = ("freeze", "freeze-children", "stop", "slow-upload")

# Real-proxy topologies: the proxies from the client side, then one simulated engine process.
REAL_CHAINS: dict[str, tuple[str, ...]] = {
    "nginx": ("nginx",), "haproxy": ("haproxy",), "socat": ("socat",), "caddy": ("caddy",),
    "mitmdump": ("mitmdump",), "nginx-haproxy": ("nginx", "haproxy"),
}


@dataclass(frozen=True)
class Scenario:
    name: str
    topology: str  # direct | proxy | router | proxy-router | pd | relay | a REAL_CHAINS key
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
    # (seconds after the stack is up, "verb part"): a fault from outside, e.g. (1.0, "freeze nginx")
    action_after: tuple[float, str] | None = None
    haproxy_maxconn: int | None = None  # `maxconn N` on HAProxy's server: requests beyond N queue in HAProxy
    on_failure: str = "continue"
    think_time: float = 0.0
    # The verdict is known to be wrong or unstable here (the classifier is owned elsewhere): the
    # expectation stays what it should be, and the test is xfail(strict=False) with this reason.
    known_issue: str | None = None

    def __post_init__(self) -> None:
        if self.action_after is not None:
            verb, _, part = self.action_after[1].partition(" ")
            if verb not in ACTIONS or not part:
                raise ValueError(f"{self.name}: action {self.action_after[1]!r} is not '<{'|'.join(ACTIONS)}> <part>'")

    @property
    def proxies(self) -> tuple[str, ...]:
        """The real third-party proxies this scenario starts (client side first)."""
        return REAL_CHAINS.get(self.topology, ())


def _verdict(side: str, where: str | tuple[str, ...], *kinds: str) -> Expect:
    return Expect(side=side, kinds=kinds, wheres=(where,) if isinstance(where, str) else where)


CLIENT_AT_PROXY = ("proxy", "connection")
# Load shapes for faults from outside, timed by `action_after`. Conversations retire after their
# stalled round, so a run ends soon after its verdict whatever the round count.
# Short rounds, back to back: the fault lands wherever the round is.
FROZEN_LOAD: dict[str, Any] = dict(rounds=60, think_time=0.05, on_failure="retire")
# Short rounds (~0.1 s) two seconds apart: an action at 1.0 s lands between rounds 1 and 2, so
# round 2 is sent into the fault and stalls before its first byte.
BETWEEN_ROUNDS: dict[str, Any] = dict(rounds=6, think_time=2.0, on_failure="retire")
# One long round (400 tokens at 20 ms: 8 s): an action at 1.0 s lands mid-stream.
MID_STREAM: dict[str, Any] = dict(rounds=2, max_tokens=400, itl=0.02, on_failure="retire")


def _engine_frozen(topology: str) -> tuple[Scenario, ...]:
    """SIGSTOP of the engine process behind a real proxy, in each phase of a round."""
    return (
        Scenario(f"{topology}/engine-frozen", topology, _engine_unresponsive("before-first-byte"),
                 action_after=(1.0, "freeze engine-0"), **BETWEEN_ROUNDS),
        Scenario(f"{topology}/engine-frozen-mid-stream", topology, _engine_unresponsive("mid-stream"),
                 action_after=(1.0, "freeze engine-0"), **MID_STREAM),
    )


def _engine_unresponsive(phase: str) -> Expect:
    return Expect("server", ("engine-unresponsive",), ("engine-0",), phase=phase)


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
    Scenario("proxy/dead-listener", "proxy", Expect(outcome=FAILURE), proxy_fault="pass", action_after=(0.3, "stop proxy"),
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
    # Real third-party proxies in front of an engine process, faults from outside (see REAL_CHAINS).
    Scenario("nginx/healthy", "nginx", Expect(outcome=NO_STALL), conversations=2),
    *_engine_frozen("nginx"),
    # nginx SIGSTOPped (master and worker), given with its stub_status page: canary and page go silent.
    Scenario("nginx/frozen", "nginx", _verdict("client", "nginx", "hop-unresponsive"),
             action_after=(1.0, "freeze nginx"), **FROZEN_LOAD),
    Scenario("haproxy/healthy", "haproxy", Expect(outcome=NO_STALL), conversations=2),
    *_engine_frozen("haproxy"),
    Scenario("haproxy/frozen", "haproxy", _verdict("client", "haproxy", "hop-unresponsive"),
             action_after=(1.0, "freeze haproxy"), **FROZEN_LOAD),
    # `maxconn 1` on HAProxy's server and a slow client holding that one slot (headers sent, body
    # never): the next round waits in HAProxy's queue. HAProxy's own counts (backend sessions,
    # queue) show a request the idle engine does not have: the ledger names HAProxy.
    Scenario("haproxy/queue-held", "haproxy", Expect("client", ("request-withheld",), ("haproxy",),
                                                     evidence=(("haproxy", "holds requests"),)),
             haproxy_maxconn=1, action_after=(1.0, "slow-upload haproxy"), **BETWEEN_ROUNDS),
    # socat forks a child per connection: SIGSTOP the children only. The round's reused connection
    # wedges while every fresh connection (a new child) works.
    Scenario("socat/children-frozen", "socat", _verdict("client", ("socat", "connection"), "connection-wedged"),
             action_after=(1.0, "freeze-children socat"), **BETWEEN_ROUNDS),
    # Two proxies in a chain, the inner one frozen: the verdict names the inner one.
    Scenario("nginx-haproxy/inner-frozen", "nginx-haproxy", _verdict("client", "haproxy", "hop-unresponsive"),
             action_after=(1.0, "freeze haproxy"), **FROZEN_LOAD),
    Scenario("caddy/frozen", "caddy", _verdict("client", "caddy", "hop-unresponsive"),
             action_after=(1.0, "freeze caddy"), **FROZEN_LOAD),
    Scenario("caddy/engine-frozen-mid-stream", "caddy",
             _engine_unresponsive("mid-stream"),
             action_after=(1.0, "freeze engine-0"), **MID_STREAM),
    # Plain mitmdump reads each body whole: a healthy engine's tokens (60 at 0.1 s: a 6 s round)
    # never reach the client before the body ends.
    Scenario("mitmdump/buffers-slow-engine", "mitmdump", _verdict("client", "mitmdump", "response-withheld"),
             rounds=1, max_tokens=60, itl=0.1),
    # The same at 0.2 s a token (5 tokens/s per request, a quarter of the 1.5 s trigger apart).
    Scenario("mitmdump/buffers-slower-engine", "mitmdump", _verdict("client", "mitmdump", "response-withheld"),
             rounds=1, max_tokens=40, itl=0.2),
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
    verdicts: list[dict[str, Any]] = field(default_factory=list)  # every verdict, stalls' and failures'
    skipped: str | None = None  # why the scenario could not run here (a proxy not installed)
    known_issue: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "expected": self.expected, "got": self.got, "match": self.match,
                "confidence": self.confidence, "time_to_verdict_s": self.time_to_verdict_s,
                "verdict_budget_s": self.verdict_budget_s, "duration_s": self.duration_s, "error": self.error,
                "skipped": self.skipped, "known_issue": self.known_issue}


def missing_parts(scenario: Scenario) -> str | None:
    """Why this scenario cannot run on this machine (a real proxy not installed), or None."""
    from repro.lab.stacks import missing

    reasons = [reason for kind in scenario.proxies if (reason := missing(kind))]
    return "; ".join(reasons) or None


def select(pattern: str | None) -> list[Scenario]:
    if not pattern:
        return list(MATRIX)
    globbed = pattern if any(c in pattern for c in "*?[") else f"*{pattern}*"
    return [s for s in MATRIX if fnmatch.fnmatch(s.name, globbed)]


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
    from repro.core.hop import Hop
    from repro.lab.router_launcher import start_router
    from repro.load.conversation import PromptSource
    from repro.load.driver import DriverConfig
    from repro.session.run import Run, RunSettings, default_canary_timeout
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
    parts: dict[str, Any] = {}  # what an action can reach, by name
    if topology in REAL_CHAINS:
        hops = _real_stack(scenario, stack, parts, result)
    elif topology in ("direct", "proxy", "relay"):
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
    if scenario.action_after is not None:
        delay, action = scenario.action_after
        undo = _Undo()
        stack.callback(undo.run)  # before the stack's parts stop: thaw what was frozen, close what was opened
        run.on_started = lambda handles: undo.schedule(delay, lambda: _act(action, {**handles, **parts}, undo))
    outcome = run.execute()
    if scenario.action_after is not None and undo.error:
        raise RuntimeError(f"action {scenario.action_after[1]!r} failed: {undo.error}")
    proxy = run.handles.get("proxy")
    if proxy is not None:
        result.urls += [proxy.url, proxy.metrics_url]
    return outcome.summary, outcome.run_dir


def _real_stack(scenario: Scenario, stack: contextlib.ExitStack, parts: dict[str, Any],
                result: ScenarioResult) -> list:
    """A simulated engine in its own process (so SIGSTOP freezes it) behind real proxies, given
    as a user gives them: `--hop name=...,url=...,role=proxy[,metrics=...]`."""
    from repro.core.hop import parse_hop_flag
    from repro.lab import stacks
    from repro.sim import SimConfig, start_sim_process

    sim = stack.enter_context(start_sim_process(SimConfig(dialect=scenario.dialect, itl=scenario.itl,
                                                          fault=scenario.engine_fault)))
    stack.callback(stacks.signal_pids, [sim.process.pid], signal.SIGCONT)  # runs before sim.stop
    parts["engine-0"] = _EngineProcess(sim)
    result.urls.append(sim.url)
    upstream, flags = sim.url, [f"name=engine-0,url={sim.url},role=engine"]
    for kind in reversed(scenario.proxies):  # the innermost first: each proxy's upstream is already up
        options = {"maxconn": scenario.haproxy_maxconn} if kind == "haproxy" else {}
        proxy = stack.enter_context(stacks.LAUNCHERS[kind](upstream, **options))
        parts[kind] = proxy
        result.urls += [proxy.url, *(f"http://127.0.0.1:{port}" for port in proxy.extra_ports)]
        flags.insert(0, proxy.hop_flag(kind))
        upstream = proxy.url
    return [parse_hop_flag(flag) for flag in flags]


@dataclass
class _EngineProcess:
    """The engine process as an action's target: one process, no children."""

    sim: Any

    def pids(self) -> list[int]:
        return [self.sim.process.pid] if self.sim.process.poll() is None else []

    def children(self) -> list[int]:
        return []

    def stop(self) -> None:
        self.sim.stop()


class _Undo:
    """A timed action and what undoes it, run once the scenario's run is over (or failed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._steps: list[Callable[[], None]] = []
        self._timer: threading.Timer | None = None
        self.error: str | None = None  # the action raised: the scenario did not run as written

    def schedule(self, delay: float, action: Callable[[], None]) -> None:
        def fire() -> None:
            with self._lock:
                if not self._done:
                    try:
                        action()
                    except Exception as exc:
                        self.error = f"{type(exc).__name__}: {exc}"

        self._timer = threading.Timer(delay, fire)
        self._timer.daemon = True
        self._timer.start()

    def add(self, step: Callable[[], None]) -> None:
        self._steps.append(step)

    def run(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:  # an action under way finishes first; none starts after this
            self._done = True
        for step in reversed(self._steps):
            with contextlib.suppress(Exception):
                step()


def _act(action: str, parts: dict[str, Any], undo: _Undo) -> None:
    from repro.lab.stacks import signal_pids, slow_upload

    verb, _, name = action.partition(" ")
    target = parts.get(name)
    if target is None:
        raise ValueError(f"action {action!r}: no part named {name!r} (have {', '.join(sorted(parts))})")
    if verb in ("freeze", "freeze-children"):
        pids = target.children() if verb == "freeze-children" else target.pids()
        undo.add(lambda: signal_pids(pids, signal.SIGCONT))
        signal_pids(pids, signal.SIGSTOP)
    elif verb == "stop":
        target.stop()
    elif verb == "slow-upload":
        sock: socket.socket = slow_upload(target.url)
        undo.add(sock.close)


def _judge_result(scenario: Scenario, summary: dict, run_dir: Path, result: ScenarioResult) -> None:
    from repro.core import events as ev
    from repro.io.runlog import read_run_log

    # The matrix judges stall verdicts. A round that failed is judged too (its verdict says which
    # hop produced the failure), but a fault that cuts connections is expected as a failure.
    every = summary.get("verdicts") or []
    result.verdicts = list(every)
    verdicts = [v for v in every if v.get("outcome", "stalled") == "stalled"]
    expect = scenario.expect
    if verdicts:
        first = verdicts[0]
        result.verdict = first
        result.got = f"{first['side']}/{first['where']}/{first['kind']}"
        if expect.phase:
            result.got += f" {first.get('phase')}"
        facts = {(f.get("hop"), f.get("signal")) for f in first.get("evidence") or ()}
        result.got += "".join(f" +{hop}:{signal}" for hop, signal in expect.evidence if (hop, signal) in facts)
        result.confidence = first["confidence"]
        result.match = all(expect.matches(v) for v in verdicts)
        log = read_run_log(run_dir)
        stalls = {(e.conv, e.round): e for e in log.events if isinstance(e, ev.RoundStalled)}
        reached = next((e for e in log.events if isinstance(e, ev.VerdictReached)
                        and getattr(e.verdict, "outcome", "stalled") == "stalled"), None)
        if reached is not None:
            stall = stalls.get((reached.verdict.conversation, reached.verdict.round))
            if stall is not None:
                result.time_to_verdict_s = round(reached.t - stall.last_progress_t, 3)
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
