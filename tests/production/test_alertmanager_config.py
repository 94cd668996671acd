"""`repro watch --alertmanager-config`: the snippet, merged into an alertmanager.yml as its header
says, passes Alertmanager's own checker (`amtool check-config`), and amtool's route tester sends the
watch's alerts to its receiver, grouped by (side, where, kind), and nothing else there."""

from __future__ import annotations

import pytest
import yaml

from repro.cli import main
from repro.reporting.alertmanager_config import RECEIVER, alertmanager_yaml
from tests.support.alertmanager import amtool

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
    assert "3 inhibit rules" in checked.stdout, checked.stdout

    def route_of(*labels: str) -> str:
        routed = amtool("config", "routes", "test", f"--config.file={path}", *labels)
        assert routed.returncode == 0, routed.stdout + routed.stderr
        return routed.stdout.strip()

    assert route_of("job=watchers", "alertname=ReproWatchIncident", "side=server", "where=engine-0",
                    "kind=engine-hung") == RECEIVER
    assert route_of("job=watchers", "alertname=ReproWatchHopDown", "hop=nginx", "where=nginx") == RECEIVER
    assert route_of("job=sglang", "alertname=SGLangDown") == "default"  # another job's alerts stay where they were
