"""The Watch session in process: its cycles number conversations on and keep no outcome list, its
cost is an upper bound from the settings, what a hop's page says in flight is read as it says."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from repro.core import events as ev
from repro.core.hop import Hop
from repro.core.snapshot import Snapshot
from repro.io.rotating_log import read_range
from repro.load.driver import DriverConfig
from repro.load.prompts import PromptSource
from repro.session.watch import Watch, WatchSettings
from repro.session.watch_cost import watch_cost
from repro.session.watch_progress import in_flight_of
from repro.session.watch_server import bind_listen, parse_listen
from repro.sim import SimConfig, serve_in_thread

pytestmark = pytest.mark.timeout(120)


def test_the_cost_is_bounded_by_the_think_time_and_max_tokens():
    cost = watch_cost(conversations=2, rounds=8, think=5.0, max_tokens=16, prompt_chars=60, hops=2,
                      canary_every=15.0, metric_hops=2, probe_interval=2.0)
    assert cost.requests_per_min == 24 and cost.completion_tokens_per_min == 24 * 16
    # Round r sends r user turns of 60 characters (15 tokens) and r-1 replies of at most 16 tokens.
    assert cost.prompt_tokens_per_min == pytest.approx(24 * sum(15 * r + 16 * (r - 1) for r in range(1, 9)) / 8)
    # Metrics every 2 s, and once more with each canary wave (every 15 s): 2 hops x (30 + 4).
    assert cost.canary_requests_per_min == 8 and cost.scrapes_per_min == 68
    unbounded = watch_cost(conversations=2, rounds=8, think=0.0, max_tokens=16, prompt_chars=60, hops=1,
                           canary_every=15.0, metric_hops=0, probe_interval=2.0)
    assert unbounded.requests_per_min is None and "requests_per_min" not in unbounded.as_status()


def sample(**fields) -> ev.ProbeSample:
    return ev.ProbeSample(t=1.0, hop="h", snapshot=Snapshot(hop="h", **fields))


def test_in_flight_is_the_pages_own_gauge_else_batch_plus_queue_else_not_read():
    assert in_flight_of(sample(ok=True, in_flight=3.0, running=1.0)) == 3.0
    assert in_flight_of(sample(ok=True, running=2.0, queued=5.0)) == 7.0
    assert in_flight_of(sample(ok=True, running=2.0)) == 2.0
    assert in_flight_of(sample(ok=True)) is None  # a page without such a gauge: not read, not idle
    assert in_flight_of(sample(ok=False, error="refused", in_flight=0.0)) is None


@pytest.mark.network
def test_cycles_number_conversations_on_and_keep_no_outcomes(tmp_path):
    with serve_in_thread(SimConfig(itl=0.001)) as sim:
        sock = bind_listen(parse_listen("127.0.0.1:0"))
        settings = WatchSettings(
            driver=DriverConfig(base_url="", model="sim-model", rounds=2, conversations=2, think_time=0.0,
                                max_tokens=4, ramp_up=0.0),
            prompts=PromptSource(prompt_chars=20), sock=sock, hops=[Hop("engine-0", sim.url)],
            canary_every=1.0, probe_interval=0.5, duration=4.0, out=tmp_path / "w")
        watch = Watch(settings, console=Console(file=io.StringIO(), width=200))
        summary = watch.execute()
    log = read_range(tmp_path / "w", None, None)
    started = [(e.conv, e.round) for e in log.events if isinstance(e, ev.RoundStarted)]
    convs = sorted({conv for conv, _round in started})
    # A cycle lasts a second at least (MIN_CYCLE_S): 4 s hold 3 cycles or more, each numbered on.
    assert len(convs) >= 6 and convs == list(range(len(convs)))
    assert {r for _c, r in started} == {1, 2}  # each cycle's conversations start afresh from round 1
    done = sum(isinstance(e, ev.RoundDone) for e in log.events)
    assert summary["rounds"]["completed"] == done >= 2 * len(convs) - 2
    assert "watch deadline of 4 s passed" in summary["reason"]
    # Nothing of a finished cycle is kept: no Driver (and its outcome list), no conversation in progress.
    assert all(stack.driver is None for stack in watch.stacks.values())
    assert len(watch.progress.in_progress) <= 2
    assert isinstance(log.events[-1], ev.RunFinished)


@pytest.mark.network
def test_a_hop_read_by_its_metrics_only_is_up_or_down_by_its_scrapes(tmp_path):
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from repro.lab.router_launcher import free_port

    refused = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with serve_in_thread(SimConfig(itl=0.001)) as sim:
        # Two hops as discovery makes a router on its metrics port: read, never sent a canary.
        hops = [Hop("engine-0", sim.url),
                Hop("router", sim.url + "/router", metrics_url=sim.url + "/metrics", role="router", canary=False),
                Hop("gone", refused, metrics_url=refused + "/metrics", role="router", canary=False)]
        settings = WatchSettings(
            driver=DriverConfig(base_url="", model="sim-model", rounds=2, conversations=1, think_time=0.0,
                                max_tokens=4, ramp_up=0.0),
            prompts=PromptSource(prompt_chars=20), sock=bind_listen(parse_listen("127.0.0.1:0")), hops=hops,
            canary_every=1.0, probe_interval=0.5, duration=3.0, out=tmp_path / "w")
        watch = Watch(settings, console=Console(file=io.StringIO(), width=200))
        watch.execute()
    up = {s.labels["hop"]: s.value for family in text_string_to_metric_families(generate_latest(watch.registry).decode())
          for s in family.samples if s.name == "repro_watch_hop_up"}
    assert up == {"engine-0": 1.0, "router": 1.0, "gone": 0.0}
    gone, router = watch.status.hops["gone"], watch.status.hops["router"]
    assert "refused" in gone.reason and router.reason is None
    assert gone.canary_count == router.canary_count == 0  # no canary was sent to either: the scrapes said it
    log = read_range(tmp_path / "w", None, None)
    assert {e.hop for e in log.events if isinstance(e, ev.CanaryResult)} == {"engine-0"}


@pytest.mark.network  # binds its --listen socket
def test_a_signal_held_before_the_event_loop_ran_stops_it_at_once_with_the_log_closed(tmp_path):
    import signal

    settings = WatchSettings(
        driver=DriverConfig(base_url="", model="sim-model", rounds=2, conversations=1, think_time=0.0, ramp_up=0.0),
        prompts=PromptSource(prompt_chars=20), sock=bind_listen(parse_listen("127.0.0.1:0")),
        hops=[Hop("engine-0", "http://127.0.0.1:1")], duration=30.0, out=tmp_path / "w")
    console = io.StringIO()
    summary = Watch(settings, console=Console(file=console, width=200), held_signals=[signal.SIGTERM]).execute()
    assert summary["reason"] == "interrupted by SIGTERM" and summary["rounds"] == {}
    assert "interrupted by SIGTERM while starting" in console.getvalue()
    log = read_range(tmp_path / "w", None, None)
    assert [type(e) for e in log.events] == [ev.RunStarted, ev.RunFinished]


@pytest.mark.network
def test_what_it_sends_is_within_the_cost_it_states(tmp_path):
    """Counted from the run log: rounds, canaries and metric reads per minute, each at most what
    the cost line says (a fifth over at the run's edges: what the first instant sends), and the
    reads near it (they run on a clock, not on replies)."""
    with serve_in_thread(SimConfig(itl=0.001)) as sim:
        settings = WatchSettings(
            driver=DriverConfig(base_url="", model="sim-model", rounds=3, conversations=1, think_time=0.5,
                                max_tokens=4, ramp_up=0.0),
            prompts=PromptSource(prompt_chars=20), sock=bind_listen(parse_listen("127.0.0.1:0")),
            hops=[Hop("engine-0", sim.url)], canary_every=1.0, probe_interval=0.5, duration=8.0, out=tmp_path / "w")
        watch = Watch(settings, console=Console(file=io.StringIO(), width=200))
        watch.execute()
    cost = watch.cost()
    log = read_range(tmp_path / "w", None, None)
    minutes = (log.events[-1].t - log.events[0].t) / 60

    def per_min(kind) -> float:
        return sum(isinstance(e, kind) for e in log.events) / minutes

    sent = {"rounds": per_min(ev.RoundStarted), "canaries": per_min(ev.CanaryResult), "reads": per_min(ev.ProbeSample)}
    stated = {"rounds": cost.requests_per_min, "canaries": cost.canary_requests_per_min, "reads": cost.scrapes_per_min}
    assert stated == {"rounds": 120, "canaries": 60, "reads": 180}
    for what, rate in sent.items():
        assert rate <= stated[what] * 1.25, (what, sent, stated)
    assert sent["reads"] >= stated["reads"] * 0.6, (sent, stated)


@pytest.mark.network  # binds its --listen socket
def test_a_stack_remade_by_a_hop_discovered_beside_keeps_when_each_page_last_answered(tmp_path):
    """The hops given plus one discovered beside them make a new stack (and a new evidence book):
    when nginx's page last answered is the watch's history, kept across it."""
    import anyio

    hops = [Hop("nginx", "http://127.0.0.1:9", metrics_url="http://127.0.0.1:9/nginx_status", role="proxy"),
            Hop("engine-0", "http://127.0.0.1:10", role="engine")]
    settings = WatchSettings(
        driver=DriverConfig(base_url="", model="sim-model", rounds=2, conversations=1, think_time=0.0, max_tokens=4,
                            ramp_up=0.0),
        prompts=PromptSource(prompt_chars=20), sock=bind_listen(parse_listen("127.0.0.1:0")), hops=hops,
        out=tmp_path / "w")
    watch = Watch(settings, console=Console(file=io.StringIO(), width=80))
    try:
        anyio.run(watch._sync_stacks)
        (first,) = watch.stacks.values()
        first.book.add(ev.ProbeSample(t=5.0, hop="nginx", snapshot=Snapshot(hop="nginx", ok=True, in_flight=0)))
        watch.discovery.discovered = [Hop("engine-1", "http://127.0.0.1:11", role="engine")]
        anyio.run(watch._sync_stacks)
        (remade,) = watch.stacks.values()
        assert remade is not first and [h.name for h in remade.hops] == ["nginx", "engine-0", "engine-1"]
        assert remade.book.page_answered == {"nginx": (5.0,)}
    finally:
        settings.sock.close()
        watch.log.close()
