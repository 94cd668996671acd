"""`repro watch` end to end: a real subprocess in front of the simulated engine (and the fault
proxy), read through its /metrics and /status.json as Prometheus and the page read them.

Faults are switched at runtime, so that an incident can be seen to clear: the engine's through
its admin endpoint (POST/DELETE /sim/fault), the proxy's through its handle (disarm, then release
what it holds)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from proxies import start_proxy
from repro.core.watch_status import METRICS
from repro.io.rotating_log import list_segments
from repro.reporting.watch_rules import dashboard_json, rules_yaml
from repro.sim import SimConfig, serve_in_thread
from tests.support.hostile import close_mid_chunk, hostile_server, malformed_json
from tests.support.ports import refused_port
from tests.support.waiting import wait_for
from tests.support.watching import FAST, arm, engine_hop, open_incidents, repro_watch, rounds

pytestmark = [pytest.mark.network, pytest.mark.timeout(180)]

def test_rounds_count_up_and_sigterm_ends_it_with_the_log_closed(tmp_path):
    with serve_in_thread(SimConfig()) as sim, repro_watch(tmp_path, "--hop", engine_hop(sim.url), *FAST) as watch:
        first = wait_for(lambda: rounds(watch, "completed"), timeout=30, what="a completed round")
        wait_for(lambda: rounds(watch, "completed") > first, timeout=30, what="more completed rounds")
        assert watch.sample("repro_watch_hop_up", hop="engine-0") == 1
        assert watch.sample("repro_watch_hops") == 1
        assert not open_incidents(watch)
        status = watch.status()
        assert status["hops"][0]["name"] == "engine-0" and status["hops"][0]["up"] is True
        assert status["cost"]["requests_per_min"] == pytest.approx(2 * 60 / 0.2)
        page = watch.get("/")
        assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
        metrics = watch.get("/metrics")
        assert metrics.headers["Content-Type"] == CONTENT_TYPE_LATEST
        started = time.monotonic()
        assert watch.stop(timeout=15) == 0
        assert time.monotonic() - started < 10
    log = watch.log_lines()
    assert '"type":"run_started"' in log[0] and '"type":"run_finished"' in log[-1]
    assert "interrupted by SIGTERM" in log[-1]
    assert "cost: at most 600 chat requests/min" in watch.said


def test_a_hung_engine_is_an_incident_at_the_engine_that_clears_once_a_conversation_completes(tmp_path):
    with serve_in_thread(SimConfig()) as sim, repro_watch(tmp_path, "--hop", engine_hop(sim.url), *FAST) as watch:
        wait_for(lambda: rounds(watch, "completed"), timeout=30, what="a completed round")
        arm(sim.url, "hang")
        wait_for(lambda: ("server", "engine-0", "engine-hung") in open_incidents(watch), timeout=40,
                 what="the engine-hung incident")
        assert watch.sample("repro_watch_verdicts_total", side="server", where="engine-0", kind="engine-hung") >= 1
        info = [dict(labels) for (name, labels), value in watch.metrics().items()
                if name == "repro_watch_incident_info" and value == 1]
        assert len(info) == 1 and info[0]["kind"] == "engine-hung" and info[0]["segment"] == list_segments(watch.run_dir)[-1].name
        assert "engine-0" in info[0]["summary"] and info[0]["next_action"].startswith("restart the engine")
        status = watch.status()
        assert [(i["side"], i["where"], i["kind"]) for i in status["open_incidents"]] == \
            [("server", "engine-0", "engine-hung")]
        assert status["verdicts"][-1]["kind"] == "engine-hung"
        wait_for(lambda: watch.sample("repro_watch_hop_up", hop="engine-0") == 0, timeout=20,
                 what="the hung engine's canary failing")
        arm(sim.url, None)  # lifted: the stuck requests are let go, new ones answer
        wait_for(lambda: not open_incidents(watch), timeout=40, what="the incident clearing")
        # Cleared, not forgotten: the series stays at 0 so that an alert resolves; the info goes.
        assert watch.sample("repro_watch_incident", side="server", where="engine-0", kind="engine-hung") == 0
        assert not any(name == "repro_watch_incident_info" for name, _ in watch.metrics())
        assert watch.status()["open_incidents"] == []
        assert watch.stop() == 0


def test_a_proxy_wedging_reused_connections_is_client_side_at_the_proxy_as_repro_run_says(tmp_path):
    with serve_in_thread(SimConfig()) as sim, start_proxy(sim.url, "wedge-after=3") as proxy, \
            repro_watch(tmp_path, "--hop", f"name=proxy,url={proxy.url},metrics={proxy.metrics_url},role=proxy",
                        "--hop", engine_hop(sim.url), *FAST, "--rounds", "6") as watch:
        wait_for(lambda: ("client", "proxy", "connection-wedged") in open_incidents(watch), timeout=60,
                 what="the connection-wedged incident")
        assert open_incidents(watch) == {("client", "proxy", "connection-wedged")}
        # Fresh connections go through: both hops are up while the reused ones hang.
        assert watch.sample("repro_watch_hop_up", hop="proxy") == 1
        assert watch.sample("repro_watch_hop_up", hop="engine-0") == 1
        proxy.disarm()
        proxy.release()
        wait_for(lambda: not open_incidents(watch), timeout=60, what="the incident clearing")
        assert watch.stop() == 0


def test_a_hop_refusing_connections_is_evidence_not_the_end_of_the_watch(tmp_path):
    port = refused_port()
    with repro_watch(tmp_path, "--hop", engine_hop(f"http://127.0.0.1:{port}", "engine-9"), *FAST,
                     "--model", "sim-model") as watch:
        wait_for(lambda: ("server", "engine-9", "engine-unreachable") in open_incidents(watch), timeout=40,
                 what="the engine-unreachable incident")
        failed = rounds(watch, "failed")
        assert watch.sample("repro_watch_hop_up", hop="engine-9") == 0
        assert watch.status()["hops"][0]["reason"]
        # The engine comes up on that port: the watch, still running, sees it answer and clears.
        with serve_in_thread(SimConfig(port=port)):
            wait_for(lambda: not open_incidents(watch), timeout=40, what="the incident clearing")
            assert watch.sample("repro_watch_hop_up", hop="engine-9") == 1
        assert rounds(watch, "failed") >= failed
        assert watch.process.poll() is None
        assert watch.stop() == 0


def test_file_descriptors_stay_flat_over_ten_cycles(tmp_path):
    def fds(pid: int) -> int:
        return len(os.listdir(f"/proc/{pid}/fd"))

    with serve_in_thread(SimConfig(itl=0.001)) as sim, \
            repro_watch(tmp_path, "--hop", engine_hop(sim.url), "--think", "0", "--rounds", "2",
                        "--probe-interval", "0.5", "--canary-every", "1") as watch:
        # Each cycle: 2 conversations x 2 rounds, and at least MIN_CYCLE_S (1 s) long.
        wait_for(lambda: rounds(watch, "completed") >= 8, timeout=30, what="two cycles")
        before = fds(watch.process.pid)
        at = rounds(watch, "completed")
        wait_for(lambda: rounds(watch, "completed") >= at + 40, timeout=60, what="ten more cycles")
        after = fds(watch.process.pid)
        assert after <= before + 3, (before, after)
        assert watch.stop() == 0


def test_a_port_in_use_is_one_line_naming_listen_and_nothing_is_written(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "repro", "watch", "--hop", "name=e,url=http://127.0.0.1:1",
                              "--listen", f"127.0.0.1:{port}", "--out", str(tmp_path / "w")],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--listen 127.0.0.1:{port}" in lines[0] and "in use" in lines[0]
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize(("flag", "text"), [("--rules", rules_yaml), ("--dashboard", dashboard_json)])
def test_rules_and_dashboard_print_and_exit_0(flag, text):
    out = subprocess.run([sys.executable, "-m", "repro", "watch", flag], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == text() and out.stdout.strip()


def test_the_contract_names_every_metric_the_exposition_serves(tmp_path):
    with serve_in_thread(SimConfig()) as sim, repro_watch(tmp_path, "--hop", engine_hop(sim.url), *FAST) as watch:
        wait_for(lambda: rounds(watch, "completed"), timeout=30, what="a completed round")
        text = watch.get("/metrics").text
    declared = {line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE")}
    assert declared == {name: kind for name, (kind, _help, _labels) in METRICS.items()}


def test_ctrl_c_ends_it_like_sigterm(tmp_path):
    with serve_in_thread(SimConfig()) as sim, repro_watch(tmp_path, "--hop", engine_hop(sim.url), *FAST) as watch:
        wait_for(lambda: rounds(watch, "completed"), timeout=30, what="a completed round")
        watch.process.send_signal(signal.SIGINT)
        assert watch.process.wait(timeout=15) == 0
    assert "interrupted by SIGINT" in watch.log_lines()[-1]
    assert "Traceback" not in watch.stderr


def test_a_hop_answering_garbage_is_failed_rounds_and_verdicts_not_the_end_of_the_watch(tmp_path):
    async def garbage(reader, writer, index) -> bool:  # by turns: bad JSON in the stream, a body cut mid-chunk
        return await (malformed_json if index % 2 else close_mid_chunk)(reader, writer, index)

    with hostile_server(garbage) as server, \
            repro_watch(tmp_path, "--hop", engine_hop(server.url.removesuffix("/v1"), "engine-9"), *FAST,
                        "--model", "m", "--probe-interval", "0") as watch:
        wait_for(lambda: rounds(watch, "failed") >= 6, timeout=40, what="failed rounds")
        wait_for(lambda: watch.status()["verdicts"], timeout=30, what="a verdict on them")
        assert all(v["where"] == "engine-9" for v in watch.status()["verdicts"]), watch.status()["verdicts"]
        assert watch.process.poll() is None and "Traceback" not in watch.stderr
        assert watch.stop() == 0
