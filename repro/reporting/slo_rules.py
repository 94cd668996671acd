"""The canary SLO `repro watch --rules` ships beside its alerts: recording rules for the share of
canary rounds that complete, and multiwindow, multi-burn-rate alerts on the error budget the
objective leaves (`--slo`, by default 0.999: one round in a thousand may fail or stall).

As in the Google SRE workbook's chapter "Alerting on SLOs" (sre.google/workbook/alerting-on-slos),
with its 30-day budget period: a burn rate is the error ratio over a window divided by the budget
(1 - objective), and each alert needs a long window and a short one both above the same rate, so
it fires only while the burn is still going on and resolves soon after it stops.

- page, 14.4x over 1 h and 5 m: 2 % of the 30-day budget gone in an hour.
- page, 6x over 6 h and 30 m: 5 % of it gone in six hours.
- ticket, 1x over 3 days and 6 h: 10 % of it gone in three days, a slow leak.

A round is one canary request of the watch's multi-round conversations
(`repro_watch_rounds_total{outcome}`, repro.core.watch_status.METRICS): completed is good; failed
and stalled spend the budget. A watch runs few canaries: at a low rate one failed round is a large
error ratio (one in sixty rounds an hour is 1.7 %, past the 14.4x page at 0.999), so each alert
also needs its long window to hold at least MIN_FAILED_ROUNDS failed rounds (the minimum-volume
guard): one unlucky round pages nobody, while a watch at a low rate whose rounds all fail still
pages once a few have. At the watch's default rate (up to 40 rounds a minute) the guard is met
long before the ratio is: it only matters at low rates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

DEFAULT_SLO = 0.999
# The minimum-volume guard: a burn alert fires only when its long window counted at least this
# many failed or stalled rounds (increase() extrapolates to the window's edges: a count is about).
MIN_FAILED_ROUNDS = 5
# The period the budget is spent over (the workbook's 30 days): only the alerts' words use it.
BUDGET_DAYS = 30
GROUP = "repro-watch-slo"
ALERT = "ReproWatchCanaryBudgetBurn"
# Recording rule names, Prometheus's level:metric:operations convention: aggregated to the
# watcher (instance, job), per window.
SUCCESS_RATIO = "instance_job:repro_watch_rounds_success:ratio_rate{window}"
FAILED = "instance_job:repro_watch_rounds_failed:increase{window}"


@dataclass(frozen=True)
class BurnWindow:
    severity: str
    burn_rate: float
    long: str  # a Prometheus duration
    short: str

    def threshold(self, slo: float) -> float:
        """The error ratio both windows must pass: the burn rate times the budget."""
        return _tidy(self.burn_rate * (1 - slo))


BURN_WINDOWS = (
    BurnWindow("page", 14.4, "1h", "5m"),
    BurnWindow("page", 6, "6h", "30m"),
    BurnWindow("ticket", 1, "3d", "6h"),
)


def _tidy(value: float) -> float:
    """A float without binary noise (14.4 * 0.001 is 0.014400000000000012), so rules read as written."""
    return float(f"{value:.12g}")


def windows() -> list[str]:
    """Every window a burn alert reads, shortest first."""
    seconds = {"m": 60, "h": 3600, "d": 86400}
    found = {w for b in BURN_WINDOWS for w in (b.long, b.short)}
    return sorted(found, key=lambda w: int(w[:-1]) * seconds[w[-1]])


def check_objective(slo: float) -> float:
    """The objective, or ValueError naming why not (the command turns it into one usage line)."""
    if not (0 < slo < 1) or math.isnan(slo):
        raise ValueError(f"--slo {slo:g} is not between 0 and 1: give the share of canary rounds that must "
                         "complete, e.g. --slo 0.999")
    return slo


def unreachable(slo: float) -> list[BurnWindow]:
    """The windows whose threshold is an error ratio of 100 % or more at this objective (a loose one,
    below 1 - 1/burn rate): their alert can never fire."""
    return [window for window in BURN_WINDOWS if window.threshold(slo) >= 1]


def recording_rules(job: str) -> list[dict[str, Any]]:
    """Per window: the share of the watcher's rounds that completed, and how many did not."""
    rounds = f'repro_watch_rounds_total{{job="{job}"}}'
    completed = f'repro_watch_rounds_total{{job="{job}", outcome="completed"}}'
    failed = f'repro_watch_rounds_total{{job="{job}", outcome!="completed"}}'
    rules = []
    for window in windows():
        rules.append({"record": SUCCESS_RATIO.format(window=window),
                      "expr": (f"sum by (instance, job) (rate({completed}[{window}]))\n"
                               f"/\nsum by (instance, job) (rate({rounds}[{window}]))")})
        rules.append({"record": FAILED.format(window=window),
                      "expr": f"sum by (instance, job) (increase({failed}[{window}]))"})
    return rules


def burn_alert(window: BurnWindow, slo: float) -> dict[str, Any]:
    threshold = window.threshold(slo)
    long_errors = f"(1 - {SUCCESS_RATIO.format(window=window.long)})"
    short_errors = f"(1 - {SUCCESS_RATIO.format(window=window.short)})"
    objective = f"{slo * 100:.12g}%"
    spent_in = _tidy(BUDGET_DAYS / window.burn_rate)
    return {
        "alert": ALERT,
        # The value is the long window's error ratio (the left side of `and`).
        "expr": (f"{long_errors} > {threshold:g}\n"
                 f"and\n{short_errors} > {threshold:g}\n"
                 f"and\n{FAILED.format(window=window.long)} >= {MIN_FAILED_ROUNDS}"),
        "labels": {"severity": window.severity, "slo": f"{slo:g}", "long_window": window.long,
                   "short_window": window.short},
        "annotations": {
            "title": f"canary rounds burn the error budget {window.burn_rate:g}x",
            "summary": (f"{{{{ $value | humanizePercentage }}}} of repro watch's canary rounds "
                        f"({{{{ $labels.instance }}}}) failed or stalled over the last {window.long}, and over "
                        f"{window.short} too: {window.burn_rate:g}x the {objective} objective's budget, which "
                        f"at this rate is spent in {spent_in:.3g} days"),
            "next_action": ("read the watch's status page http://{{ $labels.instance }}/ for the incidents and "
                            "verdicts behind the failed rounds, and `repro report RUN_DIR --since` over the window "
                            "for each round's evidence"),
        },
    }


def slo_rule_groups(job: str, slo: float = DEFAULT_SLO) -> list[dict[str, Any]]:
    """The rule group of the canary SLO, as Prometheus rule files and PrometheusRule specs hold it."""
    check_objective(slo)
    return [{"name": GROUP,
             "rules": recording_rules(job) + [burn_alert(window, slo) for window in BURN_WINDOWS]}]
