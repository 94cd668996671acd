"""A real Prometheus server for tests (Debian's `prometheus` package), on 127.0.0.1: scraping the
targets a test names every second, evaluating the rules it is given every second so an alert
fires within seconds, sending its alerts to the Alertmanagers it is given (tests/support/alertmanager.py),
and read back through its HTTP API. And promtool, the same package's
checker, for the rules' unit tests.

Tests skip when Prometheus is not installed (the package also ships promtool).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from repro.io.process import stop_child
from tests.support.waiting import wait_for


def _installed(name: str) -> str | None:
    return shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)


PROMETHEUS = _installed("prometheus")
PROMTOOL = _installed("promtool")
API_TIMEOUT_S = 5.0


def milliseconds(seconds: float) -> str:
    """A Prometheus duration (integers and units only: "0.8s" is refused)."""
    return f"{round(seconds * 1000)}ms"


def require(binary: str | None, name: str) -> str:
    if binary is None:
        pytest.skip(f"{name} is not installed (Debian package `prometheus`)")
    return binary


class PrometheusServer:
    """One Prometheus process; `folder` holds its config, rules, log and TSDB."""

    def __init__(self, folder: Path, jobs: dict[str, list[str]], *, rules: str | None = None,
                 interval_s: float = 1.0, alertmanagers: list[str] = ()) -> None:
        from repro.lab.router_launcher import free_port

        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = folder / "prometheus.log"
        self.interval_s = interval_s
        self.alertmanagers = list(alertmanagers)  # host:port of each Alertmanager the alerts are sent to
        self.rule_files: list[str] = []
        if rules is not None:
            (folder / "rules.yml").write_text(rules)
            self.rule_files = [str(folder / "rules.yml")]
        self.write_config(jobs)
        self.process: subprocess.Popen | None = None

    def write_config(self, jobs: dict[str, list[str]]) -> None:
        """prometheus.yml: each job scraping its targets every `interval_s`, the rules (if any) evaluated as often."""
        interval_s = self.interval_s
        config: dict[str, Any] = {
            "global": {"scrape_interval": milliseconds(interval_s), "scrape_timeout": milliseconds(interval_s * 0.8),
                       "evaluation_interval": milliseconds(interval_s)},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}
                               for job, targets in jobs.items()]}
        if self.rule_files:
            config["rule_files"] = self.rule_files
        if self.alertmanagers:
            config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": self.alertmanagers}],
                                                     "timeout": milliseconds(max(interval_s, 1.0) * 2)}]}
        (self.folder / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))

    def start(self) -> PrometheusServer:
        log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [require(PROMETHEUS, "prometheus"), f"--config.file={self.folder / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.folder / 'tsdb'}", f"--web.listen-address=127.0.0.1:{self.port}",
             # its own address in each alert's generatorURL, not this machine's host name
             f"--web.external-url={self.url}", "--log.level=warn",
             # a firing alert is sent again this often (Prometheus's default 1m); a resolved one at once
             f"--rules.alert.resend-delay={milliseconds(self.interval_s)}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()  # the child has its own descriptor
        wait_for(self.ready, timeout=30, what="prometheus ready")
        return self

    def ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"prometheus exited: {self.log_path.read_text()[-800:]}")
        try:
            return httpx.get(self.url + "/-/ready", timeout=1, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    def api(self, path: str, **params: str) -> Any:
        """The `data` of an API answer (`/api/v1/...`), failing the test on an error answer."""
        answer = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=API_TIMEOUT_S, trust_env=False)
        body = answer.json()
        assert body.get("status") == "success", f"prometheus /api/v1/{path}: {body}"
        return body["data"]

    def alerts(self, name: str | None = None, state: str | None = None) -> list[dict[str, Any]]:
        """The alerts as /api/v1/alerts reports them (pending and firing), optionally of one name and state."""
        return [a for a in self.api("alerts")["alerts"]
                if (name is None or a["labels"].get("alertname") == name) and (state is None or a["state"] == state)]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.api("query", query=expr)["result"]

    def targets_up(self) -> dict[str, float]:
        """Scrape target -> its `up` value, for the targets scraped at least once."""
        return {r["metric"]["instance"]: float(r["value"][1]) for r in self.query("up")}

    def active_targets(self) -> set[tuple[str, str]]:
        """(job, instance) of every target Prometheus currently scrapes."""
        return {(t["labels"].get("job", ""), t["labels"].get("instance", ""))
                for t in self.api("targets", state="active")["activeTargets"]}

    def reload(self, jobs: dict[str, list[str]], timeout: float = 30) -> None:
        """Rewrite the config with `jobs` and send SIGHUP (as a service discovery changing the targets
        would); returns once Prometheus's active targets are exactly the new ones."""
        assert self.process is not None, "reload() of a Prometheus not started"
        self.write_config(jobs)
        self.process.send_signal(signal.SIGHUP)
        wanted = {(job, target) for job, targets in jobs.items() for target in targets}
        wait_for(lambda: self.ready() and self.active_targets() == wanted, timeout=timeout,
                 what=f"prometheus reloaded with targets {sorted(wanted)}")

    def stop(self) -> None:
        if self.process is None:
            return
        stop_child(self.process, timeout=10)
        self.process = None


@contextmanager
def prometheus_servers(folder: Path) -> Iterator:
    """A factory `start(jobs, rules=..., interval_s=..., alertmanagers=...) -> PrometheusServer`, started and ready;
    every server it started is stopped (bounded) on the way out."""
    started: list[PrometheusServer] = []

    def start(jobs: dict[str, list[str]], **options) -> PrometheusServer:
        server = PrometheusServer(folder / f"prometheus-{len(started)}", jobs, **options)
        started.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in started:
            server.stop()


def promtool(*args: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([require(PROMTOOL, "promtool"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
