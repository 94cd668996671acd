"""Interrupting `repro run`: the record survives.

tests/session/test_run_cli.py covers SIGINT/SIGTERM while rounds complete against a healthy server.
Here: a signal while a round is stalled and the judge's evidence wave (probes, canary) is
itself stuck on a hostile server; SIGKILL, after which `repro report` must still read the log
(and a torn last line is tolerated and reported); and what SIGKILL leaves running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repro.core import events as ev
from repro.io.runlog import read_run_log
from tests.support.hostile import healthy, hostile_server, silent
from tests.support.processes import alive, children, gone_within

pytestmark = [pytest.mark.network, pytest.mark.timeout(90)]


def start_repro(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("OPENAI_BASE_URL", None)
    env.pop("OPENAI_API_KEY", None)
    return subprocess.Popen([sys.executable, "-m", "repro", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)


def wait_for_event(run_dir: Path, kind: type, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (run_dir / "events.jsonl").exists() and any(read_run_log(run_dir).of(kind)):
            return
        time.sleep(0.1)
    raise AssertionError(f"no {kind.__name__} in {run_dir} within {timeout} s")


def report(run_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "repro", "report", str(run_dir), "--json"],
                          capture_output=True, timeout=60)


async def slow_healthy(reader, writer, index):
    import anyio

    await anyio.sleep(0.2)
    return await healthy(reader, writer, index)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_a_stall_whose_evidence_hangs_still_stops_within_two_seconds(tmp_path, signum):
    """Every hop of the stack is silent: the stall's probes and canary hang until their deadlines.
    The signal must not wait for them."""
    run_dir = tmp_path / "run"
    with hostile_server(silent) as server:
        proc = start_repro("run", "--target", server.url, "--model", "m", "--rounds", "3", "--stall-after", "1",
                           "--round-timeout", "60", "--canary-timeout", "30", "--probe-interval", "0.5",
                           "--out", str(run_dir), "--json")
        try:
            wait_for_event(run_dir, ev.RoundStalled, 20)
            sent = time.monotonic()
            proc.send_signal(signum)
            out, err = proc.communicate(timeout=15)
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
    assert took < 2.0, took
    assert proc.returncode == 130, err.decode()[-2000:]
    summary = json.loads(out)
    assert summary["interrupted"]
    log = read_run_log(run_dir)
    assert not log.torn_last_line and isinstance(log.events[-1], ev.RunFinished)
    assert log.events[-1].reason == f"interrupted by {signal.Signals(signum).name}"


def test_report_reads_a_log_cut_by_sigkill_and_a_torn_last_line(tmp_path):
    run_dir = tmp_path / "run"
    with hostile_server(slow_healthy) as server:
        proc = start_repro("run", "--target", server.url, "--model", "m", "--rounds", "500", "--conversations", "2",
                           "--out", str(run_dir), "--json")
        try:
            wait_for_event(run_dir, ev.RoundDone, 20)
            time.sleep(1.0)
            proc.kill()
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
    assert proc.returncode == -signal.SIGKILL
    log = read_run_log(run_dir)
    assert log.header is not None and not any(log.of(ev.RunFinished))
    done_before = sum(1 for _ in log.of(ev.RoundDone))
    assert done_before >= 1

    result = report(run_dir)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    notes = json.loads(result.stdout)["notes"]
    assert any("did not finish" in n for n in notes), notes
    assert (run_dir / "report.html").stat().st_size > 0

    # What SIGKILL in the middle of a write leaves: cut the last line in half.
    path = run_dir / "events.jsonl"
    data = path.read_bytes().rstrip(b"\n")
    last_start = data.rfind(b"\n") + 1
    path.write_bytes(data[: last_start + max(1, (len(data) - last_start) // 2)])
    torn = read_run_log(run_dir)
    assert torn.torn_last_line and not torn.skipped
    (run_dir / "report.html").unlink()
    result = report(run_dir)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    notes = json.loads(result.stdout)["notes"]
    assert any("torn" in n for n in notes), notes
    assert (run_dir / "report.html").exists()


def test_sigkill_of_a_run_leaves_no_embedded_engine_behind(tmp_path):
    run_dir = tmp_path / "run"
    proc = start_repro("run", "--rounds", "500", "--conversations", "1", "--out", str(run_dir), "--json")
    spawned: list[int] = []
    try:
        wait_for_event(run_dir, ev.RoundDone, 30)
        spawned = children(proc.pid)
        assert spawned, "the embedded engine runs as a child process"
        proc.kill()
        proc.wait(10)
        leftover = gone_within(spawned, 5.0)
        assert not leftover, f"engine process(es) {leftover} outlived the SIGKILLed run"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        for child in spawned:  # never leave an orphan to the next test
            if alive(child):
                os.kill(child, signal.SIGKILL)


def test_ctrl_c_during_a_stall_keeps_the_stall_in_the_summary(tmp_path):
    """The usual way to use the tool: the hang shows, the user presses Ctrl-C. The summary (and so
    `--json` consumers) must still count the stalled round as stalled, not as skipped."""
    run_dir = tmp_path / "run"
    with hostile_server(silent) as server:
        proc = start_repro("run", "--target", server.url, "--model", "m", "--rounds", "3", "--stall-after", "1",
                           "--round-timeout", "60", "--out", str(run_dir), "--json")
        try:
            wait_for_event(run_dir, ev.RoundStalled, 20)
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
    stalled_in_log = {(e.conv, e.round) for e in read_run_log(run_dir).of(ev.RoundStalled)}
    assert stalled_in_log
    summary = json.loads(out)
    assert summary["rounds_stalled"] == len(stalled_in_log), summary
