"""The driver against scripted servers on 127.0.0.1: history, reuse, stalls, failures."""

import anyio
import pytest

from repro.core import events as ev
from repro.load.driver import Driver, DriverConfig
from repro.load.prompts import PromptSource
from tests.support.hostile import (
    SSE_HEADERS,
    chunk,
    close_mid_chunk,
    headers_then_nothing,
    healthy,
    hostile_server,
    malformed_json,
    respond,
    scripted,
    silent,
    sse,
    token,
    trickle,
)

pytestmark = [pytest.mark.network, pytest.mark.anyio, pytest.mark.timeout(30)]


class FnJudge:
    """A plain coroutine function as the watchdog's Judge: no lead unless set; prepare only records when it ran."""

    lead_s = 0.0

    def __init__(self, fn) -> None:
        self.fn = fn
        self.prepared: list[float] = []

    async def prepare(self, t: float) -> None:
        self.prepared.append(t)

    async def stalled(self, stall: ev.RoundStalled) -> None:
        await self.fn(stall)

    async def failed(self, failure: ev.RoundFailed) -> None:
        pass


async def drive(url, *, rounds=3, conversations=1, stall_after=0.5, judge=None, round_timeout=10.0, **options):
    events: list[ev.Event] = []
    config = DriverConfig(base_url=url, model="m", rounds=rounds, conversations=conversations,
                          stall_after=stall_after, connect_timeout=1.0, round_timeout=round_timeout, **options)
    driver = Driver(config, PromptSource(prompt_chars=40), events.append, judge=judge)
    with anyio.fail_after(20):
        outcomes = await driver.run()
    return outcomes, events


async def test_history_grows_with_real_replies_and_connection_is_reused():
    with hostile_server(healthy) as server:
        outcomes, events = await drive(server.url, rounds=3)
    assert [o.status for o in outcomes] == ["completed"] * 3
    bodies = [r["body"] for r in server.requests]
    assert [len(b["messages"]) for b in bodies] == [1, 3, 5]
    assert bodies[1]["messages"][1] == {"role": "assistant", "content": "hello world"}
    assert all(b["stream"] and b["stream_options"] == {"include_usage": True} for b in bodies)
    connected = [e for e in events if isinstance(e, ev.RoundConnected)]
    assert [c.reused for c in connected] == [False, True, True]
    assert len({c.local for c in connected}) == 1 and connected[0].local.startswith("127.0.0.1:")
    assert server.connections == 1
    done = [e for e in events if isinstance(e, ev.RoundDone)]
    assert [d.completion_tokens for d in done] == [2, 2, 2]
    assert all(d.ttft_s is not None and d.ttft_s <= d.duration_s for d in done)


async def test_a_silent_server_is_recorded_as_a_stall_before_first_byte_and_the_run_ends():
    with hostile_server(scripted(healthy, silent)) as server:
        outcomes, events = await drive(server.url, rounds=3, stall_after=0.3)
    assert [o.status for o in outcomes] == ["completed", "stalled", "stalled"]
    stalls = [e for e in events if isinstance(e, ev.RoundStalled)]
    assert stalls[0].phase == "before-first-byte" and stalls[0].reused is True
    assert stalls[0].stalled_for_s >= 0.3
    assert any(isinstance(e, ev.RoundAbandoned) for e in events)


@pytest.mark.parametrize("behaviour, phase", [(headers_then_nothing, "mid-stream"), (trickle, "mid-stream")])
async def test_headers_then_silence_or_a_trickle_of_bytes_is_a_mid_stream_stall(behaviour, phase):
    with hostile_server(behaviour) as server:
        outcomes, events = await drive(server.url, rounds=1, stall_after=0.5)
    assert outcomes[0].status == "stalled"
    stall = next(e for e in events if isinstance(e, ev.RoundStalled))
    assert stall.phase == phase
    if behaviour is trickle:
        assert stall.last_byte_t > stall.last_progress_t  # bytes kept coming, events did not


async def test_the_judge_runs_while_the_stalled_stream_is_still_open():
    seen = []

    async def judge(report):
        seen.append((report, len(server.requests)))
        await anyio.sleep(0.1)

    with hostile_server(silent) as server:
        outcomes, _ = await drive(server.url, rounds=1, stall_after=0.3, judge=FnJudge(judge))
    assert outcomes[0].status == "stalled"
    (report, requests_then), = seen
    assert report.in_flight == 1 and report.phase == "before-first-byte" and requests_then == 1


async def test_the_judge_prepares_its_lead_ahead_of_the_trigger_then_judges_once():
    stalls = []

    async def record(stall):
        stalls.append(stall)

    judge = FnJudge(record)
    judge.lead_s = 0.4
    with hostile_server(silent) as server:
        outcomes, _ = await drive(server.url, rounds=1, stall_after=0.8, judge=judge)
    assert outcomes[0].status == "stalled"
    (stall,) = stalls
    # Suspect at the trigger minus the lead (0.4 s of silence), flagged at the trigger (0.8 s).
    (prepared,) = judge.prepared
    assert 0.4 <= prepared - stall.started_t <= stall.t - stall.started_t, (prepared, stall)


@pytest.mark.parametrize(
    "behaviour, expected",
    [
        (respond("502 Bad Gateway", b"<html><body>bad gateway</body></html>", "text/html"), "HTTP 502: HTML page"),
        (respond("429 Too Many Requests", b'{"error": "slow down"}', "application/json", "retry-after: 7\r\n"),
         "HTTP 429 (Retry-After: 7)"),
        (respond("401 Unauthorized", b'{"error": "bad key"}', "application/json"), "HTTP 401"),
        (respond("200 OK", b'{"choices": []}', "application/json"), "not an SSE stream"),
        (close_mid_chunk, "RemoteProtocolError"),
        (malformed_json, "malformed JSON in SSE event #2"),
    ],
)
async def test_failures_are_recorded_with_a_clear_error(behaviour, expected):
    with hostile_server(behaviour) as server:
        outcomes, events = await drive(server.url, rounds=2)
    assert [o.status for o in outcomes] == ["failed", "failed"]
    failed = [e for e in events if isinstance(e, ev.RoundFailed)]
    assert expected in failed[0].error, failed[0].error


async def test_refused_port_fails_fast_with_connect_error():
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    outcomes, events = await drive(f"http://127.0.0.1:{port}/v1", rounds=2)
    assert [o.status for o in outcomes] == ["failed", "failed"]
    assert "ConnectError" in next(e for e in events if isinstance(e, ev.RoundFailed)).error


async def test_retire_policy_skips_the_rest_of_a_conversation():
    with hostile_server(scripted(healthy, silent)) as server:
        outcomes, _ = await drive(server.url, rounds=4, stall_after=0.3, on_failure="retire")
    assert [o.status for o in outcomes] == ["completed", "stalled", "skipped", "skipped"]


def established_local_ports() -> set[int]:
    """Local ports of this host's ESTABLISHED TCP sockets on 127.0.0.1 (Linux /proc/net/tcp)."""
    ports = set()
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            local, _, state = line.split()[1:4]
            if state == "01" and local.startswith("0100007F:"):
                ports.add(int(local.split(":")[1], 16))
    return ports


@pytest.mark.parametrize("behaviour", [silent, headers_then_nothing, trickle])
async def test_a_stalled_round_closes_its_connection_when_abandoned(behaviour):
    """Cancelling the round's scope around aiohttp's reads closes the socket: nothing leaks, and
    the next round opens a new connection instead of reusing a wedged one."""
    with hostile_server(behaviour) as server:
        outcomes, events = await drive(server.url, rounds=2, stall_after=0.3)
        ours = {int(e.local.rsplit(":", 1)[1]) for e in events if isinstance(e, ev.RoundConnected)}
        still_open = ours & established_local_ports()  # the server still holds its ends open
    assert [o.status for o in outcomes] == ["stalled", "stalled"]
    assert [e.reused for e in events if isinstance(e, ev.RoundConnected)] == [False, False]
    assert len(ours) == 2 and server.connections == 2
    assert not still_open, f"client sockets left open after the run: {still_open}"


async def test_connection_is_not_reused_after_keepalive_expiry():
    with hostile_server(healthy) as server:
        outcomes, events = await drive(server.url, rounds=2, think_time=0.4, keepalive_expiry=0.2)
    assert [o.status for o in outcomes] == ["completed", "completed"]
    assert [e.reused for e in events if isinstance(e, ev.RoundConnected)] == [False, False]
    assert server.connections == 2


async def test_requests_carry_the_bearer_key_and_no_compression_or_cookies():
    async def set_cookie_then_healthy(reader, writer, index):
        if index == 0:
            body = b'{"error": "first"}'
            writer.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                         b"set-cookie: session=abc\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            return True
        return await healthy(reader, writer, index)

    with hostile_server(set_cookie_then_healthy) as server:
        outcomes, events = await drive(server.url, rounds=2, api_key="sk-test-key")
    assert [o.status for o in outcomes] == ["failed", "completed"]
    heads = [r["head"].lower() for r in server.requests]
    assert all(b"authorization: bearer sk-test-key\r\n" in h for h in heads)
    assert all(b"accept-encoding: identity\r\n" in h for h in heads)
    assert not any(b"cookie:" in h for h in heads)
    assert not any("sk-test-key" in repr(e) for e in events)


async def test_a_connect_that_never_completes_fails_by_the_connect_timeout():
    """A listener whose accept queue is full drops new SYNs: the connect hangs until our deadline."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):  # fill the accept queue (never accepted); later ones may hang: fine
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        await anyio.sleep(0.1)
        outcomes, events = await drive(f"http://127.0.0.1:{port}/v1", rounds=1, stall_after=5.0)
    finally:
        for sock in fillers + [listener]:
            sock.close()
    assert [o.status for o in outcomes] == ["failed"]
    failed = next(e for e in events if isinstance(e, ev.RoundFailed))
    assert failed.error == "ConnectTimeout: no connection within 1 s", failed.error
    assert failed.phase == "before-first-byte" and 0.9 <= failed.duration_s < 3


async def test_rounds_that_would_start_together_are_spread_by_the_start_pacer():
    with hostile_server(healthy) as server:
        _, events = await drive(server.url, rounds=1, conversations=6, ramp_up=0.0, max_start_rate=10.0, start_burst=2)
    starts = sorted(e.t for e in events if isinstance(e, ev.RoundStarted))
    assert len(starts) == 6
    assert starts[1] - starts[0] < 0.05  # the burst
    # Then one start per 0.1 s: each no earlier than its slot (a late wake-up only delays it).
    assert all(starts[i] - starts[0] >= (i - 1) * 0.1 - 0.02 for i in range(2, 6)), starts
    # A round's clock starts when it is admitted: the wait is in no round's duration, but the log has it.
    done = [e for e in events if isinstance(e, ev.RoundDone)]
    assert max(d.duration_s for d in done) < 0.3
    paced = sorted(e.paced_s for e in events if isinstance(e, ev.RoundStarted))
    assert paced[:2] == [0.0, 0.0] and all(p >= 0.08 for p in paced[2:]) and paced[-1] >= 0.35


async def test_without_the_start_pacer_rounds_start_together():
    with hostile_server(healthy) as server:
        # A burst of 1 would pace every start after the first, were the pacer not off.
        _, events = await drive(server.url, rounds=1, conversations=6, ramp_up=0.0, max_start_rate=0.0, start_burst=1)
    starts = sorted(e.t for e in events if isinstance(e, ev.RoundStarted))
    assert len(starts) == 6 and starts[-1] - starts[0] < 0.08


async def test_an_event_larger_than_one_read_is_reassembled():
    big = "x" * 300_000  # several reads at the driver's 64 KiB read size

    async def one_big_token(reader, writer, index):
        return await healthy(reader, writer, index, tokens=(big, "!"))

    with hostile_server(one_big_token) as server:
        outcomes, events = await drive(server.url, rounds=1)
    assert [o.status for o in outcomes] == ["completed"]
    done = next(e for e in events if isinstance(e, ev.RoundDone))
    assert done.reply_chars == len(big) + 1


async def test_the_drivers_connections_read_at_most_64_kib():
    import aiohttp

    from repro.load.clients.aiohttp_transport import READ_SIZE, TrackingConnector

    with hostile_server(healthy) as server:
        connector = TrackingConnector(lambda *args: None, limit=1)
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.post(server.url + "/chat/completions", json={}) as response:
                await response.read()
                (transport,) = [known.transport for known in connector._known.values()]
                assert transport.max_size == READ_SIZE == 64 * 1024 < type(transport).max_size


async def test_each_read_is_one_sse_record_that_counts_every_event_it_delivered():
    async def all_in_one_write(reader, writer, index):
        # The whole answer in one write: the driver finds several events waiting in one read.
        body = b"".join(token(t) for t in ("a", "bc", "def"))
        body += sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}})
        writer.write(SSE_HEADERS + body + sse(b"[DONE]") + chunk(b""))
        await writer.drain()
        return True

    with hostile_server(all_in_one_write) as server:
        outcomes, events = await drive(server.url, rounds=2)
    assert [o.status for o in outcomes] == ["completed", "completed"]
    for round_index in (1, 2):
        records = [e for e in events if isinstance(e, ev.SSEReceived) and e.round == round_index]
        # 3 tokens + usage + [DONE] = 5 events, however the reads split them, with no gaps in seq.
        assert sum(r.events for r in records) == 5 == records[-1].seq
        assert [r.seq - r.events for r in records] == [0] + [r.seq for r in records[:-1]]
        assert sum(r.chars for r in records) == 6 and records[-1].done
        assert any(r.events > 1 for r in records) and not any(r.done for r in records[:-1])


async def test_a_stream_that_never_ends_fails_by_the_round_deadline_not_as_a_stall():
    import asyncio

    async def endless(reader, writer, index):
        writer.write(SSE_HEADERS)
        while True:  # progress every 50 ms, forever: never silent, never done
            writer.write(token("more "))
            await writer.drain()
            await asyncio.sleep(0.05)

    with hostile_server(endless) as server:
        outcomes, events = await drive(server.url, rounds=1, stall_after=0.5, round_timeout=0.6)
    assert outcomes[0].status == "failed"
    assert outcomes[0].error == "round deadline of 0.6 s (from its connection) passed"
    assert not any(isinstance(e, ev.RoundStalled) for e in events)


async def test_a_deadline_that_passes_while_a_resumed_stall_is_judged_is_the_deadline_not_a_stall():
    import asyncio

    async def pause_then_stream(reader, writer, index):
        writer.write(SSE_HEADERS + token("start "))
        await writer.drain()
        await asyncio.sleep(0.45)  # silent past the 0.3 s trigger: flagged, then judged
        while True:  # bytes resume while the judge still works
            writer.write(token("more "))
            await writer.drain()
            await asyncio.sleep(0.05)

    async def slow_judge(report):
        await anyio.sleep(2.0)

    with hostile_server(pause_then_stream) as server:
        outcomes, events = await drive(server.url, rounds=1, stall_after=0.3, round_timeout=1.0, judge=FnJudge(slow_judge))
    assert outcomes[0].status == "failed" and outcomes[0].error == "round deadline of 1 s (from its connection) passed"
    assert any(isinstance(e, ev.RoundStalled) for e in events)
    assert not any(isinstance(e, ev.RoundAbandoned) for e in events)
