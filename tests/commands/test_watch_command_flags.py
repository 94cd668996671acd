"""`repro watch`'s bad input: one line naming the flag and the fix, exit 2, before anything starts
(no socket bound, no folder written)."""

from __future__ import annotations

import pytest

from repro.cli import main

pytestmark = pytest.mark.timeout(30)

HOP = ("--hop", "name=engine-0,url=http://127.0.0.1:1")


@pytest.mark.parametrize(("args", "says"), [
    ((), "nothing to watch: give --hop"),
    ((*HOP, "--listen", "nonsense"), "--listen 'nonsense' is not HOST:PORT; give e.g. 127.0.0.1:9464"),
    ((*HOP, "--duration", "0"), "--duration must be > 0"),
    ((*HOP, "--think", "-1"), "--think must be >= 0"),
    ((*HOP, "--rounds", "0"), "--rounds must be > 0"),
    ((*HOP, "--canary-every", "nan"), "--canary-every must be a finite number"),
    ((*HOP, "--log-keep-mib", "10"), "--log-keep-mib 10 is below --log-segment-mib 64"),
    ((*HOP, "--target", "ftp://127.0.0.1/v1"), "is not an http(s) URL"),
])
def test_bad_input_is_one_line_and_exit_2(args, says, capsys, tmp_path):
    assert main(["watch", *args, "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("repro watch: error: ") and says in err[0], err
    assert not (tmp_path / "w").exists()


def test_a_think_time_not_below_the_keepalive_expiry_is_warned_about(capsys, tmp_path):
    # Stopped by the bad --listen right after: the warning comes first, from the flags alone.
    assert main(["watch", *HOP, "--think", "5", "--listen", "x", "--out", str(tmp_path / "w")]) == 2
    err = " ".join(capsys.readouterr().err.split())  # its lines wrapped at 80 columns, joined
    assert "warning: --think 5 is not below --keepalive-expiry 4: each round opens a new connection" in err


def test_job_names_the_scrape_job_in_the_rules_and_the_dashboard(capsys):
    from repro.reporting.watch_rules import dashboard_json, rules_yaml

    assert main(["watch", "--rules", "--job", "llm-canary"]) == 0
    rules = capsys.readouterr().out
    assert rules == rules_yaml(job="llm-canary")
    assert 'up{job="llm-canary"} == 0 or absent(up{job="llm-canary"})' in rules and "repro-watch\"" not in rules
    assert "scrape the watcher under job_name: llm-canary" in rules
    assert main(["watch", "--dashboard", "--job", "llm-canary"]) == 0
    board = capsys.readouterr().out
    assert board == dashboard_json(job="llm-canary")
    assert 'repro_watch_incident{job=\\"llm-canary\\", instance=~\\"$instance\\"}' in board
    assert 'label_values(repro_watch_hops{job=\\"llm-canary\\"}, instance)' in board


@pytest.mark.parametrize(("args", "says"), [
    (("--rules", "--job", 'x"} or vector(1)'), "--job 'x\"} or vector(1)' is not a plain job name"),
    (("--dashboard", "--job", "{{ $labels }}"), "is not a plain job name: give the job_name of your prometheus.yml"),
    ((*HOP, "--job", "canary"), "--job goes with --rules, --dashboard or --alertmanager-config"),
])
def test_a_bad_job_is_one_line_and_exit_2(args, says, capsys):
    assert main(["watch", *args]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and not captured.out, err
