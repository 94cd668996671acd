"""`repro audit`'s cancel propagation on real parts: a streamed request closed after a few events,
and each hop's gauge read until it lets go. The simulated engine's vLLM quirk (its running gauge
keeps counting a request aborted by a client disconnect, vllm#22545) is a cancel leak at the engine,
also through nginx; the same engine without the quirk, and SGLang's, let go at once."""

from __future__ import annotations

import pytest

from repro.lab.router_launcher import router_available, start_router
from repro.sim import SimConfig, start_sim_process
from tests.support.audits import by_name, run_audit
from tests.support.stacks import nginx, started

pytestmark = [pytest.mark.network, pytest.mark.timeout(120)]

DEADLINE_S = 3.0


def audit(capsys, *flags: str) -> tuple[int, dict, str]:
    return run_audit(capsys, *flags, "--no-race", "--no-idle-stream", "--keepalive-limit", "1", "--client", "httpx",
                     "--cancel-deadline", str(DEADLINE_S))


def test_the_vllm_stuck_after_abort_quirk_is_a_cancel_leak_at_the_engine(capsys):
    with start_sim_process(SimConfig(dialect="vllm", quirks=frozenset({"stuck-after-abort"}))) as sim:
        code, result, _ = audit(capsys, "--hop", f"name=engine-0,url={sim.url},role=engine")
    (finding,) = result["findings"]
    assert (finding["side"], finding["where"], finding["kind"]) == ("server", "engine-0", "cancel-leak"), finding
    assert "engine-0 engine running: 0 before, 1 while streaming, still 1 at" in finding["evidence"][1]
    (hop,) = result["hops"]
    assert hop["cancel_release_s"] is None and "still 1" in hop["cancel_how"]
    assert result["costs"]["engine-0"]["cancel"]["requests"] >= 3  # the stream, and gauges before, during, after
    assert code == 11


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_an_engine_that_lets_go_of_a_cancelled_stream_has_no_finding(capsys, dialect):
    with start_sim_process(SimConfig(dialect=dialect, quirks=frozenset() if dialect == "vllm" else None)) as sim:
        code, result, _ = audit(capsys, "--hop", f"name=engine-0,url={sim.url},role=engine")
    (hop,) = result["hops"]
    assert hop["cancel_release_s"] is not None and hop["cancel_release_s"] < 1.0, hop
    (run,) = result["cancel_runs"]
    assert run["events"] == 3 and run["why"] == ""
    assert result["findings"] == [] and code == 0


def test_through_nginx_the_leak_is_placed_at_the_engine_not_nginx(tmp_path, capsys):
    """nginx closes its upstream connection when the client goes (its Writing count drops at once);
    the engine keeps counting: the engine kept it, in the stream sent to nginx as in the one sent to it."""
    with start_sim_process(SimConfig(dialect="vllm", quirks=frozenset({"stuck-after-abort"}))) as sim, \
            started(nginx, sim.url, tmp_path) as proxy:
        code, result, _ = audit(capsys, "--hop", proxy.hop_flag("nginx"),
                                "--hop", f"name=engine-0,url={sim.url},role=engine")
    (finding,) = result["findings"]
    assert (finding["side"], finding["where"], finding["kind"]) == ("server", "engine-0", "cancel-leak"), finding
    first, second = result["cancel_runs"]
    assert (first["entry"], second["entry"]) == ("nginx", "engine-0")
    nginx_release, engine_release = first["releases"]
    assert nginx_release["hop"] == "nginx" and nginx_release["released_s"] is not None, nginx_release
    assert engine_release["released_s"] is None and engine_release["why"] == "", engine_release
    # the second stream starts from the first one's stuck count: 1 before, 2 while streaming, still 2
    assert (second["releases"][0]["baseline"], second["releases"][0]["last"]) == (1, 2)
    hops = by_name(result)
    assert hops["nginx"]["cancel_release_s"] is not None and hops["engine-0"]["cancel_release_s"] is None
    assert code == 11


def test_a_hop_without_a_metrics_page_is_not_measured_never_released(tmp_path, capsys):
    with start_sim_process(SimConfig(dialect="vllm", quirks=frozenset())) as sim, \
            started(nginx, sim.url, tmp_path) as proxy:
        code, result, _ = audit(capsys, "--hop", f"name=nginx,url={proxy.url},role=proxy",
                                "--hop", f"name=engine-0,url={sim.url},role=engine")
    hops = by_name(result)
    assert hops["nginx"]["cancel_release_s"] is None
    assert "not measured (no metrics page" in hops["nginx"]["cancel_how"]
    assert any(line.startswith("nginx: cancel (stream sent to nginx): no metrics page") for line in
               result["not_measurable"]), result["not_measurable"]
    assert hops["engine-0"]["cancel_release_s"] is not None
    assert result["findings"] == [] and code == 0


@pytest.mark.skipif(not router_available("smg"), reason="smg is not installed")
def test_through_the_smg_router_the_leak_is_placed_at_the_engine(capsys):
    """smg's active gauge (cache_aware: smg_worker_requests_active) drops when the client goes, and it
    passes the close on: the engine alone keeps counting."""
    with start_sim_process(SimConfig(dialect="vllm", quirks=frozenset({"stuck-after-abort"}))) as sim, \
            start_router([sim.url], kind="smg", policy="cache_aware") as router:
        code, result, _ = audit(capsys, "--hop", f"name=smg,url={router.url},metrics={router.metrics_url},role=router",
                                "--hop", f"name=engine-0,url={sim.url},role=engine")
    (finding,) = result["findings"]
    assert (finding["side"], finding["where"], finding["kind"]) == ("server", "engine-0", "cancel-leak"), finding
    hops = by_name(result)
    assert hops["smg"]["cancel_release_s"] is not None, hops["smg"]
    assert "smg router active: 0 before, 1 while streaming, back to 0" in hops["smg"]["cancel_how"]
    assert code == 11
