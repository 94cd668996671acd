"""Staleness and rates (pure), and the Sampler's cadence against real servers on 127.0.0.1."""

from __future__ import annotations

import time

import anyio
import pytest

from probes import Sampler
from probes.staleness import counter_rate, stale_gauges
from repro.core.events import ProbeSample
from repro.core.hop import Hop
from repro.core.snapshot import Snapshot
from tests.support.hostile import hostile_server, respond, silent
from tests.support.metric_pages import SGLANG_CURRENT, VLLM_V1


def sample(dialect="sglang", running=3.0, queued=0.0, itl=100.0, gen=50.0, ok=True, **extra):
    series = {"sglang:num_running_reqs": running, "sglang:num_queue_reqs": queued} if dialect == "sglang" else {
        "vllm:num_requests_running": running}
    return {"ok": ok, "dialect": dialect, "running": running, "queued": queued, "itl_count": itl,
            "gen_tokens_total": gen, "in_flight": None, "series": series, **extra}


def test_frozen_sglang_gauge_with_no_progress_is_stale():
    history = [sample(), sample(), sample()]
    assert stale_gauges(history) == ["sglang:num_running_reqs", "sglang:num_queue_reqs"]


def test_two_samples_are_not_enough():
    assert stale_gauges([sample(), sample()]) == []


def test_progress_counter_moving_means_not_stale():
    assert stale_gauges([sample(itl=100), sample(itl=100), sample(itl=101)]) == []
    assert stale_gauges([sample(gen=1), sample(gen=1), sample(gen=2)]) == []
    moving = [sample(series_extra=1) for _ in range(3)]
    for i, s in enumerate(moving):
        s["series"]["sglang:realtime_tokens_total{mode=decode}"] = float(i)
    assert stale_gauges(moving) == []


def test_gauge_changing_means_refreshed():
    assert stale_gauges([sample(running=3), sample(running=4), sample(running=4)]) == []


def test_zero_gauges_are_never_stale():
    assert stale_gauges([sample(running=0), sample(running=0), sample(running=0)]) == []


def test_vllm_gauges_are_not_marked():
    assert stale_gauges([sample("vllm"), sample("vllm"), sample("vllm")]) == []


def test_unreadable_sample_in_window_breaks_the_run():
    assert stale_gauges([sample(ok=False), sample(), sample()]) == []


def test_counter_rate():
    assert counter_rate({"c": 10.0}, {"c": 30.0}, "c", 2.0) == 10.0
    assert counter_rate({"c": 30.0}, {"c": 5.0}, "c", 2.0) is None  # reset (engine restart)
    assert counter_rate(None, {"c": 5.0}, "c", 2.0) is None
    assert counter_rate({"c": None}, {"c": 5.0}, "c", 2.0) is None


def test_annotate_adds_rates_and_staleness():
    sampler = Sampler([Hop("e", "http://x")], interval=0.5, emit=lambda e: None, origin=0.0)
    base = dict(ok=True, dialect="sglang", running=2.0, queued=0.0, series={"sglang:num_running_reqs": 2.0})
    d1 = sampler.annotate("e", Snapshot(**base, gen_tokens_total=10.0, itl_count=5.0), 100.0)
    assert d1.gen_tokens_per_s is None and d1.stale == []
    d2 = sampler.annotate("e", Snapshot(**base, gen_tokens_total=20.0, itl_count=5.0), 100.5)
    assert d2.gen_tokens_per_s == 20.0 and d2.itl_per_s == 0.0
    d3 = sampler.annotate("e", Snapshot(**base, gen_tokens_total=20.0, itl_count=5.0), 101.0)
    assert d3.stale == []  # gen tokens moved within the last three samples
    d4 = sampler.annotate("e", Snapshot(**base, gen_tokens_total=20.0, itl_count=5.0), 101.5)
    assert d4.stale == ["sglang:num_running_reqs"] and d4.gen_tokens_per_s == 0.0
    failed = sampler.annotate("e", Snapshot(ok=False, error="connect: connection refused"), 102.0)
    assert failed.ok is False and failed.stale == []


@pytest.mark.network
@pytest.mark.anyio
@pytest.mark.timeout(30)
async def test_sampler_runs_every_interval_and_a_hanging_hop_does_not_hold_the_others():
    events: list[ProbeSample] = []
    page = respond("200 OK", SGLANG_CURRENT.encode())
    with hostile_server(page) as good, hostile_server(respond("200 OK", VLLM_V1.encode())) as good2, \
            hostile_server(silent) as stuck:
        hops = [Hop("engine-0", f"http://127.0.0.1:{good.port}"), Hop("engine-1", f"http://127.0.0.1:{good2.port}"),
                Hop("stuck", f"http://127.0.0.1:{stuck.port}")]
        origin = time.monotonic()
        sampler = Sampler(hops, interval=0.2, emit=events.append, origin=origin)
        assert sampler.scrape_timeout == 0.4
        with anyio.move_on_after(1.3):
            await sampler.run()
        assert sampler._client is None  # closed on cancel
        await sampler.sample_now()  # outside run(): uses its own short-lived client
    by_hop: dict[str, list[ProbeSample]] = {}
    for event in events:
        by_hop.setdefault(event.hop, []).append(event)
    assert 4 <= len(by_hop["engine-0"]) <= 9  # every 0.2 s for 1.3 s (7), plus sample_now; slack for a loaded CI box
    assert len(by_hop["engine-1"]) >= 4
    assert 2 <= len(by_hop["stuck"]) <= 5  # bounded at 0.4 s each
    assert all(e.snapshot.ok is False and e.snapshot.error.startswith("timeout") for e in by_hop["stuck"])
    first, second = by_hop["engine-0"][:2]
    assert first.snapshot.running == 12 and 0 < first.t < second.t < 1.5
    assert second.snapshot.gen_tokens_per_s == 0.0
    # The page never changes and running > 0: after three samples the SGLang gauges are stale.
    assert by_hop["engine-0"][3].snapshot.stale == ["sglang:num_running_reqs", "sglang:num_queue_reqs"]
    assert all(e.snapshot.stale == [] for e in by_hop["engine-1"])  # vLLM: not marked
    assert good.connections == 2  # one pooled connection reused by run(), one of sample_now's own client
    assert all(isinstance(e, ProbeSample) for e in events)
