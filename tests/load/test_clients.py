"""The driver's HTTP clients (repro/load/clients/): the connection pattern each produces, measured by a
real counting TCP relay in front of the simulated engine; a wedged proxy that only the pooled
clients meet; the library's own timeouts (--client-timeouts native) and what they would have done."""

from __future__ import annotations

import json
import re

import anyio
import pytest

from proxies.relay import start_relay
from repro.core import events as ev
from repro.io.runlog import read_run_log
from repro.load.driver import Driver, DriverConfig
from repro.load.prompts import PromptSource
from repro.sim import SimConfig, start_sim_process
from tests.support.hostile import headers_then_nothing, hostile_server, silent, trickle
from tests.support.ports import established_client_ports
from tests.support.runs import repro_run

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(scope="module")
def sim():
    with start_sim_process(SimConfig(ttft=0.005, itl=0.002, max_tokens_default=8)) as engine:
        yield engine


def drive(url: str, *, client: str, rounds: int = 3, conversations: int = 1, **options) -> tuple[list, list[ev.Event]]:
    events: list[ev.Event] = []
    config = DriverConfig(base_url=url, model="sim-model", rounds=rounds, conversations=conversations, max_tokens=8,
                          connect_timeout=2.0, round_timeout=10.0, client=client, ramp_up=0.0, **options)
    driver = Driver(config, PromptSource(prompt_chars=40), events.append)

    async def run():
        with anyio.fail_after(20):
            return await driver.run()

    return anyio.run(run), events


def connected(events: list[ev.Event]) -> list[ev.RoundConnected]:
    return [e for e in events if isinstance(e, ev.RoundConnected)]


@pytest.mark.network
@pytest.mark.parametrize("client, connections", [("aiohttp", 1), ("httpx", 1), ("openai-async", 1), ("openai", 3)])
def test_three_streamed_rounds_open_the_connections_each_library_opens(sim, client, connections):
    with start_relay(sim.url) as relay:
        outcomes, events = drive(relay.url, client=client)
        counted = relay.state()["connections"]
    assert [o.status for o in outcomes] == ["completed"] * 3, [o.error for o in outcomes]
    assert counted == connections  # what the relay accepted, whatever the driver believes
    rounds = connected(events)
    assert [c.round for c in rounds] == [1, 2, 3]
    assert len({c.local for c in rounds}) == connections and all(c.local.startswith("127.0.0.1:") for c in rounds)
    assert [c.reused for c in rounds] == ([False, True, True] if connections == 1 else [False, False, False])
    done = [e for e in events if isinstance(e, ev.RoundDone)]
    assert all(d.completion_tokens == 8 and d.reply_chars > 0 and d.events >= 9 for d in done), done
    # Every event of a round is counted, [DONE] included, as the aiohttp client counts it.
    sse = [e for e in events if isinstance(e, ev.SSEReceived) and e.round == 1]
    assert sse[-1].done and sse[-1].seq == done[0].events == sum(e.events for e in sse)


@pytest.mark.network
def test_a_shared_pool_of_two_serves_four_conversations_on_two_connections(sim):
    with start_relay(sim.url) as relay:
        outcomes, events = drive(relay.url, client="aiohttp", rounds=2, conversations=4, connections="pool=2")
        counted = relay.state()["connections"]
    assert [o.status for o in outcomes] == ["completed"] * 8
    assert counted == 2
    rounds = connected(events)
    assert len(rounds) == 8 and len({c.local for c in rounds}) == 2
    assert sum(not c.reused for c in rounds) == 2  # the rest reused one, whichever conversation used it last
    assert {c.conv for c in rounds if c.reused and c.round == 1}, "no conversation started on another's connection"


@pytest.mark.network
def test_fresh_opens_a_connection_for_every_round(sim):
    with start_relay(sim.url) as relay:
        outcomes, events = drive(relay.url, client="aiohttp", rounds=3, conversations=2, connections="fresh")
        counted = relay.state()["connections"]
    assert [o.status for o in outcomes] == ["completed"] * 6
    assert counted == 6 and [c.reused for c in connected(events)] == [False] * 6
    assert len({c.local for c in connected(events)}) == 6


@pytest.mark.network
@pytest.mark.parametrize("client, stalls", [("aiohttp", True), ("httpx", True), ("openai-async", True), ("openai", False)])
def test_a_proxy_wedging_a_connection_after_3_requests_stalls_only_clients_that_keep_it(tmp_path, client, stalls):
    code, summary, err = repro_run("--rounds", "4", "--conversations", "1", "--stall-after", "1.5", "--client", client,
                                   "--inject", "wedge-after=3", "--out", str(tmp_path / "run"), timeout=40)
    if not stalls:  # a new connection every round: the proxy never sees a 4th request on one
        assert code == 0 and summary["rounds_completed"] == 4 and not summary["verdicts"], err[-2000:]
        return
    assert summary["rounds_completed"] == 3 and summary["rounds_stalled"] == 1, err[-2000:]
    (verdict,) = summary["verdicts"]
    assert (verdict["side"], verdict["kind"], verdict["round"]) == ("client", "connection-wedged", 4)
    assert "Client:" not in verdict["summary"]  # repro's timeouts: no client fate is claimed
    assert f'"client":"{client}"' in (tmp_path / "run" / "events.jsonl").read_text().splitlines()[0]


@pytest.mark.network
def test_native_timeouts_say_when_the_sdk_would_have_given_up_on_a_wedged_proxy(tmp_path):
    code, summary, err = repro_run("--rounds", "4", "--conversations", "1", "--stall-after", "1.5",
                                   "--client", "openai-async", "--client-timeouts", "native",
                                   "--inject", "wedge-after=3", "--out", str(tmp_path / "run"), timeout=40)
    (verdict,) = summary["verdicts"]
    assert verdict["kind"] == "connection-wedged", err[-2000:]
    (fate,) = [e for e in verdict["evidence"] if (e["hop"], e["signal"]) == ("client", "native timeout")]
    # Before headers: the SDK retries twice, each attempt waiting 600 s for a byte.
    # The retry time is an upper bound (the SDK jitters its backoff down), and what it assumes is said.
    assert "the openai SDK (async) would have raised APITimeoutError by about t=" in fate["value"]
    assert "after 2 retries, each waiting 600 s for a byte, if every attempt stalls alike" in fate["value"]
    fires_at = float(re.search(r"by about t=([0-9.]+) s", fate["value"])[1])
    assert fires_at > 1800 and f"Client: {fate['value']}." in verdict["summary"]
    # The entry is stamped when it was observed (the stall), not when the client would give up.
    assert fate["at"] == pytest.approx(verdict_stall_t(tmp_path / "run"), abs=0.01)


def verdict_stall_t(run_dir) -> float:
    (stall,) = read_run_log(run_dir).of(ev.RoundStalled)
    return stall.t


@pytest.mark.network
def test_native_timeouts_see_a_keepalive_trickle_the_sdk_would_wait_on_forever(tmp_path):
    with hostile_server(trickle) as server:
        code, summary, err = repro_run("--target", server.url, "--model", "m", "--rounds", "1", "--stall-after", "1",
                                       "--client", "openai-async", "--client-timeouts", "native", "--conversations", "1",
                                       "--probe-interval", "0", "--canary-timeout", "0.5", "--out", str(tmp_path / "r"),
                                       timeout=25)
    assert summary["rounds_stalled"] == 1, err[-2000:]
    (fate,) = [e for v in summary["verdicts"] for e in v["evidence"] if e["signal"] == "native timeout"]
    assert fate["value"].startswith("the openai SDK (async) would have waited 600 s per read and not timed out while "
                                    "bytes keep coming: a byte arrived about every "), fate
    every = float(re.search(r"about every ([0-9.]+) s", fate["value"])[1])
    assert 0.15 <= every <= 0.3, fate  # the server sends a comment byte every 0.2 s


@pytest.mark.network
def test_native_httpx_ends_a_silent_stream_by_its_own_5_s_read_timeout():
    with hostile_server(headers_then_nothing) as server:
        outcomes, events = drive(server.url, client="httpx", rounds=1, stall_after=8.0, client_timeouts="native")
    (failed,) = [e for e in events if isinstance(e, ev.RoundFailed)]
    assert outcomes[0].status == "failed" and failed.failure == "timeout" and failed.phase == "mid-stream"
    assert failed.error == "ReadTimeout: no byte for 5 s (httpx's per-read timeout)"
    assert 5.0 <= failed.duration_s < 7.0 and not any(isinstance(e, ev.RoundStalled) for e in events)


@pytest.mark.network
def test_repro_timeouts_leave_a_silent_httpx_stream_to_the_watchdog():
    with hostile_server(headers_then_nothing) as server:
        outcomes, events = drive(server.url, client="httpx", rounds=1, stall_after=0.5)
    assert outcomes[0].status == "stalled" and any(isinstance(e, ev.RoundAbandoned) for e in events)


@pytest.mark.network
@pytest.mark.parametrize("behaviour", [silent, headers_then_nothing])
def test_an_abandoned_sync_sdk_round_ends_its_thread_and_closes_its_socket(behaviour):
    with hostile_server(behaviour) as server:
        outcomes, events = drive(server.url, client="openai", rounds=2, stall_after=0.4)
        ours = {int(c.local.rsplit(":", 1)[1]) for c in connected(events)}
        still_open = ours & established_client_ports(server.port)
    assert [o.status for o in outcomes] == ["stalled", "stalled"]
    abandoned = [e for e in events if isinstance(e, ev.RoundAbandoned)]
    assert len(abandoned) == 2 and all(a.duration_s < 2.0 for a in abandoned)  # bounded: not the 10 s deadline
    # The driver waits (bounded) for the worker thread's call to return before it moves on; it warns if not.
    assert not any(isinstance(e, ev.Note) and "did not end" in e.message for e in events)
    assert len(ours) == 2 and not still_open, still_open


def test_client_options_are_checked_with_one_line_errors():
    from repro.core.errors import UsageError
    from repro.load.clients import check_client_options

    with pytest.raises(UsageError, match="applies to --client aiohttp only"):
        check_client_options("httpx", "pool=4", "repro")
    with pytest.raises(UsageError, match="give e.g. pool=8"):
        check_client_options("aiohttp", "pool=0", "repro")
    check_client_options("aiohttp", "fresh", "native")


def test_what_each_client_would_have_done_follows_from_the_timeline_alone():
    from repro.core.client_timeouts import POLICIES, would_be

    def fate(client, **timeline):
        return would_be(POLICIES[client], **{"started_t": 10.0, "headers": True, "last_byte_t": 12.0,
                                             "trickle_every_s": None, "observed_until": 20.0, **timeline})

    assert fate("httpx").at == 17.0 and "ReadTimeout at t=17.0 s, 5 s after the last byte" in fate("httpx").text
    assert "if no byte comes before then (observed up to t=20.0 s)" in fate("httpx").text
    assert fate("aiohttp").at == 310.0 and "300 s total timeout" in fate("aiohttp").text
    assert fate("openai").at == 612.0
    # Before headers the SDK retries twice; each attempt waits 600 s again, plus at most 1.5 s of backoff.
    assert fate("openai-async", headers=False, last_byte_t=None).at == 10.0 + 1800 + 1.5
    # A keep-alive byte every 20 s resets a 600 s read timeout for good; not a 5 s one.
    kept = fate("openai", last_byte_t=40.0, trickle_every_s=20.0, observed_until=45.0)
    assert kept.at is None and "not timed out while bytes keep coming: a byte arrived about every 20 s" in kept.text
    assert "(observed up to t=45.0 s)" in kept.text
    assert fate("httpx", last_byte_t=40.0, trickle_every_s=20.0, observed_until=45.0).at == 45.0
    # A trickle that stopped (silent for twice its interval) no longer keeps the read alive.
    assert fate("openai", last_byte_t=40.0, trickle_every_s=2.0, observed_until=45.0).at == 640.0


@pytest.mark.network
def test_an_abandoned_sync_sdk_round_is_not_retried_by_the_sdk_under_its_native_retries():
    with hostile_server(silent) as server:
        outcomes, events = drive(server.url, client="openai", rounds=1, stall_after=0.4, client_timeouts="native")
        requests = len(server.requests)
    assert [o.status for o in outcomes] == ["stalled"]
    (abandoned,) = [e for e in events if isinstance(e, ev.RoundAbandoned)]
    assert abandoned.duration_s < 2.0 and requests == 1  # the socket shut down, the SDK's retry refused
    assert not any(isinstance(e, ev.Note) and "did not end" in e.message for e in events)


@pytest.mark.network
def test_rounds_waiting_for_a_slot_of_a_shared_pool_of_one_are_neither_stalls_nor_connect_timeouts(tmp_path):
    # 600-token rounds of ~3 s each: the fourth conversation waits ~9 s for the one connection,
    # past the 5 s connect timeout, which bounds only the TCP connect in pool mode, and past the
    # 4 s stall trigger: the wait is the client's own queue, no hop was ever silent (it was once
    # judged connection-wedged, on a round that had no connection at all).
    # The round deadline (10 s) counts from the connection: the last round's 9 s in the queue plus
    # its 3 s on the wire do not fail it.
    code, summary, err = repro_run("--rounds", "1", "--conversations", "4", "--max-tokens", "600",
                                   "--connections", "pool=1", "--stall-after", "4", "--round-timeout", "10",
                                   "--out", str(tmp_path / "run"), timeout=40)
    assert code == 0 and summary["rounds_completed"] == 4 and not summary["verdicts"], (summary, err[-2000:])
    waits = [json.loads(line)["pool_wait_s"] for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()
             if '"type":"round_connected"' in line]
    assert len(waits) == 4 and max(waits) > 5.0, waits  # past the stall trigger and the connect timeout


@pytest.mark.network
def test_a_stalled_sync_sdk_round_leaves_nothing_behind_in_the_next_round_of_its_conversation():
    from tests.support.hostile import healthy, scripted

    with hostile_server(scripted(headers_then_nothing, healthy)) as server:
        outcomes, events = drive(server.url, client="openai", rounds=2, stall_after=0.3, judge_budget=0.5)
    assert [o.status for o in outcomes] == ["stalled", "completed"], [o.error for o in outcomes]
    (abandoned,) = [e for e in events if isinstance(e, ev.RoundAbandoned)]
    (started,) = [e for e in events if isinstance(e, ev.RoundStarted) and e.round == 2]
    # Nothing of round 1 is recorded after it was abandoned, and round 2's records are its own.
    late = [e for e in events if getattr(e, "round", None) == 1 and e.t > abandoned.t]
    assert not late, late
    second = [e for e in events if isinstance(e, (ev.SSEReceived, ev.RoundConnected)) and e.round == 2]
    assert second and all(e.t >= started.t for e in second)
    assert [c.round for c in connected(events)] == [1, 2]
    assert not any(isinstance(e, ev.Note) and "did not end" in e.message for e in events)


def test_the_sync_sdk_thread_has_a_read_timeout_equal_to_the_drivers_read_backstop():
    from repro.load.clients.openai_client import OpenAIFamily

    config = DriverConfig(base_url="http://127.0.0.1:9", model="m", stall_after=0.3, judge_budget=0.5,
                          client="openai")
    driver = Driver(config, PromptSource(prompt_chars=40), lambda event: None)

    async def timeouts():
        sync = OpenAIFamily(driver.hooks, sync=True).conversation(0)
        unbounded = OpenAIFamily(driver.hooks, sync=False).conversation(0)
        try:
            return sync.timeout, unbounded.timeout
        finally:
            await sync.aclose()
            await unbounded.aclose()

    sync, unbounded = anyio.run(timeouts)
    # A worker thread cannot be cancelled: its own read timeout is what ends it if nothing else does.
    assert sync.read == sync.write == 0.3 + 0.5 + 5.0 and sync.connect == config.connect_timeout
    assert unbounded.read is None  # the async client is cancelled by the driver: the watchdog is its backstop


@pytest.mark.network
def test_a_round_whose_deadline_passes_in_the_clients_own_queue_is_client_queued_not_a_hop(tmp_path):
    # ~3 s rounds through one pooled connection; the third conversation is still queued when its
    # 4 s deadline passes. It never left the client: no hop may be blamed (it once was judged a
    # wedged connection, on a connection 1 ms old).
    code, summary, err = repro_run("--rounds", "1", "--conversations", "3", "--max-tokens", "600",
                                   "--connections", "pool=1", "--stall-after", "2", "--round-timeout", "4",
                                   "--out", str(tmp_path / "run"), timeout=40)
    assert summary["rounds_completed"] == 2 and summary["rounds_failed"] == 1, (summary, err[-2000:])
    (verdict,) = summary["verdicts"]
    assert (verdict["side"], verdict["where"], verdict["kind"]) == ("client", "client", "client-queued"), verdict
    assert "never left the client" in verdict["summary"] and "waiting for a connection" in verdict["summary"]
    assert code == 10
