"""Verdicts on stacks of real third-party parts, faults injected from outside: nginx in front of
an engine, either of them frozen with SIGSTOP, a plain mitmdump (buffers whole bodies) in front of
a slow but healthy engine, HAProxy queueing behind a slow client. `repro run` is used exactly as
docs/scenarios.md#real-proxies-as-hops tells users. (The scenario matrix runs more of these: `repro scenarios --only haproxy`.)"""

from __future__ import annotations

import os
import signal
import threading
from typing import NamedTuple

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


class Frozen(NamedTuple):
    """What repro says when one part of an nginx -> engine stack is frozen mid-run."""

    exit_code: int
    kinds: set[tuple[str, str, str]]
    first_opens_with: str = ""  # how the first verdict's summary begins
    first_says: str = ""  # words in that summary
    never_says: tuple[str, ...] = ()  # words no verdict's summary or ruled-out line holds


FROZEN = {
    # Server side, at the engine; no sentence says the engines serve fresh requests or look idle.
    "engine": Frozen(11, {("server", "engine-0", "engine-unresponsive")},
                     never_says=("engines serve", "answers /health", "show idle")),
    # Every nginx process: its canary and its stub_status page both go silent while the engine serves
    # fresh requests. Client side, at nginx, and said to be frozen, not withholding.
    "nginx": Frozen(10, {("client", "nginx", "hop-unresponsive")},
                    first_opens_with="engines serve fresh requests", first_says="answers nothing"),
}


@pytest.mark.parametrize("frozen", list(FROZEN))
def test_a_part_frozen_in_an_nginx_stack_is_placed_on_that_part(tmp_path, frozen):
    wanted = FROZEN[frozen]
    with start_sim_process(SimConfig(itl=0.005)) as sim, started(nginx, sim.url, tmp_path) as proxy:
        freeze, thaw = ((lambda: os.kill(sim.process.pid, signal.SIGSTOP), lambda: os.kill(sim.process.pid, signal.SIGCONT))
                        if frozen == "engine" else (proxy.freeze, proxy.thaw))
        thread, cancelled = later(2.0, freeze)
        try:
            code, summary, err = repro_run(
                "--hop", f"name=nginx,url={proxy.url}/v1,role=proxy,metrics={proxy.metrics_url}",
                "--hop", f"name=engine-0,url={sim.url},role=engine", "--model", "sim-model",
                "--rounds", "200", "--conversations", "2", "--think-time", "0.05", "--stall-after", "2",
                "--on-failure", "retire", "--out", str(tmp_path / "run"))
        finally:
            cancelled.set()
            thread.join(5)
            thaw()
    assert code == wanted.exit_code, err[-3000:]
    assert kinds(summary) == wanted.kinds, summary["verdicts"]
    first = summary["verdicts"][0]["summary"]
    assert first.startswith(wanted.first_opens_with) and wanted.first_says in first, first
    for verdict in summary["verdicts"]:
        text = " ".join([verdict["summary"], *verdict["ruled_out"]])
        assert not any(words in text for words in wanted.never_says), text


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
