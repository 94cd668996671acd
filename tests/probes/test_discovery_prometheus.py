"""Discovery against a real Prometheus (Debian `prometheus`, started here on 127.0.0.1) scraping
simulated engines: the hops follow its targets as the config gains and loses them (reloaded on
SIGHUP, as a Kubernetes service discovery would change them)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path

import anyio
import httpx
import pytest

from probes.discovery import discover_hops
from repro.core.hop_changes import describe_hop_changes, hop_changes
from repro.sim import SimConfig, serve_in_thread
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.network, pytest.mark.timeout(120)]

PROMETHEUS = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)


class Prometheus:
    """Prometheus on 127.0.0.1 scraping `targets` every second under job "sglang"; `reload(targets)`
    rewrites its config and sends SIGHUP. (A local copy until tests/support/prometheus.py exists.)"""

    def __init__(self, folder: Path) -> None:
        from repro.lab.router_launcher import free_port

        self.folder = folder
        self.config = folder / "prometheus.yml"
        self.url = f"http://127.0.0.1:{free_port()}"
        self.process: subprocess.Popen | None = None

    def write(self, targets: list[str]) -> None:
        self.config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 800ms\n"
            "scrape_configs:\n  - job_name: sglang\n    static_configs:\n"
            f"      - targets: [{', '.join(json.dumps(t) for t in targets)}]\n        labels: {{cluster: test}}\n")

    def start(self, targets: list[str]) -> None:
        if PROMETHEUS is None:
            pytest.skip("prometheus is not installed (Debian package `prometheus`); test_discovery.py covers the parsing")
        self.write(targets)
        log = open(self.folder / "prometheus.log", "wb")
        self.process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={self.config}", f"--storage.tsdb.path={self.folder / 'tsdb'}",
             f"--web.listen-address={self.url.removeprefix('http://')}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for(self.ready, timeout=30, what="prometheus ready")

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"prometheus exited: {(self.folder / 'prometheus.log').read_text()[-800:]}")
        try:
            return httpx.get(self.url + "/-/ready", timeout=1, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    def reload(self, targets: list[str]) -> None:
        self.write(targets)
        self.process.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


@pytest.fixture
def prometheus(tmp_path):
    server = Prometheus(tmp_path)
    yield server
    server.stop()


def address(sim) -> str:
    return sim.url.removeprefix("http://")


def test_discovery_follows_prometheus_targets_as_they_come_and_go(prometheus):
    with serve_in_thread(SimConfig(dialect="sglang")) as a, serve_in_thread(SimConfig(dialect="vllm")) as b, \
            serve_in_thread(SimConfig(dialect="sglang")) as c:
        prometheus.start([address(a), address(b)])
        discover = lambda: anyio.run(lambda: discover_hops(prometheus.url, '{job="sglang"}', timeout=5))  # noqa: E731

        def named(*sims):
            def check():
                hops = discover()
                return hops if sorted(h.name for h in hops) == sorted(address(s) for s in sims) else None
            return check

        first = wait_for(named(a, b), timeout=30, what="prometheus's first targets")
        assert all(h.role == "engine" and h.canary for h in first)
        assert {h.name: (h.url, h.metrics_url) for h in first} == {
            address(s): (s.url, s.url + "/metrics") for s in (a, b)}

        prometheus.reload([address(a), address(b), address(c)])
        second = wait_for(named(a, b, c), timeout=30, what="the third engine discovered after SIGHUP")
        added, removed = hop_changes(first, second)
        assert ([h.name for h in added], removed) == ([address(c)], [])

        prometheus.reload([address(b), address(c)])
        third = wait_for(named(b, c), timeout=30, what="the first engine gone after SIGHUP")
        added, removed = hop_changes(second, third)
        assert (added, [h.name for h in removed]) == ([], [address(a)])
        assert describe_hop_changes(added, removed) == f"hops: 0 added, 1 removed: -{address(a)} ({a.url})"
