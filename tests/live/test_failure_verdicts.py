"""Failed rounds get verdicts from the same evidence wave as stalls, end to end on 127.0.0.1:
a keep-alive race on reused idle connections, a proxy that resets streams, a dead proxy."""

from __future__ import annotations

import pytest

from tests.support.claims import unbacked_claims
from tests.support.runs import repro_run

pytestmark = [pytest.mark.network, pytest.mark.timeout(120), pytest.mark.slow]



def test_a_connection_reused_after_the_servers_keepalive_is_a_keepalive_race(tmp_path):
    """The proxy closes a kept-alive connection the moment it is reused after 0.5 s idle, as a
    server whose keep-alive timeout just ran out does; the driver keeps connections 10 s."""
    code, summary, err = repro_run("--inject", "keepalive-race=0.5", "--rounds", "3", "--conversations", "1",
                                   "--think-time", "0.8", "--keepalive-expiry", "10", "--stall-after", "2",
                                   "--out", str(tmp_path / "run"))
    assert code == 10, err[-3000:]
    assert summary["rounds_failed"] >= 1
    verdicts = summary["verdicts"]
    assert verdicts and {(v["side"], v["where"], v["kind"], v["outcome"]) for v in verdicts} == {
        ("client", "proxy", "keepalive-race", "failed")}, verdicts
    assert "reused after 0.8 s idle" in verdicts[0]["summary"] or "reused after 0.9 s idle" in verdicts[0]["summary"]
    for verdict in verdicts:
        assert unbacked_claims(verdict) == [], verdict


def test_a_proxy_that_resets_streams_midway_is_named(tmp_path):
    code, summary, err = repro_run("--inject", "truncate-reset=3,after=1", "--rounds", "3", "--conversations", "1",
                                   "--stall-after", "2", "--out", str(tmp_path / "run"))
    assert code == 10, err[-3000:]
    verdicts = summary["verdicts"]
    assert verdicts and all(v["side"] == "client" and v["where"] == "proxy" and v["outcome"] == "failed"
                            for v in verdicts), verdicts
    # It withholds nothing: it cuts streams, fresh ones too (not hop-error: no status was sent).
    assert {v["kind"] for v in verdicts} == {"connection-reset"}, verdicts


# An engine that hangs mid-stream has sent its 200 headers: HAProxy cuts the body (truncated). One
# that loses the request never answers: HAProxy answers 504 itself.
@pytest.mark.parametrize("fault, kind, failure, status", [
    ("hang,after=2", "engine-hung", "truncated", None),
    ("lose,after=2", "engine-frontend-lost", "http", 504),
])
def test_haproxy_timing_out_in_front_of_a_broken_engine_is_server_side(tmp_path, fault, kind, failure, status):
    """HAProxy's `timeout server 2s` turns the hang into a failure: the verdict names the engine
    from the same evidence a stall gets, and which hop produced the status."""
    from repro.lab.stacks import StackUnavailable, haproxy
    from repro.sim import SimConfig, start_sim_process

    try:
        stack = haproxy  # resolved before the engine starts: a missing binary is a skip
        with start_sim_process(SimConfig(fault=fault)) as sim, stack(sim.url, tmp_path, timeout_server=2.0) as proxy:
            code, summary, err = repro_run(
                "--hop", f"name=haproxy,url={proxy.url}/v1,role=proxy,metrics={proxy.metrics_url}",
                "--hop", f"name=engine-0,url={sim.url},role=engine", "--model", "sim-model",
                "--rounds", "3", "--conversations", "1", "--stall-after", "5", "--on-failure", "retire",
                "--out", str(tmp_path / "run"))
    except StackUnavailable as exc:
        pytest.skip(str(exc))
    assert code == 11, err[-3000:]
    verdict = summary["verdicts"][0]
    assert (verdict["side"], verdict["where"], verdict["kind"], verdict["outcome"], verdict["failure"],
            verdict["status"]) == ("server", "engine-0", kind, "failed", failure, status), verdict
    if status == 504:
        assert verdict["summary"].startswith("round failed: HTTP 504"), verdict["summary"]
        produced = next(e for e in verdict["evidence"] if e["signal"] == "round failed")
        assert produced["hop"] == "haproxy", verdict["evidence"]  # its Server header, or its canary's 504
    assert unbacked_claims(verdict) == [], verdict
