"""The scenario matrix: each scenario is a topology x a fault x the verdict it must produce.

A scenario's expectation comes from what the fault does to the bytes and to the engine,
not from what the code happens to say: a fault that cuts connections is a failure, not a
stall; a fault that withholds bytes is a stall, and its verdict names the side and hop.

Real proxies' faults come from outside, as a timed action (`action_after`, see repro.lab.actions):
SIGSTOP of a proxy's processes, of its per-connection children only, or of the engine process
behind it; a slow client holding a server slot. The stacks themselves are repro.lab.topology's.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any

from repro.lab.actions import ACTIONS

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
    # Whose verdicts the expectation judges: the stalled rounds' (a fault that withholds bytes) or
    # the failed rounds' (one answered with an error: 429, 529, a context refusal).
    round_outcome: str = "stalled"

    def text(self) -> str:
        if self.outcome:
            return self.outcome
        text = f"{self.side}/{'|'.join(self.wheres)}/{'|'.join(self.kinds)}"
        if self.round_outcome != "stalled":
            text = f"{self.round_outcome}: {text}"
        if self.phase:
            text += f" {self.phase}"
        return text + "".join(f" +{hop}:{signal}" for hop, signal in self.evidence)

    def matches(self, verdict: dict[str, Any]) -> bool:
        facts = {(f.get("hop"), f.get("signal")) for f in verdict.get("evidence") or ()}
        return (self.outcome is None and verdict["side"] == self.side and verdict["kind"] in self.kinds
                and verdict["where"] in self.wheres and (self.phase is None or verdict.get("phase") == self.phase)
                and all(needed in facts for needed in self.evidence))


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
    context_length: int | None = None  # the engines' context in tokens (SimConfig.context_length)
    api: str = "chat"  # the wire API the conversations speak (repro.core.wire_api)
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


def _failed(side: str, where: str, *kinds: str) -> Expect:
    """The verdict of a round that failed (an error answered), not of a stall."""
    return Expect(side=side, kinds=kinds, wheres=(where,), round_outcome="failed")


CONTEXT_TOKENS = 120


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


def _wire_api(api: str) -> tuple[Scenario, ...]:
    """The faults that hang multi-round harnesses, under another wire API: judged as under chat."""
    return (
        Scenario(f"{api}/healthy", "direct", Expect(outcome=NO_STALL), api=api, conversations=2),
        Scenario(f"{api}/hang", "direct", _verdict("server", "engine-0", "engine-hung"), engine_fault="hang,after=2",
                 api=api),
        Scenario(f"{api}/wedge-after", "proxy", _verdict("client", CLIENT_AT_PROXY, "connection-wedged"),
                 proxy_fault="wedge-after=2", api=api),
        Scenario(f"{api}/hold-eom", "proxy", _verdict("client", "proxy", "response-withheld"),
                 proxy_fault="hold-eom,after=2", api=api),
        # Answered with an error in the API's own envelope: judged from the round's answer and the
        # engine's fresh canary. An engine's 429 (with Retry-After) is its turning requests away
        # (engine-saturated, docs/verdicts.md); its own "overloaded" words are engine-overloaded.
        Scenario(f"{api}/429", "direct", _failed("server", "engine-0", "engine-saturated"),
                 engine_fault="rate-limit=2,after=2", api=api),
        Scenario(f"{api}/overloaded", "direct", _failed("server", "engine-0", "engine-overloaded"),
                 engine_fault="overloaded,after=2", api=api),
        Scenario(f"{api}/overloaded-via-proxy", "proxy", _failed("server", "engine-0", "engine-overloaded"),
                 proxy_fault="pass", engine_fault="overloaded,after=2", api=api),
        # The conversation outgrows a 120-token context at its third round: the engine refuses it
        # in the API's envelope (Anthropic's invalid_request_error on /v1/messages).
        Scenario(f"{api}/context", "direct", _failed("client", "engine-0", "context-exceeded"),
                 context_length=CONTEXT_TOKENS, api=api),
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
    # The other wire APIs (repro run --api): the same faults, the same verdicts.
    *_wire_api("messages"),
    *_wire_api("responses"),
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


def select(pattern: str | None) -> list[Scenario]:
    if not pattern:
        return list(MATRIX)
    globbed = pattern if any(c in pattern for c in "*?[") else f"*{pattern}*"
    return [s for s in MATRIX if fnmatch.fnmatch(s.name, globbed)]
