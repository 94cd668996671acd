"""`repro audit`'s idle-stream cuts on real parts: the simulated engine holds the audit's one
streamed request's first token back --ttft-budget seconds (a long context's prefill), sent to each
hop at once; a hop whose timer cuts the silent stream sooner is found there (nginx proxy_read_timeout,
HAProxy timeout server), the engine reached directly holding it as asked; a real engine cannot be
asked, so nothing is measured there (said, never "not cut")."""

from __future__ import annotations

import pytest

from repro.sim import SimConfig, start_sim_process
from tests.support.audits import by_name, run_audit
from tests.support.stacks import haproxy, nginx, started

pytestmark = [pytest.mark.network, pytest.mark.timeout(120)]

BUDGET_S = 4.0
CUT_S = 2.0
# The hop's timer runs from its last read of the engine (its request sent, or the answer's headers),
# a few milliseconds after ours starts; its close reaches us over loopback.
CUT_TOLERANCE_S = 0.5


def audit(capsys, *flags: str) -> tuple[int, dict, str]:
    return run_audit(capsys, *flags, "--no-race", "--no-cancel", "--keepalive-limit", "1", "--client", "httpx",
                     "--ttft-budget", str(BUDGET_S))


@pytest.mark.parametrize(("launcher", "options"), [
    (nginx, {"proxy_read_timeout": CUT_S}),
    (haproxy, {"timeout_server": CUT_S}),
], ids=["nginx-proxy_read_timeout", "haproxy-timeout-server"])
def test_a_hop_cutting_a_silent_stream_below_the_budget_is_found_there(tmp_path, capsys, launcher, options):
    with start_sim_process(SimConfig()) as sim, started(launcher, sim.url, tmp_path, **options) as proxy:
        code, result, _ = audit(capsys, "--hop", f"name={proxy.kind},url={proxy.url},role=proxy",
                                "--hop", f"name=engine-0,url={sim.url},role=engine")
    hops = by_name(result)
    cut = hops[proxy.kind]["idle_stream_cut_s"]
    assert cut is not None and abs(cut - CUT_S) <= CUT_TOLERANCE_S, hops[proxy.kind]
    assert hops["engine-0"]["idle_stream_cut_s"] is None
    assert "not cut, its first event came after 4.0 s" in hops["engine-0"]["idle_stream_how"]
    (finding,) = result["findings"]
    assert (finding["side"], finding["where"], finding["kind"]) == ("server", proxy.kind, "idle-stream-cut"), finding
    assert "below the time to first token budget of 4 s" in finding["evidence"][0]
    assert "sent to engine-0, behind it: its first event came after" in finding["evidence"][1]
    assert result["costs"][proxy.kind]["idle stream"]["requests"] == 1
    assert code == 11


def test_a_hop_holding_the_silent_stream_past_the_budget_has_no_finding(tmp_path, capsys):
    with start_sim_process(SimConfig()) as sim, started(nginx, sim.url, tmp_path, proxy_read_timeout=30) as proxy:
        code, result, _ = audit(capsys, "--hop", f"name=nginx,url={proxy.url},role=proxy",
                                "--hop", f"name=engine-0,url={sim.url},role=engine")
    assert [hop["idle_stream_cut_s"] for hop in result["hops"]] == [None, None]
    assert all("not cut" in hop["idle_stream_how"] for hop in result["hops"])
    assert result["findings"] == [] and code == 0


def test_an_engine_that_cannot_hold_a_first_token_back_is_not_measured(tmp_path, capsys):
    """The audit asks the engine's /sim/state whether it is repro's simulated engine; an engine that
    does not answer there as the sim does (here: nothing listening) leaves the idle stream not
    measurable, said so, not "not cut"."""
    from repro.lab.stacks import free_port

    url = f"http://127.0.0.1:{free_port()}"
    code, result, _ = audit(capsys, "--hop", f"name=engine-0,url={url},role=engine", "--model", "m")
    assert result["idle_stream_runs"] == []
    assert any("engine-0 is not repro's simulated engine" in line for line in result["not_measurable"])
    assert result["hops"][0]["idle_stream_how"] == "not measured"
