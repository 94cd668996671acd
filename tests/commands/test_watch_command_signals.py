"""`repro watch` honours SIGTERM and SIGINT from its start: a signal while it waits on discovery
(up to 5 s) or on a model list, before the driving listens for signals, ends it with exit 0 and
its log closed (header and end), not by the default action with nothing recorded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from repro.core import events as ev
from repro.io.rotating_log import read_range
from tests.support.hostile import hostile_server, silent
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]


def start_watch(tmp_path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "repro", "watch", "--listen", "127.0.0.1:0",
                             "--out", str(tmp_path / "w"), *args],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "err", "wb"),  # noqa: SIM115
                            env={**os.environ, "COLUMNS": "200"})


def stopped_while_waiting(tmp_path, process: subprocess.Popen, server, sig: signal.Signals) -> tuple[str, float]:
    """Send `sig` once the watch's request reached the silent server; its stderr and how long it took to end."""
    try:
        wait_for(lambda: server.requests or process.poll() is not None, timeout=20, what="the watch's request")
        assert process.poll() is None, (tmp_path / "err").read_text()
        sent = time.monotonic()
        process.send_signal(sig)
        code = process.wait(timeout=10)
        took = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
    err = " ".join((tmp_path / "err").read_text().split())  # what it said, its lines wrapped at 80 columns joined
    assert code == 0, (code, err)
    return err, took


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_discovery_waits_on_a_silent_prometheus_ends_it_with_the_log_closed(tmp_path, sig):
    with hostile_server(silent) as prometheus:  # accepts, reads the request, never answers
        url = f"http://127.0.0.1:{prometheus.port}"
        process = start_watch(tmp_path, "--prometheus", url)
        err, took = stopped_while_waiting(tmp_path, process, prometheus, sig)
    assert took < 3.0, took  # not the 5 s discovery deadline
    assert f"repro watch: interrupted by {sig.name} while starting (discovering the hops at {url}); nothing watched" \
        in err
    assert f"watch ended (interrupted by {sig.name})" in err
    log = read_range(tmp_path / "w", None, None)
    assert isinstance(log.events[0], ev.RunStarted) and log.events[0].config["prometheus"] == url
    assert isinstance(log.events[-1], ev.RunFinished) and log.events[-1].reason == f"interrupted by {sig.name}"


def test_sigterm_while_the_model_lookup_waits_ends_it_with_the_log_closed(tmp_path):
    with hostile_server(silent) as engine:  # /v1/models never answered
        process = start_watch(tmp_path, "--target", engine.url, "--connect-timeout", "5")
        err, _took = stopped_while_waiting(tmp_path, process, engine, signal.SIGTERM)
    assert engine.requests[0]["head"].startswith(b"GET /v1/models ")
    assert f"while starting (listing the models at {engine.url})" in err
    log = read_range(tmp_path / "w", None, None)
    assert isinstance(log.events[0], ev.RunStarted)
    assert isinstance(log.events[-1], ev.RunFinished) and log.events[-1].reason == "interrupted by SIGTERM"
