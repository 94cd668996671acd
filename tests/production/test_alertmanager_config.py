"""`repro watch --alertmanager-config`: the snippet, merged into an alertmanager.yml as its header
says, passes Alertmanager's own checker (`amtool check-config`), and amtool's route tester sends the
watch's alerts to its receiver, grouped by (side, where, kind), and nothing else there. And each
inhibit rule, in a real Alertmanager given alerts through its API: what it holds back, what it
leaves, and never across two watchers (the path from a real watch: test_alertmanager_e2e.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
import yaml

from repro.cli import main
from repro.reporting.alertmanager_config import RECEIVER, alertmanager_yaml
from tests.support.alertmanager import alertmanager, amtool
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(60)


def merged(snippet: str) -> dict:
    """The snippet merged into a minimal alertmanager.yml, as its header says to: a default receiver
    at the top, the watch's receiver given a webhook."""
    data = yaml.safe_load(snippet)
    return {"route": {"receiver": "default", **data["route"]}, "inhibit_rules": data["inhibit_rules"],
            "receivers": [{"name": "default"},
                          {"name": RECEIVER, "webhook_configs": [{"url": "http://127.0.0.1:9/alerts"}]}]}


def test_the_command_prints_the_snippet(capsys):
    assert main(["watch", "--alertmanager-config"]) == 0
    assert capsys.readouterr().out == alertmanager_yaml()


def test_a_job_that_is_not_a_plain_name_is_one_line_and_exit_2(capsys):
    assert main(["watch", "--alertmanager-config", "--job", 'a"b']) == 2
    err = capsys.readouterr().err
    assert "--job 'a\"b' is not a plain job name" in err and len(err.strip().splitlines()) == 1


@pytest.mark.network
def test_amtool_accepts_the_merged_config_and_routes_the_watch_s_alerts(tmp_path):
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(merged(alertmanager_yaml(job="watchers"))))
    checked = amtool("check-config", str(path))
    assert checked.returncode == 0 and "SUCCESS" in checked.stdout, checked.stdout + checked.stderr
    assert "4 inhibit rules" in checked.stdout, checked.stdout

    def route_of(*labels: str) -> str:
        routed = amtool("config", "routes", "test", f"--config.file={path}", *labels)
        assert routed.returncode == 0, routed.stdout + routed.stderr
        return routed.stdout.strip()

    assert route_of("job=watchers", "alertname=ReproWatchIncident", "side=server", "where=engine-0",
                    "kind=engine-hung") == RECEIVER
    assert route_of("job=watchers", "alertname=ReproWatchHopDown", "hop=nginx", "where=nginx") == RECEIVER
    assert route_of("job=sglang", "alertname=SGLangDown") == "default"  # another job's alerts stay where they were


@pytest.mark.network
def test_each_inhibit_rule_in_a_real_alertmanager(tmp_path):
    """Alerts of two watchers (A and B) posted as Prometheus would; Alertmanager's API says which it
    holds back (suppressed, inhibitedBy) and which it would send (active)."""
    a, b = {"job": "repro-watch", "instance": "10.0.0.1:9464"}, {"job": "repro-watch", "instance": "10.0.0.2:9464"}
    alerts = {
        "engine page": {**a, "alertname": "ReproWatchIncident", "side": "server", "where": "engine-0",
                        "kind": "engine-unresponsive", "severity": "page", "engine": "engine-0"},
        "nginx down": {**a, "alertname": "ReproWatchHopDown", "hop": "nginx", "where": "nginx",
                       "engine": "engine-0", "severity": "ticket"},
        "engine down": {**a, "alertname": "ReproWatchHopDown", "hop": "engine-0", "where": "engine-0",
                        "severity": "ticket"},
        "unplaced": {**a, "alertname": "ReproWatchIncident", "side": "unknown", "kind": "no-evidence",
                     "severity": "ticket"},
        "other engine's front": {**a, "alertname": "ReproWatchHopDown", "hop": "lb-2", "where": "lb-2",
                                 "engine": "engine-2", "severity": "ticket"},
        "B's nginx down": {**b, "alertname": "ReproWatchHopDown", "hop": "nginx", "where": "nginx",
                           "engine": "engine-0", "severity": "ticket"},
        "B's unplaced": {**b, "alertname": "ReproWatchIncident", "side": "unknown", "kind": "no-evidence",
                         "severity": "ticket"},
        "fast burn": {**a, "alertname": "ReproWatchCanaryBudgetBurn", "severity": "page", "long_window": "1h",
                      "short_window": "5m"},
        "slow leak": {**a, "alertname": "ReproWatchCanaryBudgetBurn", "severity": "ticket", "long_window": "3d",
                      "short_window": "6h"},
        "B's slow leak": {**b, "alertname": "ReproWatchCanaryBudgetBurn", "severity": "ticket",
                          "long_window": "3d", "short_window": "6h"},
    }
    held = {"nginx down", "engine down", "unplaced", "slow leak"}
    now = datetime.now(UTC)
    with alertmanager(tmp_path, merged(alertmanager_yaml())) as manager:
        posted = httpx.post(manager.url + "/api/v2/alerts", timeout=5, trust_env=False, json=[
            {"labels": labels, "startsAt": now.isoformat(), "endsAt": (now + timedelta(minutes=10)).isoformat()}
            for labels in alerts.values()])
        assert posted.status_code == 200, posted.text

        def states() -> dict[str, str] | None:
            by_labels = {tuple(sorted(x["labels"].items())): x["status"]["state"] for x in manager.alerts()}
            found = {name: by_labels.get(tuple(sorted(labels.items()))) for name, labels in alerts.items()}
            return found if None not in found.values() else None

        seen = wait_for(states, timeout=15, what="every alert in Alertmanager")
    assert {name for name, state in seen.items() if state == "suppressed"} == held, seen
    assert {name for name, state in seen.items() if state == "active"} == alerts.keys() - held, seen
