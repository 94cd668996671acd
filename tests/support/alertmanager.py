"""A real Alertmanager for tests (Debian's `prometheus-alertmanager`), on 127.0.0.1 with its storage
in the test's folder and clustering off (no gossip port), and a webhook receiver of the test's own:
a small HTTP server in the test process keeping every notification POSTed to it, as received.
And amtool, the same package's checker.

Tests skip when Alertmanager is not installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from repro.io.process import stop_child
from tests.support.waiting import wait_for


def _installed(name: str) -> str | None:
    return shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)


ALERTMANAGER = _installed("prometheus-alertmanager") or _installed("alertmanager")
AMTOOL = _installed("amtool")


def require(binary: str | None, name: str) -> str:
    if binary is None:
        pytest.skip(f"{name} is not installed (Debian package `prometheus-alertmanager`)")
    return binary


class WebhookReceiver:
    """An HTTP server on 127.0.0.1 keeping each JSON body POSTed to it (Alertmanager's webhook
    payload: status, groupLabels, alerts with their labels and annotations), in arrival order."""

    def __init__(self) -> None:
        received: list[dict[str, Any]] = []
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with lock:
                    received.append(json.loads(body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:  # quiet: the test prints what it needs
                pass

        self._lock = lock
        self._received = received
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    @property
    def notifications(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._received)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


class AlertmanagerServer:
    """One Alertmanager process with `config` (alertmanager.yml as data); `folder` holds it, its log and data."""

    def __init__(self, folder: Path, config: dict[str, Any]) -> None:
        from repro.lab.router_launcher import free_port

        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.address}"
        self.config_path = folder / "alertmanager.yml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.log_path = folder / "alertmanager.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> AlertmanagerServer:
        log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [require(ALERTMANAGER, "alertmanager"), f"--config.file={self.config_path}",
             f"--storage.path={self.folder / 'data'}", f"--web.listen-address={self.address}",
             # its own address in the notifications (externalURL), not this machine's host name
             f"--web.external-url={self.url}", "--cluster.listen-address=", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        wait_for(self.ready, timeout=30, what="alertmanager ready")
        return self

    def ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"alertmanager exited: {self.log_path.read_text()[-800:]}")
        try:
            return httpx.get(self.url + "/-/ready", timeout=1, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts it holds (API v2), each with status.state active, suppressed (inhibitedBy) or unprocessed."""
        answer = httpx.get(self.url + "/api/v2/alerts", timeout=5, trust_env=False)
        answer.raise_for_status()
        return answer.json()

    def stop(self) -> None:
        if self.process is None:
            return
        stop_child(self.process, timeout=10)
        self.process = None


@contextmanager
def alertmanager(folder: Path, config: dict[str, Any]) -> Iterator[AlertmanagerServer]:
    """An Alertmanager started with `config`, ready; stopped (bounded) on the way out."""
    server = AlertmanagerServer(folder, config)
    try:
        yield server.start()
    finally:
        server.stop()


@contextmanager
def webhook_receiver() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    try:
        yield receiver
    finally:
        receiver.stop()


def amtool(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([require(AMTOOL, "amtool"), *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
