"""`repro run` as a user runs it: a subprocess, real signals, the log left behind."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from repro.io.runlog import read_run_log
from tests.support.hostile import healthy, hostile_server, silent

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]


def repro(*args, **kwargs):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("OPENAI_BASE_URL", None)
    return subprocess.Popen([sys.executable, "-m", "repro", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, **kwargs)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_run_within_two_seconds_and_keeps_a_readable_log(tmp_path, signum):
    async def slow_healthy(reader, writer, index):
        import asyncio

        await asyncio.sleep(0.2)
        return await healthy(reader, writer, index)

    with hostile_server(slow_healthy) as server:
        proc = repro("run", "--target", server.url, "--model", "m", "--rounds", "200", "--conversations", "2",
                     "--out", str(tmp_path), "--json")
        time.sleep(2.5)
        sent = time.monotonic()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=10)
        took = time.monotonic() - sent
    assert took < 2.0, took
    assert proc.returncode == 130, err.decode()
    summary = json.loads(out)
    assert summary["interrupted"] and summary["rounds_completed"] > 0
    log = read_run_log(tmp_path)
    assert not log.torn_last_line
    finished = log.events[-1]
    assert finished.reason.startswith("interrupted") and finished.summary["rounds_completed"] == summary["rounds_completed"]


def test_api_key_never_reaches_the_log_or_output(tmp_path):
    secret = "sk-test-PLANTED-SECRET-1234567890"
    with hostile_server(silent) as server:
        env_key = {"OPENAI_API_KEY": secret}
        proc = subprocess.run(
            [sys.executable, "-m", "repro", "run", "--target", server.url, "--model", "m", "--rounds", "1",
             "--stall-after", "0.5", "--out", str(tmp_path), "--json"],
            capture_output=True, env={**os.environ, **env_key}, timeout=30,
        )
        sent_auth = server.requests[0]["head"]
    assert secret.encode() in sent_auth  # it was used...
    assert secret.encode() not in proc.stdout + proc.stderr  # ...and never written
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--rounds", "0"], "--rounds must be > 0"),
        (["--stall-after", "inf"], "--stall-after must be a finite number"),
        (["--workers", "2", "--connections", "pool=1"], "pool=1 is shared out among --workers 2"),
        (["--target", "localhost:1"], "is not an http(s) URL"),
        (["--target", "http://127.0.0.1:9/v1", "--model", "m", "--conversations", "1000"], "--allow-flood"),
        (["--prompts", "/nonexistent.jsonl"], "cannot read prompts file"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(args, fragment):
    proc = subprocess.run([sys.executable, "-m", "repro", "run", *args], capture_output=True, timeout=30)
    assert proc.returncode == 2
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], lines
