"""End to end: `repro probe`, scrape, Sampler and canaries against the simulated engine in each
dialect and the real sglang-router in front of two of them, while a known number of streams is
held open."""

from __future__ import annotations

import argparse
import json
import time

import anyio
import pytest

from probes import Sampler, run_canary, scrape
from repro.commands.probe import handle
from repro.core.hop import Hop
from repro.sim import SimConfig, serve_in_thread
from tests.support.held_streams import HeldStreams
from tests.support.ports import refused_port
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.network, pytest.mark.timeout(90)]


def probe_json(capsys, *urls: str) -> tuple[int, list[dict]]:
    code = handle(argparse.Namespace(urls=list(urls), json=True, watch=None, timeout=2.0))
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("dialect", ["sglang", "vllm"])
def test_probe_command_counts_held_streams_on_the_sim(capsys, dialect):
    # A batch of 2 and 5 long streams: 2 running, 3 queued. SGLang publishes its gauges on prefill
    # and every 40 decode steps (itl 10 ms: every 0.4 s), so the numbers settle quickly.
    with serve_in_thread(SimConfig(dialect=dialect, max_running=2, itl=0.01)) as sim:
        with HeldStreams(sim.url, 5) as held:
            seen = []

            def settled():
                code, rows = probe_json(capsys, sim.url)
                row = rows[0]
                seen.append((row["running"], row["queued"], row["error"], held.statuses, sim.app.engine.state()))
                # ...and the first tokens have flowed (the ITL count moves with them).
                return (code, row) if (row["running"], row["queued"]) == (2, 3) and row["itl_count"] else None

            try:
                code, row = wait_for(settled, what=f"{dialect} sim showing 2 running, 3 queued")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; seen: {seen[-3:]}") from None
    assert code == 0 and row["ok"] and row["dialect"] == dialect and row["error"] is None
    assert row["url"] == sim.url + "/metrics" and row["role"] == "engine"
    assert row["itl_count"] > 0


def test_probe_command_unreachable_url_exit_1(capsys):
    code, rows = probe_json(capsys, f"http://127.0.0.1:{refused_port()}/metrics")
    assert code == 1 and rows[0]["ok"] is False and rows[0]["error"] == "connect: connection refused"
    assert {"url", "dialect", "ok", "running", "queued", "error"} <= set(rows[0])


def test_probe_command_table_output(capsys):
    with serve_in_thread(SimConfig(dialect="sglang")) as sim:
        code = handle(argparse.Namespace(urls=[sim.url + "/v1"], json=False, watch=None, timeout=2.0))
    out = capsys.readouterr().out
    assert code == 0 and "sglang" in out and "/metrics" in out and "running" in out


def test_sampler_marks_a_hung_sglang_engines_frozen_gauges_stale():
    events = []
    with serve_in_thread(SimConfig(dialect="sglang", itl=0.01)) as sim:
        sim.arm("hang")
        with HeldStreams(sim.url, 2):
            wait_for(lambda: sim.app.engine.state()["gauge_running"] == 2, what="2 admitted")

            async def sample_for(seconds: float) -> None:
                sampler = Sampler([Hop("engine-0", sim.url)], interval=0.2, emit=events.append, origin=time.monotonic())
                with anyio.move_on_after(seconds):
                    await sampler.run()

            anyio.run(sample_for, 1.1)
            outcome = anyio.run(lambda: run_canary(Hop("engine-0", sim.url), model="sim-model", timeout=1.0))
    data = [e.snapshot.to_dict() for e in events]
    assert len(data) >= 4 and all(d["ok"] and d["running"] == 2 for d in data)
    assert data[0]["stale"] == [] and data[-1]["stale"] == ["sglang:num_running_reqs", "sglang:num_queue_reqs"]
    assert data[-1]["itl_per_s"] == 0.0
    assert not outcome.ok and outcome.failure == "timeout"  # stale-or-hung: the canary says hung


def test_canary_and_scrape_on_a_healthy_sim():
    with serve_in_thread(SimConfig(dialect="vllm")) as sim:
        async def both():
            return (await run_canary(Hop("engine-0", sim.url + "/v1"), model="sim-model", timeout=3),
                    await scrape(Hop("engine-0", sim.url)))

        outcome, snapshot = anyio.run(both)
    assert outcome.ok and outcome.status == 200 and outcome.health_status == 200 and outcome.done
    assert snapshot.ok and snapshot.dialect == "vllm" and snapshot.gen_tokens_total >= 1


def test_probe_router_in_front_of_two_sims(capsys):
    pytest.importorskip("sglang_router")
    from repro.lab.router_launcher import start_router

    with serve_in_thread(SimConfig(itl=0.01)) as a, serve_in_thread(SimConfig(itl=0.01)) as b:
        with start_router([a.url, b.url], policy="cache_aware") as router:
            with HeldStreams(router.url, 3):
                def settled():
                    code, rows = probe_json(capsys, router.metrics_url, a.url, b.url)
                    routers = [r for r in rows if r["role"] == "router"]
                    engines = [r for r in rows if r["role"] == "engine"]
                    ok = (routers and routers[0]["in_flight"] == 3
                          and sum(r["running"] or 0 for r in engines) == 3)
                    return (code, rows) if ok else None

                code, rows = wait_for(settled, timeout=20, what="router in flight 3 and engines running 3")
    assert code == 0
    router_row = next(r for r in rows if r["role"] == "router")
    workers = [r for r in rows if r["role"] == "worker"]
    assert router_row["dialect"] == "sglang-router" and router_row["ok"]
    assert sorted(w["url"] for w in workers) == sorted([a.url, b.url])
    assert sum(w["in_flight"] for w in workers) == 3 and all(w["healthy"] for w in workers)
    assert all(w["via"] == router.metrics_url for w in workers)


def test_repro_probe_through_the_cli(capsys):
    from repro.cli import main

    with serve_in_thread(SimConfig(dialect="vllm")) as sim:
        code = main(["probe", sim.url, "--json", "--timeout", "1"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 0 and rows[0]["dialect"] == "vllm" and rows[0]["ok"]
    assert main(["probe", "localhost:30000"]) == 2
    assert "not an http(s) URL" in capsys.readouterr().err
    assert main(["probe", "http://127.0.0.1:1", "--timeout", "0"]) == 2
