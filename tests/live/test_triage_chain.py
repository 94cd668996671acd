"""`repro triage --pid` on a chain of proxies (issue 31, defect 11): the stuck request is followed
through each hop's sockets on this host to the hop that holds it, not blamed on the first hop.

The stacks, all real processes on 127.0.0.1: the harness (tests/harnesses/openai_chat.py,
AsyncOpenAI: one keep-alive connection) -> nginx (keeps its upstream connections alive) -> a
second proxy -> the simulated engine. The second proxy is either repro's fault proxy (mitmdump,
`wedge-after=2`: its third request on a reused connection is held, fresh ones pass; given as a hop
without a metrics page, as a company proxy is) or HAProxy frozen by SIGSTOP after two rounds.
Healthy, the same chains give no verdict.
"""

from __future__ import annotations

import contextlib
import time

import pytest

from proxies.runner import start_proxy
from repro.sim import SimConfig, serve_in_thread
from tests.support.claims import unbacked_claims
from tests.support.gateways import litellm_gateway
from tests.support.harness_process import harness, run_triage
from tests.support.runs import kinds, repro_run
from tests.support.stacks import haproxy, nginx, started

pytestmark = [pytest.mark.network, pytest.mark.timeout(120), pytest.mark.slow]


@contextlib.contextmanager
def second_proxy(kind: str, engine_url: str, tmp_path, *, fault: bool):
    """(its URL, the HAProxy launcher's Proxy or None) for the proxy behind nginx."""
    if kind == "fault-proxy":
        with start_proxy(engine_url, "wedge-after=2,path=/v1/chat" if fault else None, mode="subprocess") as proxy:
            yield proxy.url, None
    else:
        with started(haproxy, engine_url, tmp_path) as proxy:
            yield proxy.url, proxy


def triage_chain(kind: str, tmp_path, *, fault: bool, name_the_second: bool = True) -> dict:
    with serve_in_thread(SimConfig(keepalive=60)) as sim, \
            second_proxy(kind, sim.url, tmp_path, fault=fault) as (second_url, frozen), \
            started(nginx, second_url, tmp_path) as front, \
            harness("async", front.url + "/v1", think=0.3) as h:
        h.wait_for("done", 2)
        if fault and frozen is not None:
            frozen.freeze()  # HAProxy: the master and its worker, between rounds 2 and 3
        if fault:
            stuck_since = h.wait_for("start", 3)["t"]
            time.sleep(1.5)  # stuck for a while before anyone looks, as in an incident
        else:
            stuck_since = None
        hops = ["--hop", f"name=nginx,url={front.url}/v1,metrics={front.metrics_url},role=proxy"]
        if name_the_second:
            hops += ["--hop", f"name={kind},url={second_url}/v1,role=proxy"]
        code, result, err, began, ended = run_triage(
            "--pid", str(h.pid), *hops, "--hop", f"name=engine-0,url={sim.url},role=engine",
            "--model", "sim-model", "--window", "2", "--json")
        done = [line["round"] for line in h.drain() if line["event"] == "done"]
        second_port = second_url.rsplit(":", 1)[1]
    if fault:
        assert max(done) == 2, f"the harness was not stuck: rounds done {done}"
    return {"code": code, "result": result, "stderr": err, "pid": h.pid, "stuck_since": stuck_since,
            "began": began, "ended": ended, "second_port": second_port, "done": done}


def _verdict(out: dict) -> dict:
    assert out["result"].get("verdicts"), out["stderr"]
    return out["result"]["verdicts"][0]


def test_a_proxy_wedging_behind_nginx_is_where_the_request_is_held():
    """nginx only waits: its upstream connection carries the request (sent, acknowledged, nothing
    back) to the fault proxy, which read it and sent nothing on. Every fresh path answers."""
    out = triage_chain("fault-proxy", None, fault=True)
    verdict = _verdict(out)
    assert out["code"] == 10, out["stderr"]
    assert (verdict["side"], verdict["where"], verdict["kind"], verdict["confidence"]) == \
        ("client", "fault-proxy", "connection-wedged", "high"), verdict["summary"]
    hops = {h["name"]: h for h in out["result"]["hops"]}
    assert all(h["canary"]["ok"] for h in hops.values()), out["stderr"]
    assert "followed through the hops' sockets, nginx -> fault-proxy: the request went into fault-proxy" \
        in verdict["summary"], verdict["summary"]
    assert "fault-proxy holds it" in verdict["summary"] and "its established connections to nginx" in verdict["summary"]
    # Each hop's socket facts are evidence: nginx's connection out waits on the fault proxy.
    by_hop = {e["hop"]: e["value"] for e in verdict["evidence"] if e["signal"] == "socket" and e["hop"] != "nginx"
              or (e["signal"] == "socket" and "; out " in e["value"])}
    assert f"-> 127.0.0.1:{out['second_port']}: sent" in by_hop["nginx"], by_hop
    assert "no connection out sent anything since" in by_hop["fault-proxy"], by_hop
    assert not [line for line in verdict["ruled_out"] if line.startswith("fault-proxy")], verdict["ruled_out"]
    assert unbacked_claims(verdict) == []


@pytest.mark.parametrize("name_the_second", [True, False], ids=["haproxy-given", "haproxy-not-given"])
def test_a_frozen_haproxy_behind_nginx_holds_the_request_unread(name_the_second, tmp_path):
    """HAProxy frozen: nginx's reused upstream connection delivered the request into HAProxy's
    receive queue, unread. Given as a hop or not (found by the port nginx sends to), HAProxy is
    named; nginx only waits on it."""
    out = triage_chain("haproxy", tmp_path, fault=True, name_the_second=name_the_second)
    verdict = _verdict(out)
    assert out["code"] == 10, out["stderr"]
    where = "haproxy" if name_the_second else f"haproxy:{out['second_port']}"
    assert (verdict["side"], verdict["where"]) == ("client", where), verdict["summary"]
    assert verdict["where"] != "nginx"
    followed = [e for e in verdict["evidence"] if e["signal"] == "followed through the hops' sockets"]
    assert followed and followed[0]["hop"] == where, verdict["evidence"]
    assert f"the request waits unread in {where}'s receive queue" in followed[0]["value"], followed
    assert unbacked_claims(verdict) == []


@pytest.mark.parametrize("kind", ["fault-proxy", "haproxy"])
def test_the_same_chains_healthy_give_no_verdict(kind, tmp_path):
    out = triage_chain(kind, tmp_path, fault=False)
    assert len(out["done"]) >= 4, out["done"]
    assert out["code"] == 0 and out["result"]["verdicts"] == [], (out["result"].get("verdicts"), out["stderr"])


# --- repro run: the driver's own stuck connection is the start -------------------------------------

def test_repro_run_follows_its_stuck_round_to_the_proxy_wedging_behind_nginx(tmp_path):
    """`repro run` through nginx to a company proxy (no metrics page) that wedges its reused
    connections: the round's keep-alive connection to nginx is stuck, every fresh path answers.
    The round's request is followed through nginx to the proxy that holds it."""
    with serve_in_thread(SimConfig(keepalive=60)) as sim, \
            second_proxy("fault-proxy", sim.url, tmp_path, fault=True) as (second_url, _), \
            started(nginx, second_url, tmp_path) as front:
        code, summary, err = repro_run(
            "--hop", f"name=nginx,url={front.url}/v1,metrics={front.metrics_url},role=proxy",
            "--hop", f"name=fault-proxy,url={second_url}/v1,role=proxy",
            "--hop", f"name=engine-0,url={sim.url},role=engine", "--model", "sim-model",
            "--rounds", "4", "--conversations", "1", "--think-time", "0.1", "--stall-after", "2",
            "--on-failure", "retire", "--out", str(tmp_path / "run"))
    assert code == 10, err[-3000:]
    assert kinds(summary) == {("client", "fault-proxy", "connection-wedged")}, summary["verdicts"]
    verdict = summary["verdicts"][0]
    assert "to nginx (followed through the hops' sockets, nginx -> fault-proxy: the request went into " \
        "fault-proxy" in verdict["summary"], verdict["summary"]
    assert unbacked_claims(verdict) == []


def test_repro_run_through_a_healthy_chain_completes(tmp_path):
    with serve_in_thread(SimConfig(keepalive=60)) as sim, \
            second_proxy("haproxy", sim.url, tmp_path, fault=False) as (second_url, _), \
            started(nginx, second_url, tmp_path) as front:
        code, summary, err = repro_run(
            "--hop", f"name=nginx,url={front.url}/v1,metrics={front.metrics_url},role=proxy",
            "--hop", f"name=engine-0,url={sim.url},role=engine", "--model", "sim-model",
            "--rounds", "4", "--conversations", "2", "--think-time", "0.1", "--stall-after", "2",
            "--out", str(tmp_path / "run"))
    assert code == 0 and summary["verdicts"] == [], (summary.get("verdicts"), err[-2000:])


@pytest.mark.parametrize("fault", [True, False], ids=["wedging", "healthy"])
def test_a_proxy_wedging_behind_litellm_is_where_the_request_is_held(fault):
    """harness -> LiteLLM (a Python gateway, its own upstream pool) -> the fault proxy wedging
    reused connections -> engine: LiteLLM only waits; the request went into the fault proxy and
    nothing came back. Every fresh path answers. The same chain healthy: nothing stuck."""
    with serve_in_thread(SimConfig(keepalive=60)) as sim, \
            start_proxy(sim.url, "wedge-after=2,path=/v1/chat" if fault else None, mode="subprocess") as wedging, \
            litellm_gateway(wedging.url, master_key=None) as gateway, \
            harness("async", gateway.url + "/v1", think=0.3) as h:
        h.wait_for("done", 2)
        if fault:
            h.wait_for("start", 3)
            time.sleep(1.5)
        code, result, err, began, ended = run_triage(
            "--pid", str(h.pid), "--hop", f"name=litellm,url={gateway.url}/v1,role=router",
            "--hop", f"name=fault-proxy,url={wedging.url}/v1,role=proxy",
            "--hop", f"name=engine-0,url={sim.url},role=engine", "--model", "sim-model", "--window", "2", "--json")
        done = [line["round"] for line in h.drain() if line["event"] == "done"]
    if not fault:
        assert code == 0 and not result["verdicts"], err
        return
    assert max(done) == 2, f"the harness was not stuck: rounds done {done}"
    assert code == 10, err
    verdict = result["verdicts"][0]
    assert (verdict["side"], verdict["where"]) == ("client", "fault-proxy"), verdict["summary"]
    assert not unbacked_claims(verdict), unbacked_claims(verdict)
