"""The exposition holds to the METRICS contract: every name, with its type and labels, and nothing
undeclared; an incident's series stays at 0 once cleared, its info only while it is open; a gauge
not read is absent, never 0. docs/watch.md#metrics lists every name."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from repro.core.watch_status import METRICS, WatchStatus
from repro.reporting.watch_metrics import watch_registry

pytestmark = pytest.mark.timeout(30)

WATCH_PAGE = Path(__file__).resolve().parents[2] / "docs" / "watch.md"


def busy_status() -> WatchStatus:
    """A status with every kind of series present: an open and a cleared incident, a hop read, ..."""
    status = WatchStatus(started_at=1000.0)
    status.watch_hops([("proxy", "http://127.0.0.1:1", "proxy"), ("engine-0", "http://127.0.0.1:2", "engine")],
                       behind={"proxy": ("engine-0",), "engine-0": ()})
    status.hops["proxy"].canary(answered=True, seconds=0.02, reason=None, at=1001.0)
    status.hops["proxy"].sampled(in_flight=3.0, at=1001.0)
    status.hops["engine-0"].canary(answered=False, seconds=1.0, reason="refused", at=1001.0)
    status.round_ended("completed", at=1002.0)
    status.round_ended("stalled", at=1003.0)
    status.verdict({"side": "server", "where": "engine-0", "kind": "engine-unreachable", "summary": "refused",
                    "next_action": {"do": "start it"}}, at=1000.5)
    status.conversation_completed(started_at=1000.6, at=1004.0)
    status.verdict({"side": "client", "where": "proxy", "kind": "connection-wedged", "summary": 'a "quoted"\nline',
                    "next_action": {"do": "restart proxy"}}, at=1005.0, segment="events.jsonl")
    status.hops_changed(added=2, removed=1)
    status.loop_lag_s = 0.004
    return status


def exposition(status: WatchStatus, now: float = 1010.0) -> dict:
    text = generate_latest(watch_registry(status, clock=lambda: now)).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_every_metric_of_the_contract_is_exposed_with_its_type_and_labels_and_nothing_else():
    families = exposition(busy_status())
    # The parser names a counter family without its _total.
    exposed = {(f.name + "_total" if f.type == "counter" else f.name): f for f in families.values()}
    assert set(exposed) == set(METRICS)
    for name, (kind, help_text, labels) in METRICS.items():
        family = exposed[name]
        assert family.type == kind and family.documentation == help_text, name
        assert family.samples, f"{name} has no sample in a busy status"
        for sample in family.samples:
            bucket = {"le"} if sample.name.endswith("_bucket") else set()  # a histogram's buckets add `le`
            assert set(sample.labels) == set(labels) | bucket, (name, sample)


def test_an_incident_stays_at_0_once_cleared_and_its_info_only_while_open():
    families = exposition(busy_status())
    incidents = {(s.labels["side"], s.labels["where"], s.labels["kind"]): s.value
                 for s in families["repro_watch_incident"].samples}
    assert incidents == {("server", "engine-0", "engine-unreachable"): 0, ("client", "proxy", "connection-wedged"): 1}
    [info] = families["repro_watch_incident_info"].samples
    assert info.labels == {"side": "client", "where": "proxy", "kind": "connection-wedged",
                           "summary": 'a "quoted"\nline', "next_action": "restart proxy", "segment": "events.jsonl"}
    verdicts = {s.labels["kind"]: s.value for s in families["repro_watch_verdicts"].samples
                if s.name.endswith("_total")}
    assert verdicts == {"engine-unreachable": 1, "connection-wedged": 1}


def test_hop_series_say_only_what_was_read():
    status = busy_status()
    status.watch_hops([*[(h.name, h.url, h.role) for h in status.hops.values()],
                       ("router", "http://127.0.0.1:3", "router")])  # not checked yet, not read
    families = exposition(status)
    up = {s.labels["hop"]: s.value for s in families["repro_watch_hop_up"].samples}
    assert up == {"proxy": 1, "engine-0": 0}  # the router has no canary yet: absent, not "down"
    in_flight = {s.labels["hop"]: s.value for s in families["repro_watch_hop_in_flight"].samples}
    assert in_flight == {"proxy": 3}  # not read is absent, never 0
    age = {s.labels["hop"]: s.value for s in families["repro_watch_hop_sample_age_seconds"].samples}
    assert age == {"proxy": pytest.approx(9.0)}
    buckets = {(s.labels["hop"], s.labels["le"]): s.value for s in families["repro_watch_hop_canary_seconds"].samples
               if s.name.endswith("_bucket")}
    assert buckets[("proxy", "0.01")] == 0 and buckets[("proxy", "0.025")] == 1 and buckets[("proxy", "+Inf")] == 1
    assert buckets[("engine-0", "+Inf")] == 0  # its canary failed: no answer time to count
    assert families["repro_watch_hops"].samples[0].value == 3


def test_the_watch_page_lists_every_metric():
    text = WATCH_PAGE.read_text()
    missing = [name for name in METRICS if f"`{name}`" not in text]
    assert not missing, f"docs/watch.md's metric table lacks {missing}: python scripts/doc_blocks.py watch-metrics"


def test_every_round_outcome_is_exported_at_0_before_it_first_happens():
    """rate() needs a sample before the first increment: a counter series that appears only with
    its first stall has none, so the first stall would be invisible to rate() over any window."""
    status = WatchStatus(started_at=1000.0)
    before = {s.labels["outcome"]: s.value for s in exposition(status)["repro_watch_rounds"].samples
              if s.name == "repro_watch_rounds_total"}
    assert before == {"completed": 0, "failed": 0, "stalled": 0}
    status.round_ended("stalled", at=1001.0)
    after = {s.labels["outcome"]: s.value for s in exposition(status)["repro_watch_rounds"].samples
             if s.name == "repro_watch_rounds_total"}
    assert after == {"completed": 0, "failed": 0, "stalled": 1}


def test_each_hop_in_front_names_the_engine_at_the_end_of_its_path():
    status = WatchStatus(started_at=1000.0)
    status.watch_hops([("nginx", "http://127.0.0.1:1", "proxy"), ("router", "http://127.0.0.1:2", "router"),
                       ("engine-0", "http://127.0.0.1:3", "engine")],
                      behind={"nginx": ("router", "engine-0"), "router": ("engine-0",), "engine-0": ()})
    samples = exposition(status)["repro_watch_hop_engine"].samples
    assert {(s.labels["hop"], s.labels["engine"], s.value) for s in samples} == {
        ("nginx", "engine-0", 1), ("router", "engine-0", 1)}  # the engine has nothing behind it: no series
