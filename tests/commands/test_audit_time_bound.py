"""The time bound `repro audit` prints before it starts is true (the audit never takes longer) and
tight (within 3x of what it took) on real stacks where every measurement runs and waits: a proxy
whose keep-alive is shorter than the client's pool (the race probe runs), an engine that keeps a
cancelled stream (each cancel run waits its deadline), a proxy cutting a silent stream (the idle
streams wait the budget for the engine). The bound is built from the deadlines (planned_load)."""

from __future__ import annotations

import re
import time

import pytest

from repro.core.audit_measurements import TimeBound
from repro.session.stack_audit import AuditSettings, planned_load
from repro.sim import SimConfig, start_sim_process
from tests.support.audits import run_audit
from tests.support.stacks import haproxy, nginx, started

pytestmark = [pytest.mark.network, pytest.mark.timeout(180)]

FLAGS = ("--keepalive-limit", "4", "--cancel-deadline", "5", "--ttft-budget", "6", "--request-timeout", "2",
         "--client", "aiohttp")
TIGHT = 3.0


@pytest.mark.parametrize(("launcher", "options"), [
    (nginx, {"keepalive_timeout": 2, "proxy_read_timeout": 3}),
    (haproxy, {"timeout_http_keep_alive": 2, "timeout_server": 3}),
], ids=["nginx", "haproxy"])
def test_the_printed_bound_holds_and_is_within_3x(tmp_path, capsys, launcher, options):
    engine = SimConfig(dialect="vllm", quirks=frozenset({"stuck-after-abort"}), keepalive=3.0)
    with start_sim_process(engine) as sim, started(launcher, sim.url, tmp_path, **options) as proxy:
        start = time.monotonic()
        code, result, err = run_audit(capsys, "--hop", proxy.hop_flag(),
                                      "--hop", f"name=engine-0,url={sim.url},role=engine", *FLAGS)
        took = time.monotonic() - start
    (printed,) = re.findall(r"time: at most (\d+) s \(keep-alive\s+waits", err)
    bound = int(printed)
    assert bound == result["time_bound_s"]
    # every measurement ran and waited, as the bound assumes
    costs = result["costs"]
    assert any(k.startswith("race ") for k in costs[proxy.kind] | costs["engine-0"]), costs
    assert result["cancel_runs"] and result["idle_stream_runs"], result
    print(f"{proxy.kind}: bound {bound} s, took {took:.1f} s ({bound / took:.2f}x)")
    assert took < bound, (took, bound)
    assert bound <= TIGHT * took, (took, bound, err)


def test_the_bound_composes_parallel_parts_by_max_and_sequential_ones_by_sum():
    bound = TimeBound(20.0, (("body and context", 20.0), ("cancel", 52.0), ("idle streams", 15.0)), 30.07)
    assert bound.seconds == 118  # max(20, 20 + 52 + 15) + 30.07, rounded up
    assert bound.text() == ("at most 118 s (keep-alive waits 20 s; alongside: body and context 20 s + cancel 52 s "
                            "+ idle streams 15 s; then race probes 30.07 s)")
    assert TimeBound(75.0, (("body and context", 10.0),)).seconds == 75  # the keep-alive wait dominates
    assert TimeBound(11.0, ()).text() == "at most 11 s (keep-alive waits 11 s)"


def test_the_bound_counts_only_what_will_run():
    from repro.core.hop import Hop

    hops = [Hop("nginx", "http://127.0.0.1:1", role="proxy"), Hop("engine-0", "http://127.0.0.1:2", role="engine")]
    everything = planned_load(hops, AuditSettings(keepalive_limit=10, ttft_budget=10)).time
    # 2 hops, 10 s a request: keep-alive 10 + 10; body and context 2 x 10; cancel 2 x (3 x 2 s gauges
    # read + 10 + 10 deadline); idle streams 10 + 5 margin; race 2 x 10 + 10 + 0.05 past + 3.5 x 5 ms spread
    assert (everything.keepalive_s, everything.steps, everything.race_s) == (
        20.0, (("body and context", 20.0), ("cancel", 52.0), ("idle streams", 15.0)), 30.07)
    lean = planned_load(hops, AuditSettings(keepalive_limit=10, no_race=True, no_cancel=True,
                                            no_idle_stream=True)).time
    assert (lean.seconds, lean.race_s) == (20, 0.0)


def test_a_body_search_past_its_share_of_the_bound_is_cut_and_not_measured(capsys):
    """A hop answering every request 0.4 s late: its bisection (7 requests) outlives the one
    --request-timeout (1 s) its body search gets; the audit stops it there and says so (exit 12)."""
    import asyncio

    from tests.support.hostile import hostile_server, respond

    too_large = respond("413 Payload Too Large", b"too large")

    async def late(reader, writer, index) -> bool:
        await asyncio.sleep(0.4)
        return await too_large(reader, writer, index)

    with hostile_server(late) as server:
        start = time.monotonic()
        code, result, err = run_audit(capsys, "--hop", f"name=slow,url={server.url},role=proxy", "--model", "m",
                                      "--keepalive-limit", "1", "--request-timeout", "1", "--no-race", "--no-cancel",
                                      "--no-idle-stream")
        took = time.monotonic() - start
    (hop,) = result["hops"]
    assert hop["max_body_bytes"] is None
    assert hop["body_how"] == "not measured: unfinished when its 1 s (--request-timeout) ran out"
    assert result["unmeasured"] == ["slow: body limit: unfinished when its 1 s (--request-timeout) ran out"]
    assert took < result["time_bound_s"] == 2, (took, result["time_bound_s"])  # max(1 + 1, 1 x 1)
    assert code == 12
