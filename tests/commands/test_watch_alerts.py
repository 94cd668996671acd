"""End to end, the alert as on-call gets it: a real Prometheus (Debian's, on 127.0.0.1, scraping every
second and evaluating `repro watch --rules`' rules every second) scrapes a real `repro watch`
subprocess in front of (a) a simulated engine that hangs, (b) the fault proxy wedging reused
connections in front of a healthy engine. The incident alert fires with the side, where and kind
of the verdict and its sentence and next action as annotations (read from Prometheus's
/api/v1/alerts), and resolves after the fault is lifted; no other incident alert is ever raised.

The rules are the shipped ones with two durations shortened to fit a test (`for` 30 s -> 3 s,
`keep_firing_for` 2 m -> 5 s); their own promtool tests (tests/reporting/test_watch_rules.py) hold
the shipped durations. Without the canary SLO's group (`slo=None`): a minute of rounds is a small
budget, and the fault's stalls would burn it too (tests/production/test_slo_rules.py tests it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
import pytest

from proxies.runner import start_proxy
from repro.reporting.watch_rules import JOB, RuleTimes, rules_yaml
from repro.sim import SimConfig
from repro.sim.server import start_sim_process
from tests.support.prometheus import PrometheusServer, prometheus_servers
from tests.support.waiting import wait_for
from tests.support.watching import WatchProcess, repro_watch

pytestmark = [pytest.mark.network, pytest.mark.timeout(150)]

TIMES = RuleTimes(incident_for="3s", incident_keep_firing="5s")
KEEP_FIRING_S = 5
# A watch that judges within seconds: short think time, stall trigger and canary cadence; conversations
# of 3 rounds, so one started after the fault is lifted completes (and clears the incident) in ~2 s.
FAST_WATCH = ("--think", "0.3", "--rounds", "3", "--stall-after", "2", "--canary-every", "1",
              "--canary-timeout", "1", "--probe-interval", "0.5", "--max-tokens", "4")


@pytest.fixture
def prometheus(tmp_path):
    with prometheus_servers(tmp_path) as start:
        yield start


def raised_incidents(prometheus: PrometheusServer) -> set[tuple[str, str, str]]:
    """(side, where, kind) of every ReproWatchIncident alert Prometheus ever raised (pending or firing)
    in the last 10 minutes, from its own ALERTS series."""
    result = prometheus.query('count by (side, where, kind) (count_over_time(ALERTS{alertname="ReproWatchIncident"}[10m]))')
    return {(r["metric"].get("side", ""), r["metric"].get("where", ""), r["metric"].get("kind", "")) for r in result}


def alert_cycle(prometheus: PrometheusServer, watch: WatchProcess, inject: Callable[[], None],
                lift: Callable[[], None], key: tuple[str, str, str]) -> dict:
    """Inject the fault, wait for the incident alert to fire, lift it, wait for the alert to resolve.
    Returns the alert as Prometheus reported it, the watch's incident, and the timings."""
    wait_for(lambda: prometheus.query('repro_watch_rounds_total{outcome="completed"} > 0'), timeout=30,
             what="prometheus scraping the watch's completed rounds")
    assert prometheus.alerts("ReproWatchIncident") == []  # a healthy stack raises nothing
    started = time.monotonic()
    inject()
    alert = wait_for(lambda: next(iter(prometheus.alerts("ReproWatchIncident", "firing")), None), timeout=45,
                     what="ReproWatchIncident firing", every=0.25)
    fired_s = time.monotonic() - started
    # While it fires, new verdicts bring new sentences (they name ports and counts): the same alert
    # (one, active since the same instant) carries each in its annotations; none fires anew.
    seen = []
    for _ in range(12):
        time.sleep(0.25)
        seen.append([(a["activeAt"], a["annotations"]["summary"]) for a in prometheus.alerts("ReproWatchIncident")])
    incident = next(i for i in watch.status()["open_incidents"] if (i["side"], i["where"] or "", i["kind"]) == key)
    verdicts = [v for v in watch.status()["verdicts"] if (v["side"], v.get("where") or "", v["kind"]) == key]

    lifted = time.monotonic()
    lift()
    wait_for(lambda: prometheus.query("repro_watch_incident == 0"), timeout=45,
             what="prometheus seeing the incident cleared", every=0.25)
    cleared_s = time.monotonic() - lifted
    kept = prometheus.alerts("ReproWatchIncident", "firing")  # keep_firing_for holds it a few seconds more
    wait_for(lambda: prometheus.alerts("ReproWatchIncident") == [], timeout=30, what="ReproWatchIncident resolved",
             every=0.25)
    resolved_s = time.monotonic() - lifted
    return {"alert": alert, "incident": incident, "verdicts": verdicts, "kept": kept, "seen": seen, "fired_s": fired_s,
            "cleared_s": cleared_s, "resolved_s": resolved_s}


def check_alert(cycle: dict, watch: WatchProcess, prometheus: PrometheusServer, key: tuple[str, str, str]) -> None:
    side, where, kind = key
    alert = cycle["alert"]
    print(f"\n{kind}: the alert as Prometheus reported it:\n{json.dumps(alert, indent=2)}\n"
          f"{kind}: fired {cycle['fired_s']:.1f} s after the fault; the incident cleared {cycle['cleared_s']:.1f} s "
          f"and the alert resolved {cycle['resolved_s']:.1f} s after the fault was lifted; "
          f"{len({text for alerts in cycle['seen'] for _, text in alerts})} sentence(s) in 3 s of firing")
    # a server-side incident names its engine too: the label ReproWatchHopDown shares, for Alertmanager's inhibition
    engine = {"engine": where} if side == "server" else {}
    assert alert["labels"] == {"alertname": "ReproWatchIncident", "instance": watch.address, "job": JOB,
                               "side": side, "where": where, "kind": kind, "severity": "page", **engine}
    notes = alert["annotations"]
    # the annotations are a verdict's own words: its sentence, its next action, its log segment
    assert (notes["summary"], notes["next_action"]) in {(v["summary"], v["next_action"]["do"]) for v in cycle["verdicts"]}
    assert notes["segment"] == cycle["incident"]["segment"] and (watch.run_dir / notes["segment"]).is_file()
    assert all(len(alerts) == 1 for alerts in cycle["seen"]), cycle["seen"]
    assert {at for alerts in cycle["seen"] for at, _ in alerts} == {alert["activeAt"]}
    assert notes["title"] == f"{side} side at {where}: {kind}"
    assert f"http://{watch.address}/" in notes["description"] and notes["summary"] in notes["description"]
    assert [a["labels"] for a in cycle["kept"]] in ([alert["labels"]], [])  # still firing, or already past the hold
    assert prometheus.alerts() == [], "no other alert (silent, hop down, loop lag) while the watch works"
    raised = raised_incidents(prometheus)
    assert key in raised
    # Never another side or hop. A round stalled by the fault that resumed as it was lifted, before
    # any canary answered, is judged on what was read until it resumed: side unknown at worst.
    placed = {r for r in raised if r[0] != "unknown"}
    assert placed == {key}, [v for v in watch.status()["verdicts"] if (v["side"], v.get("where") or "", v["kind"]) != key]


def test_alert_fires_for_a_hung_engine_and_resolves(tmp_path, prometheus):
    sim = start_sim_process(SimConfig(dialect="sglang", itl=0.005))
    try:
        with repro_watch(tmp_path, "--hop", f"name=engine-0,url={sim.url},role=engine", *FAST_WATCH) as watch:
            server = prometheus({JOB: [watch.address]}, rules=rules_yaml(times=TIMES, slo=None))

            def hang():
                httpx.post(f"{sim.url}/sim/fault", json={"spec": "hang"}, timeout=5, trust_env=False).raise_for_status()

            def recover():
                httpx.delete(f"{sim.url}/sim/fault", timeout=5, trust_env=False).raise_for_status()

            key = ("server", "engine-0", "engine-hung")
            cycle = alert_cycle(server, watch, hang, recover, key)
            check_alert(cycle, watch, server, key)
            assert cycle["fired_s"] < 30 and cycle["resolved_s"] < 30
    finally:
        sim.stop()


def test_alert_fires_for_a_proxy_wedging_reused_connections_and_resolves(tmp_path, prometheus):
    sim = start_sim_process(SimConfig(dialect="sglang", itl=0.005))
    proxy = start_proxy(sim.url, None, flow_log=tmp_path / "proxy-flows.jsonl")
    try:
        with repro_watch(tmp_path, "--hop", f"name=proxy,url={proxy.url},metrics={proxy.metrics_url},role=proxy",
                         "--hop", f"name=engine-0,url={sim.url},role=engine", *FAST_WATCH) as watch:
            server = prometheus({JOB: [watch.address]}, rules=rules_yaml(times=TIMES, slo=None))

            def recover():
                proxy.disarm()
                proxy.release()

            key = ("client", "proxy", "connection-wedged")
            cycle = alert_cycle(server, watch, lambda: proxy.arm("wedge-after=2"), recover, key)
            check_alert(cycle, watch, server, key)
            assert cycle["fired_s"] < 30 and cycle["resolved_s"] < 30
            assert any(r["event"] == "held" for r in proxy.flows())  # the proxy did hold reused connections
    finally:
        proxy.stop()
        sim.stop()


def test_silent_fires_when_the_watch_stops_being_scraped(tmp_path, prometheus):
    sim = start_sim_process(SimConfig(dialect="sglang", itl=0.005))
    try:
        with repro_watch(tmp_path, "--hop", f"name=engine-0,url={sim.url},role=engine", *FAST_WATCH) as watch:
            server = prometheus({JOB: [watch.address]}, rules=rules_yaml(times=RuleTimes(silent_for="2s"), slo=None))
            wait_for(lambda: server.targets_up().get(watch.address) == 1.0, timeout=30, what="the watch scraped")
            # before its first scrape Prometheus has no `up` of the job: absent() may fire for an instant
            wait_for(lambda: server.alerts("ReproWatchSilent") == [], timeout=15, what="no ReproWatchSilent once scraped")
            assert watch.stop() == 0
            stopped = time.monotonic()
            [alert] = wait_for(lambda: server.alerts("ReproWatchSilent", "firing"), timeout=30,
                               what="ReproWatchSilent firing")
            print(f"\nReproWatchSilent fired {time.monotonic() - stopped:.1f} s after the watch stopped:\n"
                  f"{json.dumps(alert, indent=2)}")
    finally:
        sim.stop()
    assert alert["labels"] == {"alertname": "ReproWatchSilent", "cause": "not-scraped", "instance": watch.address,
                               "job": JOB, "severity": "ticket"}
    assert alert["annotations"]["summary"] == (f"Prometheus gets no metrics from repro watch (job {JOB}, "
                                               f"{watch.address}): while it is not scraped, no incident can fire")
