"""`repro watch` as users run it, from the tests: a subprocess on a port of its own choosing
(--listen 127.0.0.1:0; the port is read from the line it prints), read through its /metrics and
/status.json, stopped with SIGTERM within a bound."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from repro.io.rotating_log import list_segments
from tests.support.waiting import wait_for

ADDRESS_LINE = re.compile(r"metrics: http://(127\.0\.0\.1:\d+)/metrics")


@dataclass
class WatchProcess:
    process: subprocess.Popen
    stderr_path: Path
    run_dir: Path
    address: str = ""

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    @property
    def said(self) -> str:
        """Its stderr with the lines joined: what it said, wherever a line was wrapped at 80 columns."""
        return " ".join(self.stderr.split())

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"http://{self.address}{path}", timeout=5.0, trust_env=False)

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of /metrics: (name, sorted labels) -> value."""
        response = self.get("/metrics")
        assert response.status_code == 200, response.text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(response.text) for s in family.samples}

    def log_lines(self) -> list[str]:
        """The run log's lines, every segment in order."""
        return [line for segment in list_segments(self.run_dir) for line in segment.path.read_text().splitlines()]

    def status(self) -> dict:
        return json.loads(self.get("/status.json").text)

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics().get((name, tuple(sorted(labels.items()))))

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, and its exit status within `timeout` seconds (killed, and a failure, past it)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
            raise AssertionError(f"repro watch did not end within {timeout:g} s of SIGTERM: {self.stderr[-2000:]}") \
                from None


@contextlib.contextmanager
def repro_watch(tmp_path: Path, *args: str, ready_timeout: float = 30.0) -> Iterator[WatchProcess]:
    """`repro watch ARGS --listen 127.0.0.1:0 --out TMP/watch`, running once it serves; always stopped."""
    run_dir = tmp_path / "watch"
    stderr_path = tmp_path / "watch.stderr"
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "repro", "watch", "--listen", "127.0.0.1:0",
                                    "--out", str(run_dir), *args],
                                   stdout=subprocess.DEVNULL, stderr=stderr, env={**os.environ, "COLUMNS": "200"})
    watch = WatchProcess(process, stderr_path, run_dir)
    try:
        def listening() -> str | None:
            if process.poll() is not None:
                raise AssertionError(f"repro watch exited {process.returncode}: {watch.stderr[-2000:]}")
            match = ADDRESS_LINE.search(watch.stderr)
            return match.group(1) if match else None

        watch.address = wait_for(listening, timeout=ready_timeout, what="repro watch serving")
        yield watch
    finally:
        if process.poll() is None:
            with contextlib.suppress(AssertionError):
                watch.stop()


def rounds(watch: WatchProcess, outcome: str) -> float:
    return watch.sample("repro_watch_rounds_total", outcome=outcome) or 0.0


def open_incidents(watch: WatchProcess) -> set[tuple[str, str, str]]:
    """(side, where, kind) of every incident the exposition says is open (value 1)."""
    return {(dict(labels)["side"], dict(labels)["where"], dict(labels)["kind"])
            for (name, labels), value in watch.metrics().items() if name == "repro_watch_incident" and value == 1}


# Short enough for a test: a round every 0.2 s, a stall judged after 2 s, a canary every second.
FAST = ("--think", "0.2", "--rounds", "3", "--stall-after", "2", "--probe-interval", "0.5",
        "--canary-every", "1", "--canary-timeout", "1")


def engine_hop(url: str, name: str = "engine-0") -> str:
    return f"name={name},url={url},role=engine"


def arm(sim_url: str, spec: str | None) -> None:
    response = (httpx.post(f"{sim_url}/sim/fault", json={"spec": spec}, timeout=5, trust_env=False) if spec else
                httpx.delete(f"{sim_url}/sim/fault", timeout=5, trust_env=False))
    assert response.status_code == 200, response.text
