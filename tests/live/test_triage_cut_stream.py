"""`repro triage` on a real fault proxy that closes connections in front of a served sim engine: a
fresh canary cut mid-stream (truncate-reset=1: one SSE event of the canary's one-token stream
passes, then the connection closes) or closed before any answer (drop) is connection-reset at the
proxy, client side, never request-withheld: the proxy withholds nothing, it closes. The bug, found
by `repro harness` on Claude Code under reset-mid-stream, judged request-withheld there."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from proxies import start_proxy
from repro.sim import SimConfig, serve_in_thread

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def sim():
    with serve_in_thread(SimConfig()) as served:
        yield served


def triage(proxy_url: str, sim) -> tuple[int, dict, str]:
    args = [sys.executable, "-m", "repro", "triage", "--window", "1", "--interval", "0.5", "--canary-timeout", "2",
            "--json", "--hop", f"name=proxy,url={proxy_url},role=proxy",
            "--hop", f"name=engine-0,url={sim.url},metrics={sim.metrics_url},role=engine"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=45)
    return out.returncode, json.loads(out.stdout or "{}"), out.stderr


@pytest.mark.parametrize(("fault", "said"), [("truncate-reset=1", "it cut the stream after 1 SSE event"),
                                             ("drop", "it closed the connection before any answer")])
def test_a_proxy_closing_the_fresh_canarys_connection_is_a_reset_there(sim, fault, said):
    with start_proxy(sim.url, fault) as proxy:
        code, result, err = triage(proxy.url, sim)
    assert code == 10, err
    hops = {hop["name"]: hop for hop in result["hops"]}
    assert hops["proxy"]["canary"]["failure"] == "reset" and hops["engine-0"]["canary"]["ok"] is True
    verdict = result["verdicts"][0]
    assert (verdict["side"], verdict["where"], verdict["kind"], verdict["confidence"]) == \
        ("client", "proxy", "connection-reset", "high"), verdict["summary"]
    assert said in verdict["summary"] and "withholds the" not in verdict["summary"]
    assert [line.split(":")[0] for line in verdict["ruled_out"]] == ["engine-0"]
    # A cut stream: what closes streams there; a close before any answer: the kind's own action.
    cut = "read and idle timeouts" in verdict["next_action"]["do"]
    assert cut == fault.startswith("truncate"), verdict["next_action"]


def test_a_run_whose_rounds_and_fresh_canaries_are_cut_is_a_reset_at_the_proxy_not_a_hop_error(tmp_path):
    """`repro run --inject truncate-reset=2`: each round's stream is cut (failed, truncated) and the
    judge's fresh canary through the proxy is cut too: before, hop-error (an error status nobody
    answered)."""
    out = subprocess.run([sys.executable, "-m", "repro", "run", "--inject", "truncate-reset=2", "--rounds", "2",
                          "--conversations", "1", "--canary-timeout", "2", "--json", "--out", str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=45)
    assert out.returncode == 10, out.stderr[-2000:]
    verdicts = json.loads(out.stdout)["verdicts"]
    assert verdicts and {(v["side"], v["where"], v["kind"], v["outcome"], v["failure"]) for v in verdicts} == \
        {("client", "proxy", "connection-reset", "failed", "truncated")}, verdicts
