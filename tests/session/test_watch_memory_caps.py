"""What a watch keeps stops at its cap: hops renamed every cycle leave no canary lists behind in
the books, and cleared incidents of ever new hops are forgotten oldest first."""

from __future__ import annotations

import pytest

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.evidence_book import CANARIES_PER_HOP, EvidenceBook
from repro.core.hop import Hop
from repro.core.watch_status import CLEARED_INCIDENTS_KEPT, WatchStatus

pytestmark = pytest.mark.timeout(60)


def test_a_book_keeps_canaries_of_its_own_hops_only_and_the_last_few():
    book = EvidenceBook([Hop("engine-0", "http://127.0.0.1:1")], stall_after=1.0)
    for i in range(10 * CANARIES_PER_HOP):
        for hop in ("engine-0", f"renamed-{i}"):
            book.add(ev.CanaryResult(t=float(i), hop=hop, outcome=CanaryOutcome(hop=hop, url="http://127.0.0.1:1", ok=True, total_s=0.01)))
    assert set(book.canaries) == {"engine-0"}
    assert len(book.canaries["engine-0"]) == CANARIES_PER_HOP


def test_a_watchs_book_keeps_samples_by_age_too_and_a_runs_by_count_only():
    from repro.core.evidence_book import MAX_SAMPLES_PER_HOP
    from repro.core.snapshot import Snapshot

    hop = Hop("engine-0", "http://127.0.0.1:1")
    aged = EvidenceBook([hop], stall_after=1.0, samples_kept_s=100.0)
    counted = EvidenceBook([hop], stall_after=1.0)
    for i in range(2 * MAX_SAMPLES_PER_HOP):  # a sample a second: 4000 s
        sample = ev.ProbeSample(t=float(i), hop="engine-0", snapshot=Snapshot(hop="engine-0", ok=True))
        aged.add(sample)
        counted.add(sample)
    assert [s.t for s in aged.samples["engine-0"]] == [float(t) for t in range(3899, 4000)]
    assert len(counted.samples["engine-0"]) == MAX_SAMPLES_PER_HOP
    assert aged.page_answered["engine-0"] == counted.page_answered["engine-0"] == (3998.0, 3999.0)


def test_cleared_incidents_stop_at_their_cap_oldest_cleared_forgotten():
    status = WatchStatus(started_at=0.0)
    for i in range(3 * CLEARED_INCIDENTS_KEPT):
        status.verdict({"side": "server", "where": f"engine-{i}", "kind": "engine-hung", "summary": "s"}, at=i)
        status.conversation_completed(started_at=i + 0.5, at=i + 0.9)
    assert len(status.incidents) == CLEARED_INCIDENTS_KEPT
    assert min(i.cleared_at for i in status.incidents.values()) == pytest.approx(2 * CLEARED_INCIDENTS_KEPT + 0.9)


def test_verdict_series_stop_at_their_cap_and_a_hops_history_at_its_points():
    from repro.core.watch_status import HOP_POINTS_KEPT, VERDICT_SERIES_KEPT, HopState

    status = WatchStatus(started_at=0.0)
    for i in range(2 * VERDICT_SERIES_KEPT):
        status.verdict({"side": "server", "where": f"engine-{i}", "kind": "engine-hung", "summary": "s"}, at=i)
    assert len(status.verdict_counts) == VERDICT_SERIES_KEPT
    assert ("server", f"engine-{2 * VERDICT_SERIES_KEPT - 1}", "engine-hung") in status.verdict_counts
    hop = HopState(name="h", url="http://127.0.0.1:1")
    for i in range(2 * HOP_POINTS_KEPT):  # canaries every 0.1 s: within the hour, capped by count
        hop.canary(answered=True, seconds=0.01, reason=None, at=i * 0.1)
    assert len(hop.history) == HOP_POINTS_KEPT


def renamed_verdict(i: int) -> dict:
    return {"side": "server", "where": f"renamed-{i}", "kind": "engine-hung", "summary": f"engine renamed-{i} hangs"}


def test_open_incidents_stop_at_their_cap_when_nothing_completes_the_oldest_forgotten():
    from repro.core.watch_status import OPEN_INCIDENTS_KEPT

    status = WatchStatus(started_at=0.0)
    for i in range(4 * OPEN_INCIDENTS_KEPT):  # hops renamed every cycle, every one judged, none clears
        status.verdict(renamed_verdict(i), at=float(i))
    opened = status.open_incidents()
    assert len(opened) == OPEN_INCIDENTS_KEPT
    assert min(i.last_verdict_at for i in opened) == 3 * OPEN_INCIDENTS_KEPT  # the newest kept


def test_the_terminal_feed_keeps_its_last_causes_only():
    import io

    from rich.console import Console

    from repro.core.verdict import Verdict
    from repro.reporting.terminal import FEED_CAUSES_KEPT, VerdictFeed

    out = io.StringIO()
    feed = VerdictFeed(Console(file=out, width=80))
    for i in range(FEED_CAUSES_KEPT + 8):  # each new cause renders a panel: a few past the cap suffice
        feed(Verdict(side="server", where=f"renamed-{i}", kind="engine-hung", confidence="high", phase=None,
                     conversation=i, round=1, stalled_for_s=None, evidence=[], ruled_out=[], summary="s"))
    assert len(feed.counts) == FEED_CAUSES_KEPT
    assert ("server", f"renamed-{FEED_CAUSES_KEPT + 7}", "engine-hung") in feed.counts
    assert ("server", "renamed-7", "engine-hung") not in feed.counts
    assert ("server", "renamed-8", "engine-hung") in feed.counts


def test_hops_past_the_cap_are_left_out_and_the_watched_ones_stay():
    from repro.core.hop_changes import capped_hops

    fleet = [Hop(f"engine-{i}", f"http://127.0.0.1:{9000 + i}") for i in range(10)]
    watched = capped_hops([], fleet, 4)
    assert [h.name for h in watched] == ["engine-0", "engine-1", "engine-2", "engine-3"]
    # The fleet rescheduled: engine-1 gone, new hops ahead of the watched ones in Prometheus's order.
    moved = [Hop("engine-new", "http://127.0.0.1:9999"), *[h for h in fleet if h.name != "engine-1"]]
    assert [h.name for h in capped_hops(watched, moved, 4)] == ["engine-0", "engine-2", "engine-3", "engine-new"]


def test_discovery_says_once_that_it_found_more_hops_than_a_watch_keeps():
    import types

    from repro.core.watch_status import HOPS_WATCHED_MAX
    from repro.session.watch_discovery import HopDiscovery

    notes: list[str] = []

    async def changed() -> None:
        return None

    given = [Hop("front", "http://127.0.0.1:8000")]
    discovery = HopDiscovery(types.SimpleNamespace(hops=given), WatchStatus(started_at=0.0),  # type: ignore[arg-type]
                             note=lambda message, level="warning": notes.append(message), changed=changed)
    fleet = [Hop(f"engine-{i}", f"http://127.0.0.1:{9000 + i}") for i in range(2 * HOPS_WATCHED_MAX)]
    for _ in range(3):
        kept = discovery._capped(fleet)
        discovery.discovered = kept
    assert len(kept) == HOPS_WATCHED_MAX - len(given)
    assert len(notes) == 1 and f"{2 * HOPS_WATCHED_MAX} hops found" in notes[0]
    discovery._capped(fleet[:3])
    discovery._capped(fleet)
    assert len(notes) == 2  # under the cap, then over it again: said again


def exposition_lines(status: WatchStatus) -> int:
    from prometheus_client.exposition import generate_latest

    from repro.reporting.watch_metrics import watch_registry

    return len(generate_latest(watch_registry(status, clock=lambda: 0.0)).splitlines())


def test_high_churn_discovery_does_not_grow_the_metric_series():
    """Hops renamed at every cycle, each canaried and judged, thousands of cycles on a compressed
    clock: /metrics' series stop at what the caps allow, the same at cycle 1000 as at 6000."""
    from repro.core.watch_status import (
        CANARY_BUCKETS,
        CLEARED_INCIDENTS_KEPT,
        OPEN_INCIDENTS_KEPT,
        VERDICT_SERIES_KEPT,
    )

    status = WatchStatus(started_at=0.0)
    fixed = [("engine-0", "http://127.0.0.1:9000", "engine"), ("nginx", "http://127.0.0.1:8080", "proxy")]
    counted = {}
    for cycle in range(6000):
        t = float(cycle)
        name = f"renamed-{cycle}"
        status.watch_hops([*fixed, (name, f"http://127.0.0.1:{10000 + cycle}", "engine")])
        status.hops_changed(added=1, removed=1)
        for hop in ("engine-0", "nginx", name):  # the renamed one's canary fails: its verdict is real
            status.hops[hop].canary(answered=hop != name, seconds=0.01, reason="timeout", at=t, failure="timeout")
            status.hops[hop].sampled(in_flight=1.0, at=t)
        status.verdict(renamed_verdict(cycle), at=t)
        if cycle % 500 == 499:  # now and then a conversation completes: the open ones clear
            status.conversation_completed(started_at=t + 0.1, at=t + 0.5)
        if cycle in (999, 5999):
            counted[cycle] = exposition_lines(status)
    assert counted[999] == counted[5999]
    # Per hop: up, in flight, sample age, the histogram's buckets + sum + count; per incident two
    # series at most, per verdict key one; the rest fixed (HELP/TYPE lines and the few unlabelled).
    per_hop = 3 + len(CANARY_BUCKETS) + 3
    bound = 200 + 3 * per_hop + 2 * (OPEN_INCIDENTS_KEPT + CLEARED_INCIDENTS_KEPT) + VERDICT_SERIES_KEPT
    assert counted[5999] <= bound


@pytest.mark.network  # binds its --listen socket
def test_books_of_stacks_discovery_replaces_go_at_once_or_when_the_cycle_driving_them_ends(tmp_path):
    """Discovery renames the engine 300 times: the watch's books stay one per stack, plus, while a
    cycle runs, the books of the stacks that cycle began with (its rounds are still judged)."""
    import io

    import anyio
    from prometheus_client.exposition import generate_latest
    from rich.console import Console

    from repro.load.driver import DriverConfig
    from repro.load.prompts import PromptSource
    from repro.session.watch import Watch, WatchSettings
    from repro.session.watch_server import bind_listen, parse_listen

    settings = WatchSettings(
        driver=DriverConfig(base_url="", model="sim-model", rounds=2, conversations=1, think_time=0.0, max_tokens=4,
                            ramp_up=0.0),
        prompts=PromptSource(prompt_chars=20), sock=bind_listen(parse_listen("127.0.0.1:0")),
        prometheus="http://127.0.0.1:9", out=tmp_path / "w")
    watch = Watch(settings, console=Console(file=io.StringIO(), width=80))

    def rename(i: int) -> None:
        watch.discovery.discovered = [Hop(f"engine-{i}", f"http://127.0.0.1:{10000 + i}", role="engine")]
        anyio.run(watch._sync_stacks)

    try:
        rename(0)
        watch._cycle_ended()
        for i in range(1, 300):
            rename(i)
        assert len(watch.books) == 1 and watch.books[0] is watch.stacks["http://127.0.0.1:10299"].book
        lines = len(generate_latest(watch.registry).splitlines())  # the watch's own /metrics
        # Its samples by age: the round's deadline, the trigger, the judge's budget and a minute.
        d = settings.driver
        assert watch.books[0].samples_kept_s == d.round_timeout + d.stall_after + d.judge_budget + 60.0
        watch.cycles.cycling = list(watch.stacks.values())  # a cycle begins with engine-299's stack
        driven = watch.cycles.cycling[0].book
        for i in range(300, 600):
            rename(i)
        assert watch.books == [driven, watch.stacks["http://127.0.0.1:10599"].book]
        watch.cycles.cycling = []
        watch._cycle_ended()
        assert watch.books == [watch.stacks["http://127.0.0.1:10599"].book]
        assert len(watch.status.hops) == 1
        assert len(generate_latest(watch.registry).splitlines()) == lines
    finally:
        settings.sock.close()
        watch.log.close()
