"""repro watch's alerting rules, checked by Prometheus's own promtool (`check rules`, and `test rules`
with input series written here: each alert fires when it should, with the exact labels and
annotations, and resolves), and the Grafana dashboard: every metric a rule or a panel queries is
one of repro.core.watch_status.METRICS, read from the syntax tree of its PromQL (promql-parser)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import promql_parser
import pytest
import yaml

from repro.core.watch_status import METRICS
from repro.reporting.watch_rules import (
    INFO_TEXT_LABELS,
    JOB,
    SILENT_AFTER_S,
    alert_rules,
    dashboard,
    dashboard_json,
    rules_yaml,
)
from tests.support.prometheus import promtool

pytestmark = pytest.mark.timeout(120)

# The series each metric of the contract puts on /metrics (a histogram is its _bucket, _sum and _count).
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}
EXPOSED = {name + suffix: name for name, (kind, _, _) in METRICS.items() for suffix in SUFFIXES.get(kind, ("",))}
PROMETHEUS_OWN = {"up"}  # a series Prometheus itself writes for every scrape target
# Grafana's variables, replaced by what they stand for so the expression parses as PromQL.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "30s", "$__range": "1h"}

WATCHER = {"instance": "127.0.0.1:9464", "job": JOB}
HUNG = {**WATCHER, "side": "server", "where": "engine-0", "kind": "engine-hung"}
# A server-side incident's alert carries its engine too (the label HopDown shares, for Alertmanager's inhibition).
HUNG_PAGE = {**HUNG, "severity": "page", "engine": "engine-0"}
HUNG_TEXT = {
    "summary": "round stalled before-first-byte after 10.0 s; engine-0 holds 2 requests and moved no token in 8.0 s",
    "next_action": "restart the engine engine-0: it holds requests and moves no token",
    "segment": "events-00003.jsonl",
}


def queried_metrics(expr: str) -> set[str]:
    """The metric names an expression selects, from its syntax tree (a syntax error fails the test)."""
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    names: set[str] = set()

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            by_matcher = [m.value for m in node.matchers.matchers if m.name == "__name__"]
            names.update([node.name] if node.name else by_matcher)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    body = ", ".join(f'{key}="{value}"' for key, value in labels.items())
    return {"series": f"{name}{{{body}}}", "values": values}


def run_promtool_tests(folder: Path, tests: list[dict], interval: str = "10s"):
    (folder / "rules.yml").write_text(rules_yaml())
    (folder / "tests.yml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yml"], "evaluation_interval": interval, "tests": tests}, sort_keys=False))
    return promtool("test", "rules", "tests.yml", cwd=folder)


def incident_annotations(labels: dict[str, str], text: dict[str, str]) -> dict[str, str]:
    """What ReproWatchIncident's annotations say for an incident with these labels and texts."""
    at = f" at {labels['where']}" if labels.get("where") else ""
    return {
        "title": f"{labels['side']} side{at}: {labels['kind']}",
        **text,
        "description": (f"repro watch judged canary conversations stuck {labels['side']} side{at} ({labels['kind']}): "
                        f"{text['summary']}. Next: {text['next_action']}. The evidence is in the run-log segment "
                        f"{text['segment']}; the watch's status page http://{labels['instance']}/ shows every hop's "
                        "state."),
    }


def expect(labels: dict[str, str], annotations: dict[str, str]) -> dict:
    """One alert promtool must find firing: these labels and exactly these annotations."""
    return {"exp_labels": labels, "exp_annotations": annotations}


# --- the rules, as data and as promtool reads them ----------------------------------------------

def test_every_rule_queries_the_metric_contract_only():
    rules = alert_rules()
    assert {r["alert"] for r in rules} == {"ReproWatchIncident", "ReproWatchHopDown", "ReproWatchSilent",
                                           "ReproWatchLoopLag"}
    for rule in rules:
        unknown = queried_metrics(rule["expr"]) - EXPOSED.keys() - PROMETHEUS_OWN
        assert not unknown, f"{rule['alert']} queries {unknown}, not in repro.core.watch_status.METRICS"
    queried = set().union(*(queried_metrics(r["expr"]) for r in rules))
    assert {"repro_watch_incident", "repro_watch_incident_info", "repro_watch_hop_up", "up",
            "repro_watch_last_round_timestamp_seconds", "repro_watch_loop_lag_seconds"} <= queried


def test_the_incident_join_uses_the_labels_both_series_carry():
    [incident] = [r for r in alert_rules() if r["alert"] == "ReproWatchIncident"]
    join = promql_parser.parse(incident["expr"]).modifier
    key = {"side", "where", "kind"}
    assert key <= set(join.matching.labels) <= key | {"instance", "job"}  # instance, job: one Prometheus, many watchers
    assert join.card == promql_parser.VectorMatchCardinality.ManyToOne
    assert set(join.group_labels) == set(INFO_TEXT_LABELS)
    assert set(METRICS["repro_watch_incident"][2]) == key
    assert set(METRICS["repro_watch_incident_info"][2]) == key | set(INFO_TEXT_LABELS)
    # the texts change from verdict to verdict: annotations, never part of the alert's identity
    assert all(incident["labels"][name] == "" for name in INFO_TEXT_LABELS)


def test_silent_threshold_is_well_past_the_watch_s_slowest_round():
    """No round ending for SILENT_AFTER_S means a broken watcher, not a slow round: at the watch's
    defaults a round ends by its deadline and the next one starts a think time later."""
    from repro.cli import build_parser

    defaults = build_parser().parse_args(["watch"])
    slowest_gap = defaults.round_timeout + defaults.think
    assert 2 * slowest_gap <= SILENT_AFTER_S, (SILENT_AFTER_S, slowest_gap)
    assert defaults.stall_after * 10 < SILENT_AFTER_S


def test_the_watch_page_shows_the_rules_file_as_printed():
    page = (Path(__file__).resolve().parents[2] / "docs" / "watch.md").read_text()
    assert f"```yaml\n{rules_yaml()}```" in page, "docs/watch.md#alerts: the rules block is out of date: " \
                                                  "python scripts/doc_blocks.py watch-rules"


def test_the_watch_command_prints_these_rules_and_this_dashboard(capsys):
    from repro.cli import main

    assert main(["watch", "--rules"]) == 0
    assert capsys.readouterr().out == rules_yaml()
    assert main(["watch", "--dashboard"]) == 0
    assert capsys.readouterr().out == dashboard_json()


@pytest.mark.network
def test_promtool_accepts_the_rules_file_the_command_prints(tmp_path):
    from repro.cli import main

    printed = tmp_path / "rules.yml"
    with open(printed, "w") as out, contextlib.redirect_stdout(out):
        assert main(["watch", "--rules"]) == 0
    checked = promtool("check", "rules", str(printed))
    assert checked.returncode == 0 and "SUCCESS: 18 rules found" in checked.stdout, checked.stdout + checked.stderr


@pytest.mark.network
def test_incident_alert_fires_carries_the_verdict_and_resolves(tmp_path):
    # The incident opens at 10 s and clears at 110 s; its info series says the sentence and action.
    tests = [{"interval": "10s", "input_series": [
        series("repro_watch_incident", HUNG, "0 1x9 0x30"),
        series("repro_watch_incident_info", {**HUNG, **HUNG_TEXT}, "_ 1x40"),
    ], "alert_rule_test": [
        {"eval_time": "30s", "alertname": "ReproWatchIncident", "exp_alerts": []},  # pending: for 30s
        {"eval_time": "40s", "alertname": "ReproWatchIncident",
         "exp_alerts": [expect(HUNG_PAGE, incident_annotations(HUNG, HUNG_TEXT))]},
        {"eval_time": "100s", "alertname": "ReproWatchIncident",
         "exp_alerts": [expect(HUNG_PAGE, incident_annotations(HUNG, HUNG_TEXT))]},
        # cleared at 110 s: keep_firing_for 2m holds it through 220 s, resolved from 230 s
        {"eval_time": "220s", "alertname": "ReproWatchIncident", "exp_alerts": [expect(HUNG_PAGE, incident_annotations(HUNG, HUNG_TEXT))]},
        {"eval_time": "240s", "alertname": "ReproWatchIncident", "exp_alerts": []},
        {"eval_time": "240s", "alertname": "ReproWatchHopDown", "exp_alerts": []},
    ]}]
    result = run_promtool_tests(tmp_path, tests)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.network
def test_a_new_verdict_sentence_updates_the_firing_alert(tmp_path):
    """The second verdict's sentence replaces the info series (the old one goes stale, as a series gone
    from a scrape does): the same alert keeps firing with the new annotation, no new `for` wait."""
    later = {**HUNG_TEXT, "summary": "round stalled mid-stream after 10.0 s; engine-0 moved no token in 9.0 s",
             "segment": "events-00004.jsonl"}
    tests = [{"interval": "10s", "input_series": [
        series("repro_watch_incident", HUNG, "0 1x20"),
        series("repro_watch_incident_info", {**HUNG, **HUNG_TEXT}, "_ 1x3 stale"),
        series("repro_watch_incident_info", {**HUNG, **later}, "_x5 1x15"),
    ], "alert_rule_test": [
        {"eval_time": "40s", "alertname": "ReproWatchIncident",
         "exp_alerts": [expect(HUNG_PAGE, incident_annotations(HUNG, HUNG_TEXT))]},
        {"eval_time": "60s", "alertname": "ReproWatchIncident",
         "exp_alerts": [expect(HUNG_PAGE, incident_annotations(HUNG, later))]},
    ]}]
    result = run_promtool_tests(tmp_path, tests)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.network
def test_severity_pages_for_the_stack_and_tickets_for_the_watcher_or_no_place(tmp_path):
    wedged = {**WATCHER, "side": "client", "where": "nginx", "kind": "connection-wedged"}
    own = {**WATCHER, "side": "client", "where": "client", "kind": "client-overloaded"}
    nowhere = {**WATCHER, "side": "unknown", "kind": "round-deadline"}  # no `where`: Prometheus drops an empty label
    text = {"summary": "s", "next_action": "a", "segment": "events-00001.jsonl"}
    tests = [{"interval": "10s", "input_series": [
        item for labels in (wedged, own, nowhere) for item in (
            series("repro_watch_incident", labels, "1x10"),
            series("repro_watch_incident_info", {**labels, "where": labels.get("where", ""), **text}, "1x10"))
    ], "alert_rule_test": [
        {"eval_time": "40s", "alertname": "ReproWatchIncident", "exp_alerts": [
            expect({**wedged, "severity": "page"}, incident_annotations(wedged, text)),
            expect({**own, "severity": "ticket"}, incident_annotations(own, text)),
            expect({**nowhere, "severity": "ticket"}, incident_annotations(nowhere, text)),
        ]},
    ]}]
    result = run_promtool_tests(tmp_path, tests)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.network
def test_promtool_fails_a_wrong_expectation(tmp_path):
    """The harness can fail: the engine-hung incident expected as a ticket is refused."""
    tests = [{"interval": "10s", "input_series": [
        series("repro_watch_incident", HUNG, "1x10"),
        series("repro_watch_incident_info", {**HUNG, **HUNG_TEXT}, "1x10"),
    ], "alert_rule_test": [
        {"eval_time": "40s", "alertname": "ReproWatchIncident", "exp_alerts": [
            expect({**HUNG, "severity": "ticket"}, incident_annotations(HUNG, HUNG_TEXT))]},
    ]}]
    result = run_promtool_tests(tmp_path, tests)
    assert result.returncode != 0 and 'severity="page"' in result.stdout + result.stderr


@pytest.mark.network
def test_hop_down_fires_after_two_minutes_and_resolves(tmp_path):
    nginx = {**WATCHER, "hop": "nginx"}
    tests = [{"interval": "10s", "input_series": [
        series("repro_watch_hop_up", nginx, "1 1 0x14 1x5"),  # down from 20 s to 160 s
        series("repro_watch_hop_up", {**WATCHER, "hop": "engine-0"}, "1x22"),
        series("repro_watch_hop_engine", {**nginx, "engine": "engine-0"}, "1x22"),
    ], "alert_rule_test": [
        {"eval_time": "130s", "alertname": "ReproWatchHopDown", "exp_alerts": []},
        {"eval_time": "140s", "alertname": "ReproWatchHopDown", "exp_alerts": [expect(
            # where: the hop itself; engine: the engine behind it (for Alertmanager's inhibition)
            {**nginx, "severity": "ticket", "where": "nginx", "engine": "engine-0"},
            {"title": "hop nginx is down",
             "summary": "hop nginx itself failed its checks for 2m: its fresh-connection canaries (not only as a "
                        "hop behind it fails its own: then it is up if its page or /health answers), or, for a hop "
                        "read by its metrics only (no canary), its metrics scrapes",
             "next_action": "check that nginx runs and listens; the watch's status page http://127.0.0.1:9464/ gives "
                            "the reason its canary or scrape failed with; a ReproWatchIncident follows if canary "
                            "conversations fail through it"})]},
        {"eval_time": "180s", "alertname": "ReproWatchHopDown", "exp_alerts": []},
    ]}]
    result = run_promtool_tests(tmp_path, tests)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.network
def test_hop_down_tickets_the_hung_engine_not_the_proxy_in_front_of_it(tmp_path):
    """An engine hung behind nginx for 3 minutes: hop_up (the hop itself answers, repro watch's
    test_watch_hop_history shows the series it serves) keeps nginx at 1 while the engine is 0, so
    the ticket names the engine only."""
    nginx, engine = {**WATCHER, "hop": "nginx"}, {**WATCHER, "hop": "engine-0"}
    tests = [{"interval": "10s", "input_series": [
        series("repro_watch_hop_up", nginx, "1x22"),
        series("repro_watch_hop_up", engine, "1 1 0x20"),
    ], "alert_rule_test": [
        {"eval_time": "150s", "alertname": "ReproWatchHopDown", "exp_alerts": [expect(
            {**engine, "severity": "ticket", "where": "engine-0"},  # nothing behind it: no engine label
            {"title": "hop engine-0 is down",
             "summary": "hop engine-0 itself failed its checks for 2m: its fresh-connection canaries (not only as a "
                        "hop behind it fails its own: then it is up if its page or /health answers), or, for a hop "
                        "read by its metrics only (no canary), its metrics scrapes",
             "next_action": "check that engine-0 runs and listens; the watch's status page http://127.0.0.1:9464/ "
                            "gives the reason its canary or scrape failed with; a ReproWatchIncident follows if "
                            "canary conversations fail through it"})]},
    ]}]
    result = run_promtool_tests(tmp_path, tests)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.network
def test_silent_when_not_scraped_or_absent(tmp_path):
    not_scraped = {"title": "repro watch is not scraped",
                   "next_action": f"check that repro watch runs (its --listen address) and that Prometheus scrapes it "
                                  f"under the job name {JOB}"}
    tests = [
        {"interval": "10s", "input_series": [series("up", WATCHER, "1 1 0x10")],  # the scrape fails from 20 s
         "alert_rule_test": [
             {"eval_time": "70s", "alertname": "ReproWatchSilent", "exp_alerts": []},
             {"eval_time": "80s", "alertname": "ReproWatchSilent", "exp_alerts": [expect(
                 {**WATCHER, "severity": "ticket", "cause": "not-scraped"},
                 {**not_scraped, "summary": f"Prometheus gets no metrics from repro watch (job {JOB}, 127.0.0.1:9464): "
                                            "while it is not scraped, no incident can fire"})]},
         ]},
        {"interval": "10s", "input_series": [series("up", {"instance": "e:8000", "job": "engines"}, "1x10")],
         "alert_rule_test": [  # no target of the job at all: the rules are loaded, the watcher is not scraped
             {"eval_time": "60s", "alertname": "ReproWatchSilent", "exp_alerts": [expect(
                 {"job": JOB, "severity": "ticket", "cause": "not-scraped"},
                 {**not_scraped, "summary": f"Prometheus gets no metrics from repro watch (job {JOB}): "
                                            "while it is not scraped, no incident can fire"})]},
         ]},
    ]
    result = run_promtool_tests(tmp_path, tests)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.network
def test_silent_when_no_round_ends(tmp_path):
    # rounds end every 30 s until 300 s, then none: past SILENT_AFTER_S (300 s) from 630 s, firing 1m later
    assert SILENT_AFTER_S == 300
    tests = [{"interval": "30s", "input_series": [
        series("up", WATCHER, "1x40"),
        series("repro_watch_last_round_timestamp_seconds", WATCHER, "0+30x10 300x30"),
    ], "alert_rule_test": [
        {"eval_time": "660s", "alertname": "ReproWatchSilent", "exp_alerts": []},
        {"eval_time": "690s", "alertname": "ReproWatchSilent", "exp_alerts": [expect(
            {**WATCHER, "severity": "ticket", "cause": "no-rounds"},
            {"title": "repro watch ends no canary round",
             "summary": "repro watch (127.0.0.1:9464) ended no canary round for 6m 30s: it is scraped but not "
                        "watching, so no incident can fire",
             "next_action": "read the watch's status page http://127.0.0.1:9464/ and the watch's log for why its "
                            "conversations stopped; restart it"})]},
    ]}]
    result = run_promtool_tests(tmp_path, tests, interval="30s")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.network
def test_loop_lag_fires_when_the_watcher_lags_for_two_minutes(tmp_path):
    tests = [{"interval": "10s", "input_series": [
        series("repro_watch_loop_lag_seconds", WATCHER, "0.01x5 0.4x30"),  # 400 ms from 60 s on
    ], "alert_rule_test": [
        {"eval_time": "170s", "alertname": "ReproWatchLoopLag", "exp_alerts": []},
        {"eval_time": "180s", "alertname": "ReproWatchLoopLag", "exp_alerts": [expect(
            {**WATCHER, "severity": "ticket"},
            {"title": "repro watch's own event loop lags",
             "summary": "repro watch (127.0.0.1:9464) lagged up to 400ms in its own event loop for 2m: what it "
                        "times is late, so its verdicts are not to be trusted while this lasts",
             "next_action": "give the watcher a CPU of its own, or fewer canary conversations"})]},
    ]}]
    result = run_promtool_tests(tmp_path, tests)
    assert result.returncode == 0, result.stdout + result.stderr


# --- the dashboard ------------------------------------------------------------------------------

def dashboard_exprs(board: dict) -> list[tuple[str, str]]:
    """(where, expr) of every PromQL expression the dashboard runs: panel targets and annotations."""
    found = [(f"panel {p['title']!r}", t["expr"]) for p in board["panels"] for t in p["targets"]]
    found += [(f"annotation {a['name']!r}", a["expr"]) for a in board["annotations"]["list"] if "expr" in a]
    return found


def test_dashboard_queries_the_metric_contract_and_shows_all_of_it():
    board = json.loads(dashboard_json())
    assert board == dashboard()
    shown: set[str] = set()
    for where, expr in dashboard_exprs(board):
        names = queried_metrics(expr)
        assert names, f"{where} queries no metric"
        assert not names - EXPOSED.keys(), f"{where} queries {names - EXPOSED.keys()}, not in METRICS"
        shown |= {EXPOSED[name] for name in names}
    for variable in board["templating"]["list"]:  # label_values(METRIC, LABEL)
        if variable["type"] == "query":
            metric, label = variable["definition"].removeprefix("label_values(").removesuffix(")").split(", ")
            assert metric.partition("{")[0] in EXPOSED and label == "instance"
    assert shown == set(METRICS), f"not on the dashboard: {set(METRICS) - shown}"


def test_dashboard_panels_have_ids_places_and_the_datasource_variable():
    board = dashboard()
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
        assert panel["datasource"]["uid"] == "${datasource}"
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])
        assert all('instance=~"$instance"' in t["expr"] for t in panel["targets"])
