"""Verdicts on stacks of real third-party parts, faults injected from outside: nginx in front of
an engine process that is frozen with SIGSTOP, a plain mitmdump (buffers whole bodies) in front of
a slow but healthy engine, HAProxy queueing behind a slow client. `repro run` is used exactly as
docs/scenarios.md#real-proxies-as-hops tells users. (The scenario matrix runs more of these: `repro scenarios --only haproxy`.)"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from repro.lab.stacks import slow_upload
from repro.sim import SimConfig, start_sim_process
from tests.support.runs import kinds, repro_run
from tests.support.stacks import buffering_mitmdump, haproxy, nginx, started

pytestmark = [pytest.mark.network, pytest.mark.timeout(120), pytest.mark.slow]




def later(seconds: float, action) -> tuple[threading.Thread, threading.Event]:
    cancelled = threading.Event()

    def run() -> None:
        if not cancelled.wait(seconds):
            action()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, cancelled


def test_engine_frozen_behind_nginx_is_server_side(tmp_path):
    with start_sim_process(SimConfig(itl=0.005)) as sim, started(nginx, sim.url, tmp_path) as proxy:
        thread, cancelled = later(2.0, lambda: os.kill(sim.process.pid, signal.SIGSTOP))
        try:
            code, summary, err = repro_run(
                "--hop", f"name=nginx,url={proxy.url}/v1,role=proxy",
                "--hop", f"name=engine-0,url={sim.url},role=engine", "--model", "sim-model",
                "--rounds", "200", "--conversations", "2", "--think-time", "0.05", "--stall-after", "2",
                "--on-failure", "retire", "--out", str(tmp_path / "run"))
        finally:
            cancelled.set()
            thread.join(5)
            os.kill(sim.process.pid, signal.SIGCONT)
    assert code == 11, err[-3000:]
    assert kinds(summary) == {("server", "engine-0", "engine-unresponsive")}, summary["verdicts"]
    for verdict in summary["verdicts"]:
        text = " ".join([verdict["summary"], *verdict["ruled_out"]])
        assert "engines serve" not in text and "answers /health" not in text and "show idle" not in text


def test_buffering_proxy_in_front_of_a_slow_healthy_engine_withholds_the_response(tmp_path):
    """The engine runs the round and its tokens move; the proxy sends nothing until the body ends."""
    with start_sim_process(SimConfig(itl=0.2)) as sim, started(buffering_mitmdump, sim.url, tmp_path) as proxy:
        code, summary, err = repro_run(
            "--hop", f"name=mitmdump,url={proxy.url}/v1,role=proxy",
            "--hop", f"name=engine-0,url={sim.url},role=engine", "--model", "sim-model",
            "--rounds", "1", "--conversations", "1", "--max-tokens", "40", "--stall-after", "2",
            "--probe-interval", "0.5", "--out", str(tmp_path / "run"))
    assert code == 10, err[-3000:]
    assert ("client", "mitmdump", "response-withheld") in kinds(summary), summary["verdicts"]


def test_nginx_frozen_in_front_of_a_healthy_engine_is_a_frozen_hop_not_a_withholding_one(tmp_path):
    """SIGSTOP every nginx process: its canary and its stub_status page both go silent while the
    engine serves fresh requests. Client side, at nginx, and said to be frozen."""
    with start_sim_process(SimConfig(itl=0.005)) as sim, started(nginx, sim.url, tmp_path) as proxy:
        thread, cancelled = later(2.0, proxy.freeze)
        try:
            code, summary, err = repro_run(
                "--hop", f"name=nginx,url={proxy.url}/v1,role=proxy,metrics={proxy.metrics_url}",
                "--hop", f"name=engine-0,url={sim.url},role=engine", "--model", "sim-model",
                "--rounds", "200", "--conversations", "2", "--think-time", "0.05", "--stall-after", "2",
                "--on-failure", "retire", "--out", str(tmp_path / "run"))
        finally:
            cancelled.set()
            thread.join(5)
            proxy.thaw()
    assert code == 10, err[-3000:]
    assert kinds(summary) == {("client", "nginx", "hop-unresponsive")}, summary["verdicts"]
    first = summary["verdicts"][0]
    assert first["summary"].startswith("engines serve fresh requests") and "answers nothing" in first["summary"]


def test_haproxy_queueing_in_front_of_an_idle_engine_withholds_the_request(tmp_path):
    """`maxconn 1` on HAProxy's server, and a client that sends headers and never its body holds
    that slot: the next round waits in HAProxy's queue. HAProxy's exporter, given as the hop's
    metrics, counts it; the engine idles. Client side, at HAProxy, on HAProxy's own count."""
    with start_sim_process(SimConfig(itl=0.005)) as sim, started(haproxy, sim.url, tmp_path, maxconn=1) as proxy:
        held = []
        thread, cancelled = later(2.0, lambda: held.append(slow_upload(proxy.url)))
        try:
            code, summary, err = repro_run(
                "--hop", proxy.hop_flag("haproxy"), "--hop", f"name=engine-0,url={sim.url},role=engine",
                "--model", "sim-model", "--rounds", "20", "--conversations", "1", "--think-time", "0.5",
                "--stall-after", "2", "--on-failure", "retire", "--out", str(tmp_path / "run"))
        finally:
            cancelled.set()
            thread.join(5)
            for sock in held:
                sock.close()
    assert code == 10, err[-3000:]
    assert kinds(summary) == {("client", "haproxy", "request-withheld")}, summary["verdicts"]
    facts = {(f["hop"], f["signal"]) for f in summary["verdicts"][0]["evidence"]}
    assert ("haproxy", "holds requests") in facts, summary["verdicts"][0]["evidence"]
