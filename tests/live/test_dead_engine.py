"""A dead engine is a verdict, not a usage error: `repro triage` and `repro run` with no --model
start without the model list when the stack does not answer, and say engine-unreachable (exit 11),
once per cause. Real processes: the simulated engine, stopped (nothing listens) or frozen (SIGSTOP:
the kernel still accepts connections, nothing answers)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from repro.lab.stacks import free_port
from repro.sim import start_sim_process
from tests.support.runs import repro_run

pytestmark = [pytest.mark.network, pytest.mark.timeout(120)]


def triage(*args: str) -> tuple[int, dict, str]:
    out = subprocess.run([sys.executable, "-m", "repro", "triage", "--window", "1", "--interval", "0.5",
                          "--canary-timeout", "1.5", "--json", *args], capture_output=True, text=True, timeout=60)
    return out.returncode, json.loads(out.stdout or "{}"), out.stderr


def test_triage_of_a_stopped_engine_without_model_is_engine_unreachable():
    sim = start_sim_process()
    url, metrics = sim.url, sim.metrics_url
    sim.stop()  # nothing listens there now
    code, result, err = triage("--hop", f"name=engine-0,url={url},metrics={metrics},role=engine")
    assert "could not list models" in err and "starting without it" in err, err
    (verdict,) = result["verdicts"]
    assert (verdict["side"], verdict["where"], verdict["kind"]) == ("server", "engine-0", "engine-unreachable"), verdict
    assert code == 11, err


def test_triage_of_a_frozen_engine_without_model_is_server_side():
    """SIGSTOP: /v1/models gets a connection and no answer, which is no usage error either."""
    sim = start_sim_process()
    try:
        os.kill(sim.process.pid, signal.SIGSTOP)
        code, result, err = triage("--hop", f"name=engine-0,url={sim.url},metrics={sim.metrics_url},role=engine")
    finally:
        os.kill(sim.process.pid, signal.SIGCONT)
        sim.stop()
    assert "could not list models" in err, err
    (verdict,) = result["verdicts"]
    assert (verdict["side"], verdict["where"], verdict["kind"]) == ("server", "engine-0", "engine-unresponsive"), verdict
    assert code == 11, err


def test_a_stack_that_answers_without_a_model_list_is_still_a_usage_error():
    """A wrong URL or key is for the user to fix (exit 2); only silence is evidence."""
    sim = start_sim_process()
    try:
        out = subprocess.run([sys.executable, "-m", "repro", "run", "--target", sim.url + "/nope/v1", "--rounds", "1"],
                             capture_output=True, text=True, timeout=60)
    finally:
        sim.stop()
    assert out.returncode == 2 and "could not list models" in out.stderr and "http 404" in out.stderr, out.stderr


def test_run_against_a_dead_target_prints_one_verdict_per_cause():
    """Before: the rounds refused after the evidence wave's canaries came back had no canary, and were
    told "connection-reset ... a fresh connection works" beside the others' engine-unreachable."""
    code, summary, err = repro_run("--target", f"http://127.0.0.1:{free_port()}/v1", "--conversations", "8",
                                   "--rounds", "4", "--stall-after", "2")
    assert "starting without it" in err, err
    assert summary["rounds_failed"] == 32
    assert summary["verdict_tally"] == [{"side": "server", "where": "target", "kind": "engine-unreachable", "rounds": 32}]
    assert not [v for v in summary["verdicts"] if "fresh connection works" in v["summary"]]
    assert err.count("╭─ failed round") == 1  # one panel; the repeats are counted in the tally
    assert code == 11, err
