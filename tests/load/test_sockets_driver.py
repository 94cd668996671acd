"""The driver reads a stalled round's own socket (TCP_INFO, queues) right after flagging the stall,
and the evidence book hands that sample to the verdict of that round, not of another."""

from __future__ import annotations

import anyio
import pytest

from repro.core import events as ev
from repro.core.evidence_book import EvidenceBook
from repro.core.hop import Hop
from repro.load.driver import Driver, DriverConfig
from repro.load.prompts import PromptSource
from repro.load.watchdog import socket_sample
from tests.support.hostile import headers_then_nothing, healthy, hostile_server, scripted, silent

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def drive(url: str, *, rounds: int, conversations: int = 1, stall_after: float = 0.4):
    events: list[ev.Event] = []
    config = DriverConfig(base_url=url, model="m", rounds=rounds, conversations=conversations, stall_after=stall_after,
                          connect_timeout=1.0, round_timeout=10.0)
    driver = Driver(config, PromptSource(prompt_chars=40), events.append)
    with anyio.fail_after(20):
        await driver.run()
    return events


def after_each_stall(events: list[ev.Event]) -> list[tuple[ev.RoundStalled, ev.Event]]:
    return [(e, events[i + 1]) for i, e in enumerate(events) if isinstance(e, ev.RoundStalled)]


@pytest.mark.network
async def test_a_stall_on_a_reused_connection_carries_its_socket_right_after_the_stall():
    with hostile_server(scripted(healthy, silent)) as server:
        events = await drive(server.url, rounds=2)
    ((stall, sample),) = after_each_stall(events)
    assert isinstance(sample, ev.SocketSample), sample
    assert (sample.conv, sample.round) == (stall.conv, stall.round) == (0, 2)
    assert sample.t == stall.t and stall.reused is True
    s = sample.socket
    assert s.local == stall.local and s.remote == server.url.removeprefix("http://").removesuffix("/v1")
    assert s.state == "ESTABLISHED" and s.hop is None
    # The request went out and was acknowledged; nothing came back, nothing sits unread.
    assert s.rqueue == 0 and s.wqueue == 0 and s.unacked == 0 and not s.request_unacked
    assert s.bytes_acked > 0 and s.bytes_received > 0  # round 1's answer came on this connection
    # No byte since round 1's answer: at least as long as the round has been silent.
    assert s.last_data_recv_s >= stall.stalled_for_s - 0.05
    assert s.last_data_sent_s <= s.last_data_recv_s


@pytest.mark.network
async def test_a_mid_stream_stall_carries_its_socket_too():
    with hostile_server(headers_then_nothing) as server:
        events = await drive(server.url, rounds=1, conversations=2)
    pairs = after_each_stall(events)
    assert len(pairs) == 2
    for stall, sample in pairs:
        assert isinstance(sample, ev.SocketSample) and (sample.conv, sample.round) == (stall.conv, stall.round)
        assert sample.socket.local == stall.local and sample.socket.state == "ESTABLISHED"
        assert sample.socket.rqueue == 0 and stall.phase == "mid-stream"
    assert len({s.socket.local for _, s in pairs}) == 2  # each round its own connection


async def test_a_round_without_a_connection_has_no_socket_to_read():
    class State:
        transport = None
        conv, round = 0, 1

    assert socket_sample(State(), 1.0) is None

    class Gone:
        def get_extra_info(self, name):
            raise RuntimeError("transport closed")

    State.transport = Gone()
    assert socket_sample(State(), 1.0) is None  # never raises: the stall is flagged whatever this finds


def test_the_book_gives_a_stall_the_socket_of_its_own_round_and_the_pid_samples():
    from repro.core.socket_state import SocketState

    book = EvidenceBook([Hop("engine-0", "http://127.0.0.1:1")], stall_after=1.0)
    stall = ev.RoundStalled(t=5.0, conv=3, round=2, phase="before-first-byte", stalled_for_s=1.0, started_t=3.5,
                            last_progress_t=4.0)
    mine = ev.SocketSample(t=5.0, socket=SocketState(local="a:1", remote="b:2", state="ESTABLISHED"), conv=3, round=2)
    other = ev.SocketSample(t=5.0, socket=SocketState(local="a:3", remote="b:2", state="ESTABLISHED"), conv=4, round=2)
    harness = ev.SocketSample(t=5.2, socket=SocketState(local="h:9", remote="b:2", state="ESTABLISHED", pid=77))
    for sample in (mine, other, harness):
        book.add(sample)
    assert book.evidence_for(stall, until=6.0).sockets == (mine, harness)


def test_a_pooled_round_gets_no_proxy_record_of_whoever_used_its_connection_before():
    """--connections pool=N: conversation 1's round waited 4 s for a connection conversation 0 had
    used; the proxy's open record of that earlier request is not this round's."""
    book = EvidenceBook([Hop("proxy", "http://127.0.0.1:1", None, "proxy")], stall_after=1.0)
    earlier = {"flow": "f0", "client": "a:1", "event": "response_headers", "stage": "response", "status": 200}
    book.add(ev.ProxyFlow(t=2.0, data=earlier))
    book.add(ev.RoundConnected(t=5.0, conv=1, round=1, local="a:1", reused=True, pool_wait_s=4.0))
    own = {"flow": "f1", "client": "a:1", "event": "request", "stage": "request"}
    book.add(ev.ProxyFlow(t=5.01, data=own))
    stall = ev.RoundStalled(t=7.0, conv=1, round=1, phase="before-first-byte", stalled_for_s=2.0, started_t=1.0,
                            last_progress_t=5.0, local="a:1", reused=True)
    assert [f["flow"] for f in book.evidence_for(stall, until=7.5).flows] == ["f1"]
    # Without a connection time (a log from before it was streamed), the window starts at the round's start.
    bare = EvidenceBook([Hop("proxy", "http://127.0.0.1:1", None, "proxy")], stall_after=1.0)
    for t, data in ((2.0, earlier), (5.01, own)):
        bare.add(ev.ProxyFlow(t=t, data=data))
    assert [f["flow"] for f in bare.evidence_for(stall, until=7.5).flows] == ["f0", "f1"]
