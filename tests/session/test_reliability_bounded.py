"""`repro run` as a user runs it, against every kind of hostile target: each run ends by its
deadlines with a verdict or a clear one-line error, the documented exit status, and a run log
that reads back.

tests/load/test_driver.py checks the driver's own view of these servers (in-process, one round type
each); here the whole command runs in a subprocess, so a hang anywhere (probes, canaries, judge,
shutdown) shows up as a timeout, and the exit code, stdout JSON and run folder are checked too.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time

import pytest

from repro.core import events as ev
from repro.io.runlog import read_run_log
from tests.support.hostile import (
    close_mid_chunk,
    headers_then_nothing,
    healthy,
    hostile_server,
    malformed_json,
    respond,
    silent,
)

pytestmark = [pytest.mark.network, pytest.mark.timeout(90)]

# Small deadlines everywhere: a bounded run must end well inside the subprocess timeout.
BOUNDED = ["--rounds", "2", "--conversations", "1", "--stall-after", "1", "--round-timeout", "3",
           "--run-timeout", "30", "--probe-interval", "0.25", "--connect-timeout", "1"]
SUBPROCESS_TIMEOUT = 45
STALL_EXITS = (10, 11, 12)


def run_repro(*args: str, out, env_extra: dict | None = None, timeout: float = SUBPROCESS_TIMEOUT):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    env.pop("OPENAI_BASE_URL", None)
    if not env_extra or "OPENAI_API_KEY" not in env_extra:
        env.pop("OPENAI_API_KEY", None)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "repro", "run", *args, "--json", "--out", str(out)],
                          capture_output=True, env=env, timeout=timeout)
    return proc, time.monotonic() - started


def closed_port() -> int:
    """A port on 127.0.0.1 nobody listens on (bound, then closed: connecting is refused)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


async def trickle_slowly(reader, writer, index) -> bool:
    """Headers and one token, then a byte of SSE comment every 2 s forever: never a whole event."""
    import asyncio

    from tests.support.hostile import SSE_HEADERS, chunk, token

    writer.write(SSE_HEADERS + token("start "))
    await writer.drain()
    while True:
        await asyncio.sleep(2.0)
        writer.write(chunk(b":"))
        await writer.drain()


def check_log(out, summary: dict) -> object:
    log = read_run_log(out)
    assert not log.torn_last_line and not log.skipped
    assert isinstance(log.events[0], ev.RunStarted)
    finished = log.events[-1]
    assert isinstance(finished, ev.RunFinished)
    assert finished.summary["rounds_total"] == summary["rounds_total"] == 2
    outcomes = [e for e in log.events if isinstance(e, (ev.RoundDone, ev.RoundFailed, ev.RoundStalled))]
    assert len(outcomes) == 2, "every round has an outcome in the log"
    return log


STALLING = {
    "accepts-never-answers": silent,
    "headers-then-nothing": headers_then_nothing,
    "trickles-a-byte-every-2s": trickle_slowly,
}


@pytest.mark.parametrize("name", sorted(STALLING))
def test_a_stalling_target_ends_by_its_deadlines_with_a_verdict(tmp_path, name):
    with hostile_server(STALLING[name]) as server:
        proc, took = run_repro("--target", server.url, "--model", "m", *BOUNDED, out=tmp_path / "run")
    err = proc.stderr.decode()
    assert proc.returncode in STALL_EXITS, (proc.returncode, err[-2000:])
    # two rounds, each abandoned by the round deadline at the latest, plus start and shutdown
    assert took < 25, took
    summary = json.loads(proc.stdout)
    assert summary["rounds_stalled"] == 2 and summary["verdicts"], summary
    sides = {v["side"] for v in summary["verdicts"]}
    expected = {"server": 11, "client": 10}.get(next(iter(sides)) if len(sides) == 1 else "")
    if "server" in sides:
        expected = 11
    assert expected is None or proc.returncode == expected
    log = check_log(tmp_path / "run", summary)
    assert list(log.of(ev.VerdictReached))


# name: (server behaviour, words in every error, (exit status, verdict kind)): each failure is judged
# from the same evidence as a stall; the target is an engine hop, so what it answers is its own.
FAILING = {
    "html-502": (respond("502 Bad Gateway", b"<html><body>bad gateway</body></html>", "text/html"),
                 "HTTP 502: HTML page", (11, "engine-error")),
    "429-retry-after": (respond("429 Too Many Requests", b'{"error": "slow down"}', "application/json",
                                "retry-after: 7\r\n"), "HTTP 429 (Retry-After: 7)", (11, "engine-saturated")),
    "401": (respond("401 Unauthorized", b'{"error": {"message": "invalid api key"}}', "application/json"),
            "HTTP 401", (10, "request-rejected")),
    "closes-mid-chunk": (close_mid_chunk, "RemoteProtocolError", (11, "engine-error")),
    "malformed-json-in-sse": (malformed_json, "malformed JSON", (11, "engine-error")),
    "non-openai-json": (respond("200 OK", b'{"result": "not an openai answer"}', "application/json"),
                        "not an SSE stream", (11, "engine-error")),
}


@pytest.mark.parametrize("name", sorted(FAILING))
def test_a_failing_target_ends_at_once_with_a_clear_error_and_a_verdict_per_round(tmp_path, name):
    behaviour, fragment, (code, kind) = FAILING[name]
    with hostile_server(behaviour) as server:
        proc, took = run_repro("--target", server.url, "--model", "m", *BOUNDED, out=tmp_path / "run")
    err = proc.stderr.decode()
    # a failed round is judged like a stall: 0 only when every round completed
    assert proc.returncode == code, (proc.returncode, err[-2000:])
    assert took < 20, took
    summary = json.loads(proc.stdout)
    assert summary["rounds_failed"] == 2, summary
    assert len(summary["verdicts"]) == 2 and {v["kind"] for v in summary["verdicts"]} == {kind}, summary["verdicts"]
    assert all(v["outcome"] == "failed" for v in summary["verdicts"])
    errors = [e for row in summary["per_round"] for e in row["errors"]]
    assert errors and all(fragment in e for e in errors), errors
    assert all("\n" not in e and len(e) < 400 for e in errors), errors
    log = check_log(tmp_path / "run", summary)
    failed = list(log.of(ev.RoundFailed))
    assert len(failed) == 2 and all(fragment in f.error for f in failed)


def test_a_refused_port_fails_each_round_fast_with_a_connect_error(tmp_path):
    port = closed_port()
    proc, took = run_repro("--target", f"http://127.0.0.1:{port}/v1", "--model", "m", *BOUNDED, out=tmp_path / "run")
    assert proc.returncode == 11, proc.stderr.decode()[-2000:]
    assert took < 20, took
    summary = json.loads(proc.stdout)
    assert summary["rounds_failed"] == 2
    assert {(v["side"], v["kind"]) for v in summary["verdicts"]} == {("server", "engine-unreachable")}
    log = check_log(tmp_path / "run", summary)
    assert all("ConnectError" in f.error for f in log.of(ev.RoundFailed))
    # the probes of the dead target say why, they do not raise
    samples = list(log.of(ev.ProbeSample))
    assert samples and all(not s.snapshot.ok and "connect" in s.snapshot.error for s in samples)


def test_an_unreachable_target_without_model_is_judged_not_refused(tmp_path):
    """Model discovery against a closed port on 127.0.0.1: no traceback and no usage error (a dead
    engine is what on-call runs repro for), one line saying the run starts without it, then the verdict."""
    port = closed_port()
    proc, took = run_repro("--target", f"http://127.0.0.1:{port}/v1", *BOUNDED, out=tmp_path / "run")
    assert proc.returncode == 11, proc.stderr.decode()[-2000:]
    assert took < 15
    notes = [line for line in proc.stderr.decode().splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "--model" in notes[0] and str(port) in notes[0], notes
    assert {v["kind"] for v in json.loads(proc.stdout)["verdicts"]} == {"engine-unreachable"}
    assert "Traceback" not in proc.stderr.decode()


def test_model_discovery_against_a_silent_target_is_bounded_by_the_connect_timeout(tmp_path):
    with hostile_server(silent) as server:
        proc, took = run_repro("--target", server.url, *BOUNDED, out=tmp_path / "run")
    assert proc.returncode in STALL_EXITS, proc.stderr.decode()[-2000:]
    assert took < 30, took
    notes = [line for line in proc.stderr.decode().splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "--model" in notes[0] and "no answer within 1 s" in notes[0], notes


# --- hostile metrics endpoints as hops of a run ----------------------------------------------

GIBBERISH = random.Random(8).randbytes(10 << 20)


def metrics_gibberish():
    return respond("200 OK", GIBBERISH, "text/plain; version=0.0.4")


@pytest.mark.parametrize("kind", ["hangs", "10MB-gibberish"])
def test_a_hostile_metrics_endpoint_does_not_hold_up_the_run_and_samples_carry_errors(tmp_path, kind):
    bad = silent if kind == "hangs" else metrics_gibberish()
    with hostile_server(healthy) as engine, hostile_server(bad) as metrics:
        hop = f"name=engine,url={engine.url},metrics=http://127.0.0.1:{metrics.port}/metrics,role=engine"
        proc, took = run_repro("--target", engine.url, "--model", "m", "--hop", hop, *BOUNDED,
                               "--think-time", "1", out=tmp_path / "run")
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert took < 25, took
    summary = json.loads(proc.stdout)
    assert summary["rounds_completed"] == 2, summary
    log = check_log(tmp_path / "run", summary)
    samples = [s for s in log.of(ev.ProbeSample) if s.hop == "engine"]
    assert samples, "the hop was sampled"
    assert all(not s.snapshot.ok and s.snapshot.error for s in samples), [s.data for s in samples[:3]]
    assert all("\n" not in s.snapshot.error and len(s.snapshot.error) < 400 for s in samples)
    if kind == "hangs":
        assert any("timeout" in s.snapshot.error for s in samples)
    # a 10 MB page must not be copied into the log
    assert (tmp_path / "run" / "events.jsonl").stat().st_size < 2 << 20


def test_an_engine_that_trickles_on_every_connection_is_not_judged_a_client_side_connection_fault(tmp_path):
    with hostile_server(trickle_slowly) as server:
        proc, _ = run_repro("--target", server.url, "--model", "m", *BOUNDED, out=tmp_path / "run")
    summary = json.loads(proc.stdout)
    assert summary["verdicts"]
    # the fresh canary hit the same trickle (its stream never ended): not a fault of the reused connection
    assert all(not (v["side"] == "client" and v["confidence"] == "high") for v in summary["verdicts"]), \
        [(v["side"], v["where"], v["kind"], v["confidence"]) for v in summary["verdicts"]]
