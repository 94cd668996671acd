"""End to end on the embedded default: `repro run` drives the simulated engine (its own process),
optionally through the real mitmproxy fault proxy, and must name the right side, hop and kind."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.runs import kinds, repro_run

pytestmark = [pytest.mark.network, pytest.mark.timeout(90)]




def test_wedged_proxy_is_client_side_connection_wedge(tmp_path):
    code, summary, err = repro_run("--rounds", "6", "--conversations", "1", "--stall-after", "2",
                                   "--inject", "wedge-after=3", "--out", str(tmp_path / "run"))
    assert code == 10, err[-2000:]
    assert summary["rounds_completed"] >= 3 and summary["rounds_stalled"] >= 1
    first = summary["verdicts"][0]
    assert (first["side"], first["kind"]) == ("client", "connection-wedged")
    assert first["where"] in ("proxy", "connection") and first["round"] == 4
    assert first["phase"] == "before-first-byte"
    # The engine is ruled out on evidence: nothing running, and a fresh canary served.
    assert any(line.startswith("engine-0:") and "0 running, 0 queued" in line and "canary 200" in line
               for line in first["ruled_out"])
    for key in ("confidence", "conversation", "stalled_for_s", "evidence", "ruled_out"):
        assert key in first
    # The proxy's flow log was merged into the run log.
    assert '"type":"proxy_flow"' in (tmp_path / "run" / "events.jsonl").read_text()


def test_engine_hang_is_server_side_engine_hung(tmp_path):
    code, summary, err = repro_run("--rounds", "6", "--conversations", "1", "--stall-after", "2",
                                   "--sim-fault", "hang,after=3", "--out", str(tmp_path / "run"))
    assert code == 11, err[-2000:]
    assert summary["rounds_completed"] == 3
    assert kinds(summary) == {("server", "engine-0", "engine-hung")}


def test_engine_losing_requests_is_frontend_lost(tmp_path):
    code, summary, err = repro_run("--rounds", "5", "--conversations", "1", "--stall-after", "2",
                                   "--sim-fault", "lose,after=3", "--on-failure", "retire",
                                   "--out", str(tmp_path / "run"))
    assert code == 11, err[-2000:]
    assert kinds(summary) == {("server", "engine-0", "engine-frontend-lost")}
    assert "sglang#33858" in summary["verdicts"][0]["summary"]


def test_saturation_is_judged_only_when_the_trigger_is_below_the_queue_wait(tmp_path):
    code, summary, err = repro_run("--rounds", "2", "--conversations", "8", "--stall-after", "0.4",
                                   "--probe-interval", "0.2", "--sim-fault", "saturate",
                                   "--out", str(tmp_path / "low"))
    assert code == 11, err[-2000:]
    assert ("server", "engine-0", "engine-saturated") in kinds(summary)
    code, summary, err = repro_run("--rounds", "2", "--conversations", "8", "--stall-after", "10",
                                   "--sim-fault", "saturate", "--out", str(tmp_path / "high"))
    assert code == 0 and summary["verdicts"] == [] and summary["rounds_completed"] == 16, err[-2000:]


def test_a_hang_that_stalls_every_conversation_shows_one_panel_and_a_tally(tmp_path):
    # The engine hangs after 10 tokens: all 6 conversations stall at once, with one cause.
    code, summary, err = repro_run("--rounds", "2", "--conversations", "6", "--stall-after", "2",
                                   "--sim-fault", "hang,after=10", "--out", str(tmp_path / "run"))
    assert code == 11, err[-2000:]
    stalled = summary["rounds_stalled"]
    assert stalled >= 2 and len(summary["verdicts"]) == stalled
    assert summary["verdict_tally"] == [{"side": "server", "where": "engine-0", "kind": "engine-hung", "rounds": stalled}]
    assert err.count("stall verdict") == 1
    assert f"{stalled} rounds judged SERVER-SIDE at engine-0: engine-hung" in err
    # Offline, the report groups the same way: one verdict in full, then the other rounds named.
    report = subprocess.run([sys.executable, "-m", "repro", "report", str(tmp_path / "run")],
                            capture_output=True, text=True, timeout=60)
    assert report.returncode == 11, report.stderr[-2000:]
    assert f"{stalled} rounds judged SERVER-SIDE at engine-0: engine-hung" in report.stderr
    html = (tmp_path / "run" / "report.html").read_text()
    assert html.count('<div class="verdict server">') == 1
    assert f"and {stalled - 1} more verdicts like this one" in html


def test_a_frozen_engine_behind_a_proxy_is_server_side_unresponsive(tmp_path):
    """SIGSTOP the engine process mid-run, from outside, with a proxy in front: every fresh path
    fails (the proxy's canary too), the last good samples said tokens were moving. The verdict must
    name the engine, as unresponsive, never the proxy."""
    import os
    import signal
    import threading

    from repro.sim import SimConfig, start_sim_process

    with start_sim_process(SimConfig(itl=0.005)) as sim:
        stopped = threading.Event()

        def freeze_later() -> None:
            if not stopped.wait(2.0):
                os.kill(sim.process.pid, signal.SIGSTOP)

        freezer = threading.Thread(target=freeze_later, daemon=True)
        freezer.start()
        try:
            code, summary, err = repro_run(
                "--target", sim.url, "--model", "sim-model", "--inject", "pass", "--rounds", "200",
                "--conversations", "2", "--think-time", "0.05", "--stall-after", "2", "--on-failure", "retire",
                "--round-timeout", "20", "--out", str(tmp_path / "run"))
        finally:
            stopped.set()
            freezer.join(5)
            os.kill(sim.process.pid, signal.SIGCONT)
    assert code == 11, err[-3000:]
    assert kinds(summary) == {("server", "target", "engine-unresponsive")}, summary["verdicts"]
    first = summary["verdicts"][0]
    assert "answers nothing" in first["summary"]
    assert not any("engines serve" in line for line in [first["summary"], *first["ruled_out"]])
