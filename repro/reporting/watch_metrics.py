"""`repro watch`'s Prometheus exposition: the METRICS contract (repro/core/watch_status.py), read
from the WatchStatus at scrape time.

prometheus-client (the reference client: its text format, escaping and content type are what
Prometheus parses) with a custom Collector rather than Gauge/Counter objects updated as events
arrive: the exposition is computed from the one status the page and /status.json read too, so
the three can never drift apart, and a hop that leaves the watched set leaves the exposition.
Its own registry, not the process-global one: nothing else registered in the process (a
library's default collectors) leaks into the contract.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from repro.core.watch_status import CANARY_BUCKETS, METRICS, WatchStatus

# Every outcome a canary round ends with (repro/session/watch.py's round_ended calls). Each is
# exported from the first scrape, at 0 until it happens: a counter series that appears only at
# its first increment has no earlier sample, so rate()/increase() over the window miss that first
# round (the first stall would never reach an alert on the rate of stalls).
ROUND_OUTCOMES = ("completed", "failed", "stalled")

_FAMILIES = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily, "histogram": HistogramMetricFamily}


def _family(name: str) -> Metric:
    kind, help_text, labels = METRICS[name]
    # A counter family is named without `_total`: prometheus-client adds it to the sample.
    family_name = name.removesuffix("_total") if kind == "counter" else name
    return _FAMILIES[kind](family_name, help_text, labels=list(labels))


class WatchCollector(Collector):
    """Every metric of the contract, from the status as it is now (`clock`: wall-clock seconds)."""

    def __init__(self, status: WatchStatus, clock: Callable[[], float] = time.time) -> None:
        self.status = status
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        s = self.status
        now = self.clock()
        families = {name: _family(name) for name in METRICS}

        for outcome in sorted({*ROUND_OUTCOMES, *s.rounds}):
            families["repro_watch_rounds_total"].add_metric([outcome], s.rounds.get(outcome, 0))
        for incident in s.incidents.values():
            # 0 once cleared, never dropped: an alert keyed on the series resolves instead of going stale.
            families["repro_watch_incident"].add_metric(list(incident.key), 1 if incident.open else 0)
            if incident.open:
                families["repro_watch_incident_info"].add_metric(
                    [*incident.key, incident.summary, incident.next_action, incident.segment or ""], 1)
        for key, count in sorted(s.verdict_counts.items()):
            families["repro_watch_verdicts_total"].add_metric(list(key), count)

        for hop in s.hops.values():
            if hop.up is not None:  # not checked yet: no sample, rather than a "down" it never was
                families["repro_watch_hop_up"].add_metric([hop.name], 1 if hop.up else 0)
            cumulative, buckets = 0, []
            for bound, count in zip(CANARY_BUCKETS, hop.canary_buckets, strict=True):
                cumulative += count
                buckets.append((repr(bound), cumulative))
            buckets.append(("+Inf", hop.canary_count))
            families["repro_watch_hop_canary_seconds"].add_metric([hop.name], buckets, hop.canary_sum)
            if hop.in_flight is not None:  # not read is absent, never 0
                families["repro_watch_hop_in_flight"].add_metric([hop.name], hop.in_flight)
            engine = next(reversed(s.behind.get(hop.name, ())), None)
            if engine is not None:  # the last canaried hop behind it: the engine its failures may follow
                families["repro_watch_hop_engine"].add_metric([hop.name, engine], 1)
            if hop.sampled_at is not None:
                families["repro_watch_hop_sample_age_seconds"].add_metric([hop.name], max(0.0, now - hop.sampled_at))

        families["repro_watch_loop_lag_seconds"].add_metric([], s.loop_lag_s)
        if s.last_round_at is not None:
            families["repro_watch_last_round_timestamp_seconds"].add_metric([], s.last_round_at)
        families["repro_watch_hops"].add_metric([], len(s.hops))
        for change in ("added", "removed"):
            families["repro_watch_hop_changes_total"].add_metric([change], s.hop_changes.get(change, 0))
        yield from families.values()


def watch_registry(status: WatchStatus, clock: Callable[[], float] = time.time) -> CollectorRegistry:
    """A registry of its own holding the watch's collector, for generate_latest()."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WatchCollector(status, clock))
    return registry
