"""WatchStatus: incidents open with a verdict, renew with the next, and clear only when a
conversation that started after the last verdict completes; a hop's history is an hour long."""

from __future__ import annotations

import pytest

from repro.core.watch_status import (
    CANARY_BUCKETS,
    HOP_HISTORY_S,
    RECENT_VERDICTS,
    SCRAPE_POINT_EVERY_S,
    WatchStatus,
)

pytestmark = pytest.mark.timeout(30)


def verdict(side="server", where="engine-0", kind="engine-hung", summary="engine-0 holds requests", action="restart"):
    return {"side": side, "where": where, "kind": kind, "summary": summary, "next_action": {"do": action}}


def test_a_verdict_opens_an_incident_and_the_next_one_of_its_kind_renews_it():
    status = WatchStatus(started_at=0.0)
    first = status.verdict(verdict(summary="first"), at=10.0, segment="a.jsonl")
    again = status.verdict(verdict(summary="second"), at=20.0, segment="b.jsonl")
    assert again is first and first.open
    assert (first.opened_at, first.last_verdict_at, first.verdicts) == (10.0, 20.0, 2)
    assert (first.summary, first.segment, first.next_action) == ("second", "b.jsonl", "restart")
    other = status.verdict(verdict(side="client", where="proxy", kind="connection-wedged"), at=21.0)
    assert other is not first
    assert {i.key for i in status.open_incidents()} == {("server", "engine-0", "engine-hung"),
                                                        ("client", "proxy", "connection-wedged")}
    assert status.verdict_counts == {("server", "engine-0", "engine-hung"): 2,
                                     ("client", "proxy", "connection-wedged"): 1}


def test_only_a_conversation_started_after_the_last_verdict_clears_it():
    status = WatchStatus(started_at=0.0)
    incident = status.verdict(verdict(), at=10.0)
    status.verdict(verdict(), at=30.0)
    # Started before the last verdict (it may have been let through by a wedge): proves nothing.
    assert status.conversation_completed(started_at=20.0, at=40.0) == []
    assert status.conversation_completed(started_at=30.0, at=40.0) == []  # not after: at the same time
    assert incident.open
    assert status.conversation_completed(started_at=31.0, at=50.0) == [incident]
    assert not incident.open and incident.cleared_at == 50.0
    assert status.open_incidents() == []


def test_a_round_completing_never_clears_an_incident():
    status = WatchStatus(started_at=0.0)
    status.verdict(verdict(), at=10.0)
    status.round_ended("completed", at=11.0)
    status.round_ended("completed", at=12.0)
    assert len(status.open_incidents()) == 1
    assert status.rounds == {"completed": 2} and status.last_round_at == 12.0


def test_a_cleared_incident_reopens_as_a_new_one_and_the_verdict_count_keeps_growing():
    status = WatchStatus(started_at=0.0)
    old = status.verdict(verdict(), at=10.0)
    status.conversation_completed(started_at=11.0, at=20.0)
    new = status.verdict(verdict(), at=30.0)
    assert new is not old and new.open and not old.open
    assert (new.opened_at, new.verdicts) == (30.0, 1)
    assert status.verdict_counts[("server", "engine-0", "engine-hung")] == 2


def test_where_none_is_one_key_with_an_empty_where():
    status = WatchStatus(started_at=0.0)
    incident = status.verdict(verdict(side="unknown", where=None, kind="no-evidence"), at=1.0)
    assert incident.key == ("unknown", "", "no-evidence") and incident.where is None
    assert status.to_dict()["open_incidents"][0]["where"] is None


def test_recent_verdicts_are_bounded():
    status = WatchStatus(started_at=0.0)
    for i in range(RECENT_VERDICTS + 5):
        status.verdict(verdict(), at=float(i), segment="s")
    assert len(status.verdicts) == RECENT_VERDICTS
    assert status.verdicts[0]["at"] == 5.0 and status.verdicts[-1]["segment"] == "s"


def test_a_hops_history_keeps_the_last_hour_only():
    status = WatchStatus(started_at=0.0)
    status.watch_hops([("engine-0", "http://127.0.0.1:1", "engine")])
    hop = status.hops["engine-0"]
    for t in range(0, 7200, 15):
        hop.canary(answered=True, seconds=0.02, reason=None, at=float(t))
    assert hop.history[0].t >= 7185 - HOP_HISTORY_S
    assert hop.history[-1].t == 7185.0
    assert len(hop.history) == HOP_HISTORY_S / 15 + 1


def test_a_canary_sets_up_and_fills_the_histogram_only_when_answered():
    status = WatchStatus(started_at=0.0)
    status.watch_hops([("engine-0", "http://127.0.0.1:1", "engine")])
    hop = status.hops["engine-0"]
    assert hop.up is None  # not checked yet
    hop.canary(answered=True, seconds=0.03, reason=None, at=1.0)
    hop.canary(answered=True, seconds=60.0, reason=None, at=2.0)  # above every bound: +Inf only
    hop.canary(answered=False, seconds=1.0, reason="timeout: no SSE data event in 1 s", at=3.0)
    assert hop.up is False and hop.reason.startswith("timeout") and hop.canary_s is None
    assert hop.canary_count == 2 and hop.canary_sum == pytest.approx(60.03)
    assert hop.canary_buckets[CANARY_BUCKETS.index(0.05)] == 1 and sum(hop.canary_buckets) == 1


def test_a_hop_read_by_its_metrics_only_is_up_by_its_scrapes_a_canaried_hop_by_its_canaries():
    status = WatchStatus(started_at=0.0)
    status.watch_hops([("engine-0", "http://127.0.0.1:1", "engine"), ("smg", "http://127.0.0.1:2", "router")],
                      read_only={"smg"})
    engine, router = status.hops["engine-0"], status.hops["smg"]
    assert (engine.takes_canary, router.takes_canary) == (True, False)
    router.sampled(in_flight=3.0, at=1.0, answered=True)
    assert router.up is True and router.reason is None and router.to_dict()["takes_canary"] is False
    router.sampled(in_flight=None, at=3.0, answered=False, reason="connect: connection refused")
    assert router.up is False and router.reason == "connect: connection refused"
    # A canaried hop's scrape says nothing of whether it answers requests: its up stays its canary's.
    engine.sampled(in_flight=None, at=3.0, answered=False, reason="connect: connection refused")
    assert engine.up is None
    engine.canary(answered=True, seconds=0.01, reason=None, at=4.0)
    engine.sampled(in_flight=None, at=5.0, answered=False, reason="read timeout")
    assert engine.up is True and engine.reason is None
    # Its history: a point per change of state, else one per SCRAPE_POINT_EVERY_S of scrapes (bounded).
    for second in range(5, 125, 2):
        router.sampled(in_flight=1.0, at=float(second), answered=True)
    ups = [p.up for p in router.history]
    assert ups[:3] == [True, False, True] and all(ups[2:])
    assert len(router.history) == 3 + (123 - 5) // SCRAPE_POINT_EVERY_S
    # A hop that changes between canaried and read-only is another hop: its state starts afresh.
    status.watch_hops([("engine-0", "http://127.0.0.1:1", "engine"), ("smg", "http://127.0.0.1:2", "router")])
    assert status.hops["smg"].takes_canary is True and status.hops["smg"].up is None


def test_the_watched_set_follows_the_hops_given():
    status = WatchStatus(started_at=0.0)
    status.watch_hops([("a", "http://127.0.0.1:1", "engine"), ("b", "http://127.0.0.1:2", "engine")])
    status.hops["a"].canary(answered=True, seconds=0.01, reason=None, at=1.0)
    status.watch_hops([("a", "http://127.0.0.1:1", "engine"), ("c", "http://127.0.0.1:3", "router")])
    assert list(status.hops) == ["a", "c"]
    assert status.hops["a"].up is True  # kept, with its state
    status.watch_hops([("a", "http://127.0.0.1:9", "engine")])  # same name, another URL: another hop
    assert status.hops["a"].up is None
    status.hops_changed(added=1, removed=2)
    status.hops_changed(added=0, removed=1)
    assert status.hop_changes == {"added": 1, "removed": 3}


def test_a_conversation_clears_only_incidents_on_its_path_or_at_no_watched_hop():
    status = WatchStatus(started_at=0.0)
    status.watch_hops([("engine-a", "http://127.0.0.1:1", "engine"), ("engine-b", "http://127.0.0.1:2", "engine")])
    at_b = status.verdict(verdict(where="engine-b", kind="engine-unreachable"), at=1.0)
    client = status.verdict(verdict(side="client", where="client", kind="client-overloaded"), at=1.0)
    gone = status.verdict(verdict(where="engine-c"), at=1.0)  # a hop no longer watched
    # A conversation to engine-a proves nothing about engine-b.
    cleared = status.conversation_completed(started_at=2.0, at=3.0, path={"engine-a"})
    assert [i.key for i in cleared] == [client.key, gone.key]
    assert at_b.open
    assert status.conversation_completed(started_at=2.0, at=4.0, path={"engine-b"}) == [at_b]


def nginx_in_front_of_engine() -> WatchStatus:
    status = WatchStatus(started_at=0.0)
    status.watch_hops([("nginx", "http://127.0.0.1:1", "proxy"), ("engine-0", "http://127.0.0.1:2", "engine")],
                      behind={"nginx": ("engine-0",), "engine-0": ()})
    return status


def timed_out(status: WatchStatus, hop: str, at: float, *, health: bool) -> None:
    status.hops[hop].canary(answered=False, seconds=1.0, reason="timeout: no first byte in 1 s", at=at,
                            failure="timeout", health_answered=health)
    status.settle_up()


@pytest.mark.parametrize("engine_first", [True, False])
def test_a_hop_whose_canary_fails_only_as_the_engine_behind_it_fails_is_up(engine_first):
    """An engine hung behind nginx: both canaries time out, nginx's page answers (or its /health
    relays the engine's): nginx is up, the engine down; whichever canary of the wave came first."""
    status = nginx_in_front_of_engine()
    nginx, engine = status.hops["nginx"], status.hops["engine-0"]
    nginx.sampled(in_flight=3.0, at=0.5, answered=True)
    status.settle_up()
    for hop in (["engine-0", "nginx"] if engine_first else ["nginx", "engine-0"]):
        timed_out(status, hop, 1.0, health=True)
    assert (nginx.up, engine.up) == (True, False)
    assert nginx.explained_by == "engine-0" and engine.explained_by is None
    assert [p.up for p in nginx.history] == [True]  # its check's point says what was derived
    assert nginx.to_dict()["explained_by"] == "engine-0"
    # The engine answers again, nginx still times out: the failure is nginx's own now.
    engine.canary(answered=True, seconds=0.01, reason=None, at=2.0)
    status.settle_up()
    timed_out(status, "nginx", 2.0, health=True)
    assert nginx.up is False and nginx.explained_by is None


def test_a_frozen_hop_in_front_of_a_hung_engine_is_down():
    """nginx frozen (and the engine hung): its canary times out as the engine's does, but its page
    and /health are silent: nothing shows it answers, it is down."""
    status = nginx_in_front_of_engine()
    nginx = status.hops["nginx"]
    nginx.sampled(in_flight=3.0, at=0.5, answered=True)
    nginx.sampled(in_flight=None, at=0.9, answered=False, reason="timeout")
    timed_out(status, "engine-0", 1.0, health=True)
    timed_out(status, "nginx", 1.0, health=False)
    assert nginx.up is False and nginx.reason.startswith("timeout")


def test_a_hop_refusing_connections_is_down_whatever_is_behind_it():
    status = nginx_in_front_of_engine()
    status.hops["engine-0"].canary(answered=False, seconds=0.0, reason="connect: refused", at=1.0, failure="connect")
    status.hops["nginx"].sampled(in_flight=0.0, at=1.0, answered=True)
    status.hops["nginx"].canary(answered=False, seconds=0.0, reason="connect: refused", at=1.0, failure="connect",
                                health_answered=True)
    status.settle_up()
    assert status.hops["nginx"].up is False


def test_a_different_failure_behind_does_not_carry():
    status = nginx_in_front_of_engine()
    status.hops["nginx"].sampled(in_flight=0.0, at=0.5, answered=True)
    status.hops["engine-0"].canary(answered=False, seconds=0.1, reason="status 503", at=1.0, failure="http",
                                   health_answered=True)
    timed_out(status, "nginx", 1.0, health=True)
    assert status.hops["nginx"].up is False
