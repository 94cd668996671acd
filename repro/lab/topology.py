"""The stack a scenario runs on, all on 127.0.0.1: simulated engines (in this process, or in a
process of their own behind real proxies, so SIGSTOP freezes them), the real sglang-router, the
TCP relay, and real third-party proxies (nginx, HAProxy, socat, Caddy, a buffering mitmdump).
Everything started is entered on the caller's ExitStack, so it is torn down even on failure.

Real proxies are given to the run as docs/scenarios.md#real-proxies-as-hops tells users (`--hop name=...,url=...,role=proxy
[,metrics=...]`, parsed by the same code).
"""

from __future__ import annotations

import contextlib
import signal
from dataclasses import dataclass
from typing import Any

from repro.core.hop import Hop, parse_hop_flag
from repro.lab import stacks
from repro.lab.actions import EngineProcess
from repro.lab.matrix import REAL_CHAINS, Scenario
from repro.lab.router_launcher import start_router


@dataclass
class Topology:
    hops: list[Hop]  # client side first
    parts: dict[str, Any]  # what an action can reach, by name
    # The fault the run's own proxy (`--inject`) applies in front of the first hop, or None.
    inject: str | None


def missing_parts(scenario: Scenario) -> str | None:
    """Why this scenario cannot run on this machine (a real proxy not installed), or None."""
    reasons = [reason for kind in scenario.proxies if (reason := stacks.missing(kind))]
    return "; ".join(reasons) or None


def start_topology(scenario: Scenario, stack: contextlib.ExitStack, urls: list[str]) -> Topology:
    """Start the scenario's stack on `stack`; every URL it listens on is appended to `urls`."""
    from proxies.relay import start_relay
    from repro.sim import SimConfig, serve_in_thread

    def engine(index: int, role: str = "unified"):
        faulty = scenario.fault_engines is None or index in scenario.fault_engines
        config = SimConfig(dialect=scenario.dialect, itl=scenario.itl, role=role,
                           fault=scenario.engine_fault if faulty else None, context_length=scenario.context_length)
        sim = stack.enter_context(serve_in_thread(config))
        urls.append(sim.url)
        return sim

    topology = scenario.topology
    hops: list[Hop] = []
    parts: dict[str, Any] = {}
    if topology in REAL_CHAINS:
        hops = _real_chain(scenario, stack, parts, urls)
    elif topology in ("direct", "proxy", "relay"):
        sim = engine(0)
        hops.append(Hop("engine-0", sim.url, sim.metrics_url))
    elif topology in ("router", "proxy-router"):
        sims = [engine(0), engine(1)]
        router = stack.enter_context(start_router([s.url for s in sims]))
        urls.append(router.url)
        hops.append(Hop("router", router.url, router.metrics_url, "router"))
        hops += [Hop(f"engine-{i}", s.url, s.metrics_url) for i, s in enumerate(sims)]
    elif topology == "pd":
        prefill, decode = engine(0, "prefill"), engine(1, "decode")
        router = stack.enter_context(start_router(prefill=[prefill.url], decode=[decode.url]))
        urls.append(router.url)
        hops += [Hop("router", router.url, router.metrics_url, "router"),
                 Hop("prefill-0", prefill.url, prefill.metrics_url),
                 Hop("decode-0", decode.url, decode.metrics_url)]
    else:
        raise ValueError(f"unknown topology {topology!r}")
    if topology == "relay":
        relay = stack.enter_context(start_relay(hops[0].url, scenario.relay_fault))
        urls.append(relay.url)
        hops.insert(0, Hop("relay", relay.url, None, "proxy"))
    inject = scenario.proxy_fault if topology in ("proxy", "proxy-router") else None
    return Topology(hops, parts, inject)


def _real_chain(scenario: Scenario, stack: contextlib.ExitStack, parts: dict[str, Any], urls: list[str]) -> list[Hop]:
    """A simulated engine in its own process (so SIGSTOP freezes it) behind real proxies, given
    as a user gives them: `--hop name=...,url=...,role=proxy[,metrics=...]`."""
    from repro.sim import SimConfig, start_sim_process

    sim = stack.enter_context(start_sim_process(SimConfig(dialect=scenario.dialect, itl=scenario.itl,
                                                          fault=scenario.engine_fault,
                                                          context_length=scenario.context_length)))
    stack.callback(stacks.signal_pids, [sim.process.pid], signal.SIGCONT)  # runs before sim.stop
    parts["engine-0"] = EngineProcess(sim)
    urls.append(sim.url)
    upstream, flags = sim.url, [f"name=engine-0,url={sim.url},role=engine"]
    for kind in reversed(scenario.proxies):  # the innermost first: each proxy's upstream is already up
        options = {"maxconn": scenario.haproxy_maxconn} if kind == "haproxy" else {}
        proxy = stack.enter_context(stacks.LAUNCHERS[kind](upstream, **options))
        parts[kind] = proxy
        urls += [proxy.url, *(f"http://127.0.0.1:{port}" for port in proxy.extra_ports)]
        flags.insert(0, proxy.hop_flag(kind))
        upstream = proxy.url
    return [parse_hop_flag(flag) for flag in flags]
