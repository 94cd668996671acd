"""The alerting rules and the Grafana dashboard `repro watch` ships, built from data and dumped
with PyYAML and json, so the text is always valid YAML and JSON and every metric either queries
is one of repro.core.watch_status.METRICS (tests parse each expression and hold them to it).

The alerts (Prometheus 2.42 or later: the incident rule uses `keep_firing_for`):
- ReproWatchIncident: an open incident (repro_watch_incident == 1) joined with its
  repro_watch_incident_info, so the alert's labels are side, where and kind and its annotations
  the verdict's sentence, the next action and the run-log segment holding the evidence.
- ReproWatchHopDown: a hop itself failed its checks for a while (its canaries, unless they fail only
  as a hop behind it fails its own while it answers; a hop with none, its scrapes). Labels `where`
  (the hop) and `engine` (the engine behind it on the canaries' path), which the incident alert
  shares, so Alertmanager's inhibit rules can hold it back while an incident explains it.
- ReproWatchSilent: the watcher is not scraped, or its canary rounds stopped ending: without it
  no incident can fire, so silence must say so itself.
- ReproWatchLoopLag: the watcher's own event loop lags: what it times is late, its verdicts are
  not to be trusted while it lasts.

And in a group of their own, the canary SLO (repro/reporting/slo_rules.py): recording rules for
the share of rounds completed, and ReproWatchCanaryBudgetBurn, its multi-burn-rate alerts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from repro.reporting.slo_rules import DEFAULT_SLO, slo_rule_groups

# The scrape job the rules expect the watcher under (`up{job=...}`): Prometheus names jobs in its
# own configuration, which the rules cannot see; docs/watch.md#alerts says to use this name.
JOB = "repro-watch"

# The watcher's own trouble rather than the stack's: its verdicts on these are side client, but
# what is overloaded or queued is the watcher itself, so they open a ticket, never a page.
WATCHER_KINDS = ("client-overloaded", "client-queued")
# The judge calls a stall its own (client-overloaded, judge-overloaded) once the loop lagged half
# the stall trigger, and never less than 250 ms (Case.lag_limit, repro/core/rules/case.py): the alert uses that floor.
LOOP_LAG_LIMIT_S = 0.25
# The longest a watcher may go with no canary round ending: a round ends by completing, failing or
# stalling (the stall trigger, 10 s by default), at the latest at its deadline (`--round-timeout`,
# 120 s), and the next starts a think time (`--think`, 5 s) later. Five minutes is more than twice
# the worst of that at the defaults (a test holds it to them), so only a watcher that stopped
# working crosses it.
SILENT_AFTER_S = 300

# Label values on the incident info series that change from one verdict to the next (the sentence
# names times and counts; a new segment follows rotation): kept out of the alert's labels, which
# are its identity in Prometheus and Alertmanager, so a new sentence updates the annotation of the
# alert already firing instead of resolving it and firing a new one. Prometheus drops a label a
# rule sets to the empty string.
INFO_TEXT_LABELS = ("summary", "next_action", "segment")
# Several watchers may be scraped by one Prometheus: every join keeps each watcher's series apart.
INCIDENT_MATCH = "instance, job, side, where, kind"


# The incident's `engine` label: its where when the verdict puts the fault on the server side.
ENGINE_TEMPLATE = '{{ if eq $labels.side "server" }}{{ $labels.where }}{{ end }}'


@dataclass(frozen=True)
class RuleTimes:
    """How long each condition must hold before its alert fires (Prometheus durations).

    incident_for: the verdict behind an incident already waited the stall trigger and gathered
    evidence, and an incident clears only once a whole canary conversation started after it
    completes, so it cannot flicker on one slow round; 30 s only lets two scrapes agree, so one
    odd scrape pages nobody. incident_keep_firing: a fault that comes and goes (a proxy wedging
    only some connections) lets a conversation complete between verdicts; the alert keeps firing
    that long after its incident cleared, so on-call gets one alert, not a resolve and a new page
    every few minutes. The end-to-end test shortens them to fit its time.
    """

    incident_for: str = "30s"
    incident_keep_firing: str = "2m"
    hop_down_for: str = "2m"
    silent_for: str = "1m"
    silent_after_s: int = SILENT_AFTER_S
    loop_lag_for: str = "2m"


def severity_template(kinds: tuple[str, ...] = WATCHER_KINDS) -> str:
    """page when the verdict places the fault in the stack (server side, or client side at a hop
    or connection); ticket when it places nothing (side unknown) or places it in the watcher."""
    conditions = " ".join(['(eq $labels.side "unknown")'] + [f'(eq $labels.kind "{k}")' for k in kinds])
    return "{{ if or " + conditions + " }}ticket{{ else }}page{{ end }}"


def alert_rules(job: str = JOB, times: RuleTimes = RuleTimes()) -> list[dict[str, Any]]:
    """The rules as data: one dict per rule, in the order the file lists them."""
    status_page = "the watch's status page http://{{ $labels.instance }}/"
    where = "{{ if $labels.where }} at {{ $labels.where }}{{ end }}"
    incident = {
        "alert": "ReproWatchIncident",
        "expr": (f"(repro_watch_incident == 1)\n"
                 f"  * on({INCIDENT_MATCH}) group_left({', '.join(INFO_TEXT_LABELS)})\n"
                 f"  repro_watch_incident_info"),
        "for": times.incident_for,
        **({"keep_firing_for": times.incident_keep_firing} if times.incident_keep_firing not in ("", "0s") else {}),
        # `engine`: the engine a server-side incident is at, the label ReproWatchHopDown shares with
        # it so Alertmanager can hold back the tickets of the hops in front of that engine
        # (repro/reporting/alertmanager_config.py); empty, so dropped, on the client side.
        "labels": {"severity": severity_template(), "engine": ENGINE_TEMPLATE,
                   **{name: "" for name in INFO_TEXT_LABELS}},
        "annotations": {
            "title": "{{ $labels.side }} side" + where + ": {{ $labels.kind }}",
            "summary": "{{ $labels.summary }}",
            "next_action": "{{ $labels.next_action }}",
            "segment": "{{ $labels.segment }}",
            "description": ("repro watch judged canary conversations stuck {{ $labels.side }} side" + where
                            + " ({{ $labels.kind }}): {{ $labels.summary }}. Next: {{ $labels.next_action }}. "
                            "The evidence is in the run-log segment {{ $labels.segment }}; " + status_page
                            + " shows every hop's state."),
        },
    }
    hop_down = {
        "alert": "ReproWatchHopDown",
        # The hop's engine (repro_watch_hop_engine) joined on when the watch exports one for it; a hop
        # with none (an engine, a hop read by its metrics only) alerts without it.
        "expr": ("(repro_watch_hop_up == 0)\n"
                 "  * on(instance, job, hop) group_left(engine) repro_watch_hop_engine\n"
                 "or on(instance, job, hop)\n"
                 "  repro_watch_hop_up == 0"),
        "for": times.hop_down_for,
        # `where`: the hop, as an incident's where names it, so a page at the hop holds back this
        # ticket and Alertmanager groups it with the hop's other alerts (side, where, kind).
        "labels": {"severity": "ticket", "where": "{{ $labels.hop }}"},
        "annotations": {
            "title": "hop {{ $labels.hop }} is down",
            "summary": (f"hop {{{{ $labels.hop }}}} itself failed its checks for {times.hop_down_for}: its "
                        "fresh-connection canaries (not only as a hop behind it fails its own: then it is up if "
                        "its page or /health answers), or, for a hop read by its metrics only (no canary), its "
                        "metrics scrapes"),
            "next_action": (f"check that {{{{ $labels.hop }}}} runs and listens; {status_page} gives the reason its "
                            "canary or scrape failed with; a ReproWatchIncident follows if canary conversations fail "
                            "through it"),
        },
    }
    not_scraped = {
        "alert": "ReproWatchSilent",
        "expr": f'up{{job="{job}"}} == 0 or absent(up{{job="{job}"}})',
        "for": times.silent_for,
        "labels": {"severity": "ticket", "cause": "not-scraped"},
        "annotations": {
            "title": "repro watch is not scraped",
            "summary": (f"Prometheus gets no metrics from repro watch (job {job}"
                        "{{ if $labels.instance }}, {{ $labels.instance }}{{ end }}): while it is not scraped, "
                        "no incident can fire"),
            "next_action": (f"check that repro watch runs (its --listen address) and that Prometheus scrapes it "
                            f"under the job name {job}"),
        },
    }
    no_rounds = {
        "alert": "ReproWatchSilent",
        "expr": f"time() - repro_watch_last_round_timestamp_seconds > {times.silent_after_s}",
        "for": times.silent_for,
        "labels": {"severity": "ticket", "cause": "no-rounds"},
        "annotations": {
            "title": "repro watch ends no canary round",
            "summary": ("repro watch ({{ $labels.instance }}) ended no canary round for {{ $value | humanizeDuration }}: "
                        "it is scraped but not watching, so no incident can fire"),
            "next_action": f"read {status_page} and the watch's log for why its conversations stopped; restart it",
        },
    }
    loop_lag = {
        "alert": "ReproWatchLoopLag",
        "expr": f"max_over_time(repro_watch_loop_lag_seconds[1m]) > {LOOP_LAG_LIMIT_S:g}",
        "for": times.loop_lag_for,
        "labels": {"severity": "ticket"},
        "annotations": {
            "title": "repro watch's own event loop lags",
            "summary": ("repro watch ({{ $labels.instance }}) lagged up to {{ $value | humanizeDuration }} in its "
                        f"own event loop for {times.loop_lag_for}: what it times is late, so its verdicts are not to "
                        "be trusted while this lasts"),
            "next_action": "give the watcher a CPU of its own, or fewer canary conversations",
        },
    }
    return [incident, hop_down, not_scraped, no_rounds, loop_lag]


class _LiteralBlocks(yaml.SafeDumper):
    """Writes multi-line strings (the incident's expression) as YAML literal blocks, as a person would."""


_LiteralBlocks.add_representer(
    str, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))


def rule_groups(job: str = JOB, times: RuleTimes = RuleTimes(),
                slo: float | None = DEFAULT_SLO) -> list[dict[str, Any]]:
    """The rule groups, as a rules file and a PrometheusRule's spec hold them: the alerts, then the
    canary SLO's recording rules and burn-rate alerts for the objective `slo`
    (repro/reporting/slo_rules.py). slo None: the alerts only (the end-to-end tests of the
    incident path, whose stalled rounds would burn a test's small budget too)."""
    alerts = [{"name": "repro-watch", "rules": alert_rules(job, times)}]
    return alerts if slo is None else [*alerts, *slo_rule_groups(job, slo)]


def rules_yaml(job: str = JOB, times: RuleTimes = RuleTimes(), slo: float | None = DEFAULT_SLO) -> str:
    """The Prometheus rules file, as `repro watch --rules [--slo X]` prints it."""
    header = ("# repro watch's alerting rules (Prometheus 2.42 or later). Load with rule_files: in\n"
              f"# prometheus.yml; scrape the watcher under job_name: {job}. Generated by repro.\n")
    document = {"groups": rule_groups(job, times, slo)}
    return header + yaml.dump(document, Dumper=_LiteralBlocks, sort_keys=False, width=float("inf"), allow_unicode=True)


# --- the Grafana dashboard --------------------------------------------------------------------

def _selector(job: str) -> str:
    """The dashboard's selector: the watchers of the scrape job the user picks (its $instance variable)."""
    return f'{{job="{job}", instance=~"$instance"}}'


def _panel(title: str, kind: str, exprs: list[tuple[str, str]], grid: tuple[int, int, int, int], *,
           unit: str | None = None, description: str = "", table: bool = False) -> dict[str, Any]:
    x, y, w, h = grid
    panel: dict[str, Any] = {
        "title": title, "type": kind, "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": [{"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend,
                     "datasource": {"type": "prometheus", "uid": "${datasource}"},
                     **({"instant": True, "format": "table"} if table else {})}
                    for i, (expr, legend) in enumerate(exprs)],
        "fieldConfig": {"defaults": {"unit": unit} if unit else {}, "overrides": []},
    }
    return panel


def dashboard(job: str = JOB) -> dict[str, Any]:
    """The dashboard as data (Grafana's JSON model): what is wrong now, then each hop, then the watcher,
    for the watchers Prometheus scrapes under the job `job`."""
    watchers = _selector(job)
    open_incidents = (f"repro_watch_incident_info{watchers}\n  and on({INCIDENT_MATCH})\n"
                      f"  repro_watch_incident{watchers} == 1")
    panels = [
        _panel("Open incidents", "table", [(open_incidents, "")], (0, 0, 24, 6), table=True,
               description="Each open incident: side, where, kind, the verdict's sentence, the next action and "
                           "the run-log segment holding its evidence."),
        _panel("Incidents", "state-timeline", [(f"repro_watch_incident{watchers}", "{{side}} {{where}} {{kind}}")],
               (0, 6, 24, 5), description="1 while the condition behind a verdict lasts, 0 once it cleared."),
        _panel("Hops up", "state-timeline", [(f"repro_watch_hop_up{watchers}", "{{hop}}")], (0, 11, 24, 5),
               description="1 when the hop answered its last check: its fresh-connection canary, or, for a "
                           "hop read by its metrics only, its metrics scrape."),
        _panel("Fresh-connection canary, p50 and p99", "timeseries", [
            (f"histogram_quantile(0.5, sum by (le, hop) (rate(repro_watch_hop_canary_seconds_bucket{watchers}"
             f"[$__rate_interval])))", "{{hop}} p50"),
            (f"histogram_quantile(0.99, sum by (le, hop) (rate(repro_watch_hop_canary_seconds_bucket{watchers}"
             f"[$__rate_interval])))", "{{hop}} p99"),
            (f"sum by (hop) (rate(repro_watch_hop_canary_seconds_sum{watchers}[$__rate_interval]))\n"
             f"  / sum by (hop) (rate(repro_watch_hop_canary_seconds_count{watchers}[$__rate_interval]))",
             "{{hop}} mean")], (0, 16, 12, 8), unit="s"),
        _panel("In flight at each hop, as read", "timeseries",
               [(f"repro_watch_hop_in_flight{watchers}", "{{hop}}")], (12, 16, 12, 8),
               description="Absent for a hop that exposes no such gauge: not read, never idle."),
        _panel("Age of each hop's metrics", "timeseries",
               [(f"repro_watch_hop_sample_age_seconds{watchers}", "{{hop}}")], (0, 24, 12, 7), unit="s"),
        _panel("Canary rounds a minute, by outcome", "timeseries",
               [(f"sum by (outcome) (rate(repro_watch_rounds_total{watchers}[$__rate_interval])) * 60",
                 "{{outcome}}")], (12, 24, 12, 7)),
        _panel("Verdicts, by side, where and kind", "timeseries",
               [(f"sum by (side, where, kind) (increase(repro_watch_verdicts_total{watchers}[$__rate_interval]))",
                 "{{side}} {{where}} {{kind}}")], (0, 31, 12, 7)),
        _panel("Watched hops", "timeseries", [
            (f"repro_watch_hops{watchers}", "hops"),
            (f"sum by (change) (increase(repro_watch_hop_changes_total{watchers}[$__rate_interval]))",
             "{{change}}")], (12, 31, 12, 7)),
        _panel("The watcher's event-loop lag", "timeseries",
               [(f"repro_watch_loop_lag_seconds{watchers}", "{{instance}}")], (0, 38, 12, 7), unit="s",
               description=f"Above {LOOP_LAG_LIMIT_S * 1000:.0f} ms what the watcher times is late: its verdicts "
                           "are not to be trusted (ReproWatchLoopLag)."),
        _panel("Since the last canary round ended", "timeseries",
               [(f"time() - repro_watch_last_round_timestamp_seconds{watchers}", "{{instance}}")], (12, 38, 12, 7),
               unit="s", description=f"Past {SILENT_AFTER_S} s the watcher is not watching (ReproWatchSilent)."),
        _panel("The engine behind each hop", "table", [(f"repro_watch_hop_engine{watchers}", "")], (0, 45, 24, 5),
               table=True, description="Each hop in front of an engine on the canaries' path: while that engine's "
                                       "incident pages, Alertmanager holds back the hop's ReproWatchHopDown."),
    ]
    for number, panel in enumerate(panels, 1):
        panel["id"] = number
    return {
        "title": "repro watch", "uid": "repro-watch", "tags": ["repro"], "editable": True,
        "schemaVersion": 39, "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus"},
            {"name": "instance", "label": "watcher", "type": "query", "multi": True, "includeAll": True,
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "query": {"query": f'label_values(repro_watch_hops{{job="{job}"}}, instance)', "refId": "instance"},
             "definition": f'label_values(repro_watch_hops{{job="{job}"}}, instance)', "refresh": 2},
        ]},
        "annotations": {"list": [
            {"name": "Incident alerts", "enable": True, "iconColor": "red",
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "expr": f"repro_watch_incident{watchers} == 1", "step": "30s",
             "titleFormat": "{{side}} side at {{where}}: {{kind}}"},
        ]},
        "panels": panels,
    }


def dashboard_json(job: str = JOB) -> str:
    """A Grafana dashboard over the watch's metrics, as `repro watch --dashboard` prints it."""
    return json.dumps(dashboard(job), indent=2) + "\n"
