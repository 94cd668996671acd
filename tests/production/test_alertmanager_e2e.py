"""End to end, the page as on-call gets it through Alertmanager: a real `repro watch` in front of a
real nginx and a simulated engine (a child process), a real Prometheus scraping the watch and
evaluating `repro watch --rules`, a real Alertmanager (Debian's, 127.0.0.1, temp storage) loaded
with `repro watch --alertmanager-config` merged with a webhook receiver, and that receiver, the
test's own (tests/support/alertmanager.py), keeping every notification as it arrived.

The stack runs healthy a while: nothing reaches the receiver. Then the engine freezes (SIGSTOP:
the kernel still accepts, nothing answers, /health neither). nginx has no status page here, so
the watch cannot see that nginx itself answers: its canaries and /health time out through the
frozen engine, `repro_watch_hop_up{hop="nginx"}` goes 0 and ReproWatchHopDown{where="nginx",
engine="engine-0"} fires in Prometheus, as it would for any such front. The receiver gets one
notification: the engine's incident, with the verdict's sentence and next action; Alertmanager
holds back the HopDown of nginx (the engine's incident inhibits it, `equal: engine`) and that of
the engine itself (a page at engine-0 inhibits the ticket there), and any incident the judge
could not place meanwhile (side unknown: a placed page inhibits it). The engine thaws: the receiver
gets the incident's resolved notification, and nothing else, ever.

Times are compressed for a test: Prometheus scrapes and evaluates every second; the rules' `for`
are a tenth of the shipped ones (their proportions kept: a hop's HopDown waits longer than the
incident takes to fire, as 2 m against 30 s, so the inhibiting incident is there first); the
watch judges a stall after 2 s; Alertmanager waits 1 s before a group's first notification. The
rules leave out the canary SLO's group: in a test's minute of rounds the fault's stalls would burn
that budget too (tests/production/test_slo_rules.py holds those alerts).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from repro.reporting.alertmanager_config import RECEIVER, alertmanager_yaml
from repro.reporting.watch_rules import JOB, RuleTimes, rules_yaml
from repro.sim import SimConfig
from repro.sim.server import start_sim_process
from tests.support.alertmanager import alertmanager, webhook_receiver
from tests.support.prometheus import prometheus_servers
from tests.support.stacks import nginx, started
from tests.support.waiting import wait_for
from tests.support.watching import engine_hop, repro_watch

pytestmark = [pytest.mark.network, pytest.mark.timeout(180)]

# A tenth of the shipped durations (RuleTimes' defaults), HopDown's kept longer than the incident's
# whole path to firing (stall trigger + judging + `for`), as the shipped 2 m is against 30 s.
TIMES = RuleTimes(incident_for="3s", incident_keep_firing="5s", hop_down_for="12s")
# Alertmanager: a group's first notification after 1 s (a ticket's after 12 s, a tenth of 2 m), its
# updates every 2 s; the same alert is
# said again only after 10 minutes, past the test's end, so a second notification of one
# incident is a failure, never a reminder.
TICKET_WAIT_S = 12
TIMING = {"group_wait": "1s", "group_interval": "2s", "repeat_interval": "10m",
          "ticket_group_wait": f"{TICKET_WAIT_S}s"}
# The healthy stretch before the fault: 15 s, five times the incident's `for` and past HopDown's 12 s.
HEALTHY_S = 15.0
FAST_WATCH = ("--think", "0.3", "--rounds", "3", "--stall-after", "2", "--canary-every", "1",
              "--canary-timeout", "1", "--probe-interval", "0.5", "--max-tokens", "4")
# Where the test keeps the first notification it received, for docs/production.md (which shows one).
SAVE_TO = os.environ.get("REPRO_SAVE_NOTIFICATION")
PAGE = Path(__file__).resolve().parents[2] / "docs" / "production.md"


def merged_config(receiver_url: str) -> dict:
    """repro's snippet merged into an alertmanager.yml as its header says: a default receiver at the
    top, the snippet's route under it, its inhibit rules, its receiver given the test's webhook."""
    snippet = yaml.safe_load(alertmanager_yaml(**TIMING))
    return {"route": {"receiver": "default", **snippet["route"]},
            "inhibit_rules": snippet["inhibit_rules"],
            "receivers": [{"name": "default"},
                          {"name": RECEIVER, "webhook_configs": [{"url": receiver_url, "send_resolved": True}]}]}


def shown_notification() -> dict:
    """The notification docs/production.md shows: its first JSON block."""
    text = PAGE.read_text()
    start = text.index("```json\n") + len("```json\n")
    return json.loads(text[start:text.index("```", start)])


def alert_names(notifications: list[dict]) -> list[str]:
    return [alert["labels"]["alertname"] for n in notifications for alert in n["alerts"]]


def test_alertmanager_pages_once_per_incident_holds_back_the_front_hop_and_resolves(tmp_path):
    sim = start_sim_process(SimConfig(dialect="sglang", itl=0.005))
    frozen = False
    try:
        with started(nginx, sim.url, tmp_path) as front, \
                repro_watch(tmp_path, "--hop", front.hop_flag("nginx", metrics=False),
                            "--hop", engine_hop(sim.url), *FAST_WATCH) as watch, \
                webhook_receiver() as receiver, \
                alertmanager(tmp_path / "alertmanager", merged_config(receiver.url)) as manager, \
                prometheus_servers(tmp_path) as prometheus_server:
            prometheus = prometheus_server({JOB: [watch.address]}, rules=rules_yaml(times=TIMES, slo=None),
                                           alertmanagers=[manager.address])
            wait_for(lambda: len(prometheus.query("repro_watch_hop_up == 1")) == 2
                     and prometheus.query('repro_watch_rounds_total{outcome="completed"} > 0'),
                     timeout=30, what="prometheus scraping both hops up and completed rounds")
            # evaluated before its first scrape, absent(up) may have set ReproWatchSilent pending an instant
            wait_for(lambda: prometheus.alerts() == [], timeout=15, what="no alert pending once scraped")

            # Healthy: no alert in Prometheus, none in Alertmanager, nothing at the receiver.
            healthy_until = time.monotonic() + HEALTHY_S
            while time.monotonic() < healthy_until:
                assert prometheus.alerts() == [], "an alert while the stack is healthy"
                time.sleep(1)
            assert manager.alerts() == [] and receiver.notifications == []

            os.kill(sim.process.pid, signal.SIGSTOP)
            frozen, froze_at = True, time.monotonic()
            first = wait_for(lambda: receiver.notifications, timeout=45, what="the first notification")[0]
            paged_s = time.monotonic() - froze_at
            # The front hop's HopDown does fire in Prometheus, and Alertmanager holds it back.
            wait_for(lambda: prometheus.alerts("ReproWatchHopDown", "firing"), timeout=40,
                     what="ReproWatchHopDown of nginx firing in Prometheus", every=0.5)
            held = wait_for(lambda: [a for a in manager.alerts() if a["labels"]["alertname"] == "ReproWatchHopDown"
                                     and a["labels"].get("where") == "nginx"], timeout=15,
                            what="Alertmanager holding nginx's HopDown")
            # A ticket's group_wait and a group_interval more: a HopDown not held back is sent by now.
            time.sleep(TICKET_WAIT_S + 3)
            during = receiver.notifications
            incident_alerts = [a for a in manager.alerts() if a["labels"]["alertname"] == "ReproWatchIncident"]
            hop_downs = [a for a in manager.alerts() if a["labels"]["alertname"] == "ReproWatchHopDown"]
            assert any(a["labels"].get("where") == "nginx" for a in hop_downs), "nginx's HopDown ended too soon"
            verdicts = watch.status()["verdicts"]

            os.kill(sim.process.pid, signal.SIGCONT)
            frozen, thawed_at = False, time.monotonic()
            wait_for(lambda: any(n["status"] == "resolved" for n in receiver.notifications), timeout=60,
                     what="the resolved notification", every=0.5)
            resolved_s = time.monotonic() - thawed_at
            wait_for(lambda: manager.alerts() == [] or all(a["status"]["state"] != "active" for a in manager.alerts()),
                     timeout=30, what="nothing active in Alertmanager")
            time.sleep(3)  # a late notification would arrive within a group_interval
            notifications = receiver.notifications
    finally:
        if frozen:
            os.kill(sim.process.pid, signal.SIGCONT)
        sim.stop()

    print(f"\npaged {paged_s:.1f} s after the engine froze, resolved {resolved_s:.1f} s after it thawed; "
          f"{len(notifications)} notifications:\n{json.dumps(notifications, indent=2)}")
    if SAVE_TO:
        Path(SAVE_TO).write_text(json.dumps(first, indent=2) + "\n")

    # One incident, one firing notification: the engine's, with the verdict's own words.
    assert first["status"] == "firing" and first["receiver"] == RECEIVER
    [alert] = first["alerts"]
    side, where, kind = alert["labels"]["side"], alert["labels"]["where"], alert["labels"]["kind"]
    assert (side, where) == ("server", "engine-0"), alert["labels"]
    assert first["groupLabels"] == {"side": side, "where": where, "kind": kind}
    assert alert["labels"] == {"alertname": "ReproWatchIncident", "instance": watch.address, "job": JOB,
                               "side": side, "where": where, "kind": kind, "severity": "page", "engine": where}
    notes = alert["annotations"]
    assert (notes["summary"], notes["next_action"]) in {(v["summary"], v["next_action"]["do"]) for v in verdicts
                                                        if (v["side"], v.get("where"), v["kind"]) == (side, where, kind)}
    assert during == [first], alert_names(during)

    # nginx's HopDown reached Alertmanager (it names the engine behind nginx) and was held back by the
    # incident; the engine's own HopDown, a ticket at the place the page is, likewise.
    [nginx_down] = held
    assert nginx_down["labels"]["engine"] == "engine-0"
    assert nginx_down["status"]["state"] == "suppressed" and nginx_down["status"]["inhibitedBy"], nginx_down
    assert all(a["status"]["state"] == "suppressed" for a in hop_downs), hop_downs
    # The engine's incident is the one active; a round the judge could not place meanwhile (side
    # unknown: not every canary had run since it stopped) may have opened another, held back.
    assert [a["labels"] for a in incident_alerts if a["status"]["state"] == "active"] == [alert["labels"]]
    assert all(a["labels"]["side"] == "unknown" and a["status"]["state"] == "suppressed"
               for a in incident_alerts if a["labels"] != alert["labels"]), incident_alerts

    # Then only the resolved notification of the same group, and nothing else ever.
    assert [n["status"] for n in notifications] == ["firing", "resolved"], alert_names(notifications)
    resolved = notifications[1]
    assert resolved["groupLabels"] == first["groupLabels"]
    assert [a["labels"] for a in resolved["alerts"]] == [alert["labels"]]
    assert set(alert_names(notifications)) == {"ReproWatchIncident"}

    # The page's notification is one such: the same fields, labels and annotations.
    shown = shown_notification()
    assert shown.keys() == first.keys() and shown["groupLabels"].keys() == first["groupLabels"].keys()
    [shown_alert] = shown["alerts"]
    assert shown_alert.keys() == alert.keys() and shown_alert["labels"].keys() == alert["labels"].keys()
    assert shown_alert["annotations"].keys() == alert["annotations"].keys()
