"""The canary SLO's rules (repro/reporting/slo_rules.py), run by Prometheus's own promtool: `check
rules` accepts the file `repro watch --rules` prints, and `test rules` plays canary round counters
through the shipped file and holds each burn-rate alert to when it must fire and resolve:

- page 14.4x over 1 h and 5 m: 2.5 % of rounds failing fires once the hour holds enough of them
  (not while only the 5 m window burns), and resolves 5 minutes after the failures stop although
  the hour still burns (the short window says the burn is over);
- page 6x over 6 h and 30 m: 1 % stalled for 6 hours fires (the 1 h page never: 1 % < 1.44 %) and
  resolves once the last 30 minutes are clean;
- ticket 1x over 3 days and 6 h: 0.2 % for 3 days fires (neither page) and resolves once the
  last 6 hours are clean;
- the minimum-volume guard: at one round a minute, 2 failed rounds (a ratio past every threshold)
  raise nothing; the same watch's rounds all failing for 6 hours raise all three;
- `--slo 0.99` moves the thresholds: 2.5 % no longer pages.

Every series is a counter written in promtool's expanding notation by `counter()`: phases of
(minutes, rounds a minute). Evaluation at a sample's instant, with every series starting together,
makes each window's ratio exact (no extrapolation), so the annotations are compared in full.
"""

from __future__ import annotations

from pathlib import Path

import promql_parser
import pytest
import yaml

from repro.cli import main
from repro.core.watch_status import METRICS
from repro.reporting.slo_rules import (
    ALERT,
    BURN_WINDOWS,
    FAILED,
    MIN_FAILED_ROUNDS,
    SUCCESS_RATIO,
    slo_rule_groups,
    unreachable,
)
from repro.reporting.watch_rules import JOB, rules_yaml
from tests.support.prometheus import promtool

pytestmark = pytest.mark.timeout(120)

WATCHER = {"instance": "127.0.0.1:9464", "job": JOB}
LABELS = ", ".join(f'{k}="{v}"' for k, v in WATCHER.items())
SPENT_IN_DAYS = {14.4: "2.08", 6: "5", 1: "30"}


def counter(*phases: tuple[int, float]) -> str:
    """A counter rising `per_step` a sample through each phase of `steps` samples, in promtool's
    expanding notation (its first sample 0; a phase's samples end at its last step)."""
    parts, value = [], 0.0
    for i, (steps, per_step) in enumerate(phases):
        if i == 0:
            parts.append(f"{value:g}+{per_step:g}x{steps}")
        else:
            parts.append(f"{value + per_step:g}+{per_step:g}x{steps - 1}")
        value += steps * per_step
    return " ".join(parts)


def rounds(completed: list[tuple[int, float]], failed: list[tuple[int, float]] = (),
           stalled: list[tuple[int, float]] = (), step_minutes: int = 1) -> list[dict]:
    """The watch's repro_watch_rounds_total by outcome (every outcome exported from the start), each
    given as phases of (minutes, rounds a minute), sampled every `step_minutes`."""
    minutes = sum(m for m, _ in completed)
    flat = [(minutes, 0)]
    return [{"series": f'repro_watch_rounds_total{{{LABELS}, outcome="{outcome}"}}',
             "values": counter(*((m // step_minutes, per_minute * step_minutes) for m, per_minute in phases or flat))}
            for outcome, phases in (("completed", completed), ("failed", failed), ("stalled", stalled))]


def firing_windows(minutes: int, *long_windows: str) -> dict:
    """At `minutes`, exactly these burn alerts fire (by their long window), whatever their value says."""
    return {"expr": f'count by (long_window) (ALERTS{{alertname="{ALERT}", alertstate="firing"}})',
            "eval_time": f"{minutes}m",
            "exp_samples": [{"labels": f'{{long_window="{w}"}}', "value": 1} for w in long_windows]}


def burning(long_window: str, value: str, slo: float = 0.999) -> dict:
    """One ReproWatchCanaryBudgetBurn promtool must find firing: its labels and annotations, in full."""
    [window] = [w for w in BURN_WINDOWS if w.long == long_window]
    return {"exp_labels": {**WATCHER, "severity": window.severity, "slo": f"{slo:g}",
                           "long_window": window.long, "short_window": window.short},
            "exp_annotations": {
                "title": f"canary rounds burn the error budget {window.burn_rate:g}x",
                "summary": (f"{value} of repro watch's canary rounds (127.0.0.1:9464) failed or stalled over the "
                            f"last {window.long}, and over {window.short} too: {window.burn_rate:g}x the "
                            f"{slo * 100:g}% objective's budget, which at this rate is spent in "
                            f"{SPENT_IN_DAYS[window.burn_rate]} days"),
                "next_action": ("read the watch's status page http://127.0.0.1:9464/ for the incidents and verdicts "
                                "behind the failed rounds, and `repro report RUN_DIR --since` over the window for "
                                "each round's evidence")}}


def at(minutes: int, *alerts: dict) -> dict:
    return {"eval_time": f"{minutes}m", "alertname": ALERT, "exp_alerts": list(alerts)}


def run(folder: Path, input_series: list[dict], checks: list[dict], *, interval: str = "1m", slo: float = 0.999,
        exprs: list[dict] = ()):
    (folder / "rules.yml").write_text(rules_yaml(slo=slo))
    test = {"interval": interval, "input_series": input_series, "alert_rule_test": checks}
    if exprs:
        test["promql_expr_test"] = list(exprs)
    (folder / "tests.yml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yml"], "evaluation_interval": interval, "tests": [test]}, sort_keys=False))
    result = promtool("test", "rules", "tests.yml", cwd=folder, timeout=100)
    assert result.returncode == 0, result.stdout + result.stderr


# --- the rules as data ------------------------------------------------------------------------

def selected(expr: str) -> set[tuple[str, tuple[str, ...]]]:
    """(metric, its matchers as text) of every selector in an expression, from its syntax tree."""
    found = set()

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            found.add((node.name, tuple(sorted(f"{m.name}{m.op}{m.value}" for m in node.matchers.matchers))))

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def test_the_rules_read_only_the_rounds_counter_and_their_own_records():
    [group] = slo_rule_groups(JOB)
    records = {rule["record"] for rule in group["rules"] if "record" in rule}
    assert METRICS["repro_watch_rounds_total"][2] == ("outcome",)
    for rule in group["rules"]:
        if "record" in rule:
            assert {name for name, _ in selected(rule["expr"])} == {"repro_watch_rounds_total"}, rule["expr"]
            assert all(any(m.startswith("job") and JOB in m for m in matchers)
                       for _, matchers in selected(rule["expr"])), rule["expr"]  # this watcher's job only
        else:
            read = {name for name, _ in selected(rule["expr"])}
            assert read <= records, rule["expr"]
            assert {SUCCESS_RATIO.format(window=rule["labels"]["long_window"]),
                    SUCCESS_RATIO.format(window=rule["labels"]["short_window"]),
                    FAILED.format(window=rule["labels"]["long_window"])} == read, rule["expr"]
            assert f">= {MIN_FAILED_ROUNDS}" in rule["expr"]
    assert [(a["labels"]["severity"], a["labels"]["long_window"], a["labels"]["short_window"])
            for a in group["rules"] if "alert" in a] == [("page", "1h", "5m"), ("page", "6h", "30m"),
                                                         ("ticket", "3d", "6h")]


def test_slo_flag_sets_the_objective_and_bad_values_are_one_line_and_exit_2(capsys):
    assert main(["watch", "--rules", "--slo", "0.99"]) == 0
    printed = capsys.readouterr().out
    assert printed == rules_yaml(slo=0.99)
    assert "> 0.144\n" in printed and "> 0.06\n" in printed and "> 0.01\n" in printed
    for bad in ("1", "0", "-0.5", "1.5", "nan", "inf", "99.9", "abc"):
        assert main(["watch", "--rules", "--slo", bad]) == 2, bad
        err = capsys.readouterr().err
        assert err.startswith(f"repro watch: error: --slo {bad!r}" if bad == "abc" else
                              f"repro watch: error: --slo {float(bad):g} is not between 0 and 1"), err
        assert len(err.strip().splitlines()) == 1, err
    assert main(["watch", "--slo", "0.99"]) == 2  # the watch itself has no use for it
    err = capsys.readouterr().err
    assert "--slo goes with --rules" in err and len(err.strip().splitlines()) == 1


def test_a_loose_objective_says_which_burn_alerts_can_never_fire(capsys):
    assert [w.burn_rate for w in unreachable(0.9)] == [14.4]  # 14.4 x 10 % > 100 %
    assert [w.burn_rate for w in unreachable(0.8)] == [14.4, 6]
    assert unreachable(0.999) == []
    assert main(["watch", "--rules", "--slo", "0.9"]) == 0
    assert " ".join(capsys.readouterr().err.split()).startswith(
        "warning: --slo 0.9: the 14.4x burn alert (1h and 5m) can never fire")


@pytest.mark.network
def test_promtool_accepts_the_rules_file_with_the_slo_group(tmp_path):
    printed = tmp_path / "rules.yml"
    printed.write_text(rules_yaml(slo=0.995))
    checked = promtool("check", "rules", str(printed))
    # 5 alerting rules of the watch, 5 windows x 2 records and 3 burn alerts of the SLO
    assert checked.returncode == 0 and "SUCCESS: 18 rules found" in checked.stdout, checked.stdout + checked.stderr


# --- each window fires and resolves when it should (promtool test rules) -----------------------

HEALTHY_30H = 30 * 60


@pytest.mark.network
def test_fast_page_fires_on_the_hour_and_resolves_on_the_five_minutes(tmp_path):
    """200 rounds a minute, healthy 30 h; then 2.5 % fail for 70 minutes; then healthy."""
    t0 = HEALTHY_30H
    series = rounds(completed=[(t0, 200), (70, 195), (60, 200)], failed=[(t0, 0), (70, 5), (60, 0)])
    run(tmp_path, series, [
        at(t0 - 1),
        at(t0 + 10),  # 5 m burns (2.5 %), the hour not yet (0.42 %): nothing
        at(t0 + 60, burning("1h", "2.5%")),  # the whole hour at 2.5 %; 6 h at 0.42 %, 3 d at 0.08 %: neither
        at(t0 + 76),  # 5 m clean: resolved, though the hour still burns 2.9 %
    ], exprs=[firing_windows(t0 + 72, "1h"),  # stopped 2 minutes ago: the 5 m window still holds failures
              {"expr": f"{FAILED.format(window='1h')}", "eval_time": f"{t0 + 60}m",
               "exp_samples": [{"labels": f"{FAILED.format(window='1h')}{{{LABELS}}}", "value": 300}]},
              {"expr": f"{SUCCESS_RATIO.format(window='5m')}", "eval_time": f"{t0 + 60}m",
               "exp_samples": [{"labels": f"{SUCCESS_RATIO.format(window='5m')}{{{LABELS}}}", "value": 0.975}]}])


@pytest.mark.network
def test_slow_page_fires_on_six_hours_and_resolves_on_the_half_hour(tmp_path):
    """200 rounds a minute, healthy 3 days; then 1 % stall for 6 hours (under the 1 h page's 1.44 %)."""
    t0 = 72 * 60
    series = rounds(completed=[(t0, 200), (360, 198), (60, 200)], stalled=[(t0, 0), (360, 2), (60, 0)],
                    step_minutes=5)
    run(tmp_path, series, [
        at(t0 + 180),  # 6 h at 0.5 %: not yet, though the 30 m window burns 1 %
        at(t0 + 360, burning("6h", "1%")),  # 3 d at 0.083 %: no ticket; 1 % < 1.44 %: no fast page
        at(t0 + 375),  # the last 30 minutes hold 0.5 %: resolved, 6 h still at 0.96 %
    ], interval="5m")


@pytest.mark.network
def test_ticket_fires_on_three_days_and_resolves_on_six_hours(tmp_path):
    """1000 rounds in 5 minutes, healthy 12 h; then 2 in 1000 fail for 3 days; then healthy."""
    t0 = 12 * 60
    series = rounds(completed=[(t0, 200), (72 * 60, 199.6), (300, 200)], failed=[(t0, 0), (72 * 60, 0.4), (300, 0)],
                    step_minutes=5)
    run(tmp_path, series, [
        at(t0 + 9 * 60),  # 3 d holds 0.086 %: not yet, though the last 6 h hold 0.2 %
        at(t0 + 72 * 60, burning("3d", "0.2%")),  # the whole 3 days at 0.2 %: neither page (0.6 %, 1.44 %)
        at(t0 + 72 * 60 + 240),  # the last 6 h hold 0.067 %: resolved, 3 d still at 0.19 %
    ], interval="5m")


@pytest.mark.network
def test_the_guard_holds_at_low_volume_and_a_low_rate_outage_still_pages(tmp_path):
    """One round a minute: 2 failed rounds (3.3 % of the hour, 40 % of 5 minutes: past every
    threshold) raise nothing; every round failing for 6 hours raises all three."""
    t0 = 120
    series = rounds(completed=[(t0, 1), (2, 0), (28, 1), (360, 0)], failed=[(t0, 0), (2, 1), (28, 0), (360, 1)])
    end = t0 + 2 + 28 + 360
    run(tmp_path, series, [
        at(t0 + 2), at(t0 + 4), at(t0 + 20),
        at(end, burning("1h", "100%"), burning("6h", "100%"), burning("3d", f"{362 / end * 100:.4g}%")),
    ], exprs=[{"expr": f"{FAILED.format(window='1h')} < {MIN_FAILED_ROUNDS}", "eval_time": f"{t0 + 4}m",
               "exp_samples": [{"labels": f"{FAILED.format(window='1h')}{{{LABELS}}}", "value": 2}]}])


@pytest.mark.network
def test_a_looser_objective_does_not_page_on_what_burns_a_tighter_one(tmp_path):
    """The fast page's 2.5 % under --slo 0.99: 2.5x, under every threshold (14.4 %, 6 %, 1 % over 3 d:
    0.08 %)."""
    t0 = HEALTHY_30H
    series = rounds(completed=[(t0, 200), (70, 195)], failed=[(t0, 0), (70, 5)])
    run(tmp_path, series, [at(t0 + 60), at(t0 + 70)], slo=0.99)
