"""A round's state machine (repro/load/round.py), the driver and the watchdog, with a scripted client
family and no sockets: each round plays a script through the same hooks and read step the real
clients use, and a scripted judge records what it was asked."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable

import anyio
import pytest

from repro.core import events as ev
from repro.core.openai_chunks import ChunkReader
from repro.load.clients.base import (
    ENDED_WITHOUT_DONE,
    ClientOptions,
    RoundHooks,
    headers_arrived,
    read_step,
)
from repro.load.driver import Driver, DriverConfig
from repro.load.prompts import PromptSource
from repro.load.round import WAITING_FOR_A_CONNECTION, RoundFailureSeen, RoundState, TrackedConnection
from repro.load.watchdog import Watchdog
from tests.support.scripted_judge import ScriptedJudge

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

Script = Callable[[RoundHooks, RoundState, ChunkReader], Awaitable["RoundFailureSeen | None"]]


# --- the scripted client family -------------------------------------------------------------------

def event(obj: dict | str) -> bytes:
    return b"data: " + (obj.encode() if isinstance(obj, str) else json.dumps(obj).encode()) + b"\n\n"


def token(text: str) -> bytes:
    return event({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})


DONE = event("[DONE]")


class ScriptedClient:
    def __init__(self, hooks: RoundHooks, script: Script) -> None:
        self.hooks = hooks
        self.script = script
        self.closed = False

    async def stream(self, body: dict, state: RoundState, reader: ChunkReader) -> RoundFailureSeen | None:
        return await self.script(self.hooks, state, reader)

    async def aclose(self) -> None:
        self.closed = True


class ScriptedFamily:
    def __init__(self, hooks: RoundHooks, script: Script) -> None:
        self.hooks = hooks
        self.script = script
        self.clients: list[ScriptedClient] = []

    def conversation(self, conv: int) -> ScriptedClient:
        client = ScriptedClient(self.hooks, self.script)
        self.clients.append(client)
        return client

    async def aclose(self) -> None:
        pass


def connect(hooks: RoundHooks, state: RoundState, *, reused: bool = False) -> None:
    hooks.connected(state, TrackedConnection("127.0.0.1:40000", None), reused)


async def play(hooks: RoundHooks, state: RoundState, reader: ChunkReader, *reads: bytes | float) -> RoundFailureSeen | None:
    """Headers, then each read (bytes) or pause (seconds), through the clients' own read step."""
    headers_arrived(state, 200, hooks.now(), hooks.emit)
    step = read_step(state, reader, hooks)
    for read in reads:
        if isinstance(read, float):
            await anyio.sleep(read)
        elif (failure := step(read)) is not None:
            return RoundFailureSeen("mid-stream", failure, 200, "stream")
    return None if reader.done else ENDED_WITHOUT_DONE


async def completes(hooks, state, reader):
    connect(hooks, state)
    return await play(hooks, state, reader, 0.02, token("hello "), 0.02, token("world"), DONE)


async def drive(script: Script, *, judge=None, rounds: int = 1, conversations: int = 1, **options):
    events: list[ev.Event] = []
    settings = {"stall_after": 0.2, "judge_budget": 1.0, "round_timeout": 10.0, "max_start_rate": 0.0, **options}
    config = DriverConfig(base_url="http://engine.invalid:8000", model="m", rounds=rounds,
                          conversations=conversations, **settings)
    families: list[ScriptedFamily] = []

    def family(hooks: RoundHooks) -> ScriptedFamily:
        families.append(ScriptedFamily(hooks, script))
        return families[-1]

    origin = time.monotonic()
    if judge is not None:
        judge.now = lambda: time.monotonic() - origin
    driver = Driver(config, PromptSource(prompt_chars=40), events.append, origin=origin, judge=judge, family=family)
    with anyio.fail_after(20):
        outcomes = await driver.run()
    (made,) = families
    assert made.hooks.url == "http://engine.invalid:8000/v1/chat/completions"
    assert all(client.closed for client in made.clients)
    return outcomes, events


def of(events: list[ev.Event], kind: type) -> list:
    return [e for e in events if isinstance(e, kind)]


# --- the driver and the watchdog ------------------------------------------------------------------

async def test_a_completed_round_records_its_events_ttft_and_done():
    outcomes, events = await drive(completes)
    kinds = [type(e) for e in events if not isinstance(e, ev.LoopLag)]
    assert kinds == [ev.RoundStarted, ev.RoundConnected, ev.FirstByte, ev.SSEReceived, ev.SSEReceived,
                     ev.SSEReceived, ev.RoundDone]
    (outcome,) = outcomes
    assert outcome.status == "completed" and outcome.events == 3
    (started,), (done,) = of(events, ev.RoundStarted), of(events, ev.RoundDone)
    reads = of(events, ev.SSEReceived)
    assert [(r.seq, r.events, r.chars, r.done) for r in reads] == [(1, 1, 6, False), (2, 1, 5, False), (3, 1, 0, True)]
    assert done.ttft_s == round(reads[0].t - started.t, 6) and outcome.ttft_s == pytest.approx(done.ttft_s, abs=1e-6)
    assert done.ttfb_s <= done.ttft_s <= done.duration_s and done.reply_chars == len("hello world")
    assert done.max_gap_s >= 0.02 and done.finish_reason is None


async def test_a_stall_is_flagged_judged_while_open_then_abandoned_after_the_judge_returns():
    async def stalls(hooks, state, reader):
        connect(hooks, state)
        return await play(hooks, state, reader, token("hello "), 30.0)

    judge = ScriptedJudge(stalled_s=0.3)
    outcomes, events = await drive(stalls, judge=judge)
    assert outcomes[0].status == "stalled" and outcomes[0].error == "stalled mid-stream"
    (stall,) = of(events, ev.RoundStalled)
    assert stall.phase == "mid-stream" and stall.stalled_for_s >= 0.2 and stall.events == 1
    assert judge.of("stalled") == [stall]
    (abandoned,) = of(events, ev.RoundAbandoned)
    returned = next(t for call, t, _ in judge.calls if call == "stalled-returned")
    # The round was abandoned once the verdict was in, not before: the stream stayed open meanwhile.
    assert abandoned.t >= returned >= stall.t + 0.3
    assert not of(events, ev.RoundFailed) and judge.of("failed") == []


async def test_a_stall_whose_bytes_resume_while_it_is_judged_goes_on():
    async def resumes(hooks, state, reader):
        connect(hooks, state)
        # Silent past the 0.2 s trigger; tokens come again while the judge (0.4 s) still works, and
        # go on after its verdict.
        return await play(hooks, state, reader, token("hello "), 0.35, *[x for _ in range(10) for x in (0.05, token("x"))],
                          DONE)

    judge = ScriptedJudge(stalled_s=0.4)
    outcomes, events = await drive(resumes, judge=judge)
    assert outcomes[0].status == "completed"
    assert len(of(events, ev.RoundStalled)) == 1 and len(judge.of("stalled")) == 1
    assert not of(events, ev.RoundAbandoned)
    assert any(isinstance(e, ev.Note) and "resumed after a stall" in e.message for e in events)


async def test_the_round_deadline_counts_from_the_connection():
    async def never_ends(hooks, state, reader):
        await anyio.sleep(0.3)  # the client's own queue: the deadline does not count it
        connect(hooks, state)
        return await play(hooks, state, reader, *[x for _ in range(100) for x in (0.05, token("x"))])

    outcomes, events = await drive(never_ends, round_timeout=0.4)
    (failed,) = of(events, ev.RoundFailed)
    assert failed.failure == "deadline" and failed.error == "round deadline of 0.4 s (from its connection) passed"
    assert failed.duration_s >= 0.7 and failed.phase == "mid-stream"
    assert outcomes[0].status == "failed" and not of(events, ev.RoundStalled)


async def test_a_wait_for_a_pool_slot_does_not_start_the_stall_clock():
    async def queued(hooks, state, reader):
        await anyio.sleep(0.5)  # well past the 0.2 s trigger, in the client's own queue
        connect(hooks, state)
        return await play(hooks, state, reader, token("hello"), DONE)

    judge = ScriptedJudge()
    outcomes, events = await drive(queued, judge=judge)
    assert outcomes[0].status == "completed"
    assert not of(events, ev.RoundStalled) and judge.calls == []
    (connected,) = of(events, ev.RoundConnected)
    assert connected.pool_wait_s >= 0.5


async def test_a_wait_that_outlasts_the_round_deadline_never_left_the_client():
    async def never_connects(hooks, state, reader):
        await anyio.sleep(30)

    outcomes, events = await drive(never_connects, round_timeout=0.3)
    (failed,) = of(events, ev.RoundFailed)
    assert failed.failure == "client-wait" and failed.phase == "before-first-byte"
    assert failed.error == (f"round deadline of 0.3 s passed while {WAITING_FOR_A_CONNECTION}: "
                            "the request never left the client")
    assert not of(events, ev.RoundStalled)


async def test_a_failed_round_reaches_the_judge_once_and_run_waits_for_the_judgement():
    async def refused(hooks, state, reader):
        connect(hooks, state)
        headers_arrived(state, 503, hooks.now(), hooks.emit)
        state.answered_by("haproxy", None)
        return RoundFailureSeen("before-first-byte", "HTTP 503: no server available", 503, "http")

    judge = ScriptedJudge(failed_s=0.3)
    outcomes, events = await drive(refused, judge=judge)
    (failed,) = of(events, ev.RoundFailed)
    assert (failed.status, failed.failure, failed.server, failed.local) == (503, "http", "haproxy", "127.0.0.1:40000")
    assert judge.of("failed") == [failed] and judge.of("failed-returned") == [failed]
    assert judge.of("stalled") == [] and outcomes[0].status == "failed"


async def test_a_failure_judgement_is_bounded_by_the_judge_budget():
    async def refused(hooks, state, reader):
        connect(hooks, state)
        return RoundFailureSeen("before-first-byte", "ConnectError: connection refused", None, "connect")

    judge = ScriptedJudge(failed_s=30.0)
    before = time.monotonic()
    outcomes, _ = await drive(refused, judge=judge, judge_budget=0.3)
    assert time.monotonic() - before < 2.0
    assert len(judge.of("failed")) == 1 and judge.of("failed-returned") == []


async def test_a_malformed_event_fails_the_round_mid_stream():
    async def malformed(hooks, state, reader):
        connect(hooks, state)
        return await play(hooks, state, reader, token("hello"), b"data: {not json\n\n", DONE)

    outcomes, events = await drive(malformed)
    (failed,) = of(events, ev.RoundFailed)
    assert failed.failure == "stream" and failed.phase == "mid-stream" and failed.status == 200
    assert len(of(events, ev.SSEReceived)) == 2  # the malformed read is recorded: it arrived


# --- the watchdog's read backstop (the driver's is stall_after + judge_budget + 5 s) ----------------

async def watch(states: list[RoundState], *, stall_after: float, read_backstop: float, judge=None,
                for_s: float = 0.6) -> list[ev.Event]:
    events: list[ev.Event] = []
    in_flight = {(s.conv, s.round): s for s in states}
    origin = time.monotonic()
    watchdog = Watchdog(in_flight, now=lambda: time.monotonic() - origin, emit=events.append, judge=judge,
                        stall_after=stall_after, judge_budget=1.0, read_backstop=read_backstop)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(watchdog.watch_stalls)
        for state in states:
            tasks.start_soon(hold, state)
        await anyio.sleep(for_s)
        tasks.cancel_scope.cancel()
    return events


async def hold(state: RoundState) -> None:
    with anyio.CancelScope() as scope:
        state.bounded_by(scope)
        await anyio.sleep(30)


async def test_the_read_backstop_ends_a_round_that_receives_nothing():
    state = RoundState(0, 1, 0.0)
    state.connected(TrackedConnection("127.0.0.1:1", None), False, 0.0)
    state.headers(0.0)
    events = await watch([state], stall_after=10.0, read_backstop=0.3)
    assert state.read_timed_out and state.scope.cancelled_caught
    assert not state.ended_by_stall and not of(events, ev.RoundStalled)  # a failure, not a stall


async def test_the_read_backstop_during_a_stalls_judgement_is_the_stall():
    state = RoundState(0, 1, 0.0)
    state.connected(TrackedConnection("127.0.0.1:1", None), False, 0.0)
    events = await watch([state], stall_after=0.1, read_backstop=0.3, judge=ScriptedJudge(stalled_s=30.0))
    assert state.read_timed_out and state.stalled_at is not None and state.ended_by_stall
    assert len(of(events, ev.RoundStalled)) == 1


async def test_the_watchdog_leaves_a_round_the_client_holds_alone():
    state = RoundState(0, 1, 0.0)  # waiting for a connection
    events = await watch([state], stall_after=0.1, read_backstop=0.2)
    assert not state.read_timed_out and state.stalled_at is None and not events


# --- each transition ------------------------------------------------------------------------------

def test_a_new_round_waits_for_its_connection_before_its_first_byte():
    state = RoundState(3, 2, 1.5)
    assert (state.conv, state.round, state.started, state.last_progress) == (3, 2, 1.5, 1.5)
    assert state.phase == "before-first-byte" and state.client_wait == WAITING_FOR_A_CONNECTION
    assert state.events == 0 and state.max_gap == 0.0 and state.connection is None


async def test_bounded_by_and_connected_move_the_deadline_by_the_clients_wait():
    state = RoundState(0, 1, 1.0)
    with anyio.CancelScope(deadline=100.0) as scope:
        state.bounded_by(scope)
    connection = TrackedConnection("127.0.0.1:5", "transport")
    state.connected(connection, False, 1.25)
    assert state.scope is scope and scope.deadline == pytest.approx(100.25)
    assert (state.connection, state.local, state.transport, state.reused) == (connection, "127.0.0.1:5", "transport", False)
    assert state.client_wait is None and state.last_progress == 1.25 and state.idle_s is None


def test_connected_on_a_reused_connection_knows_its_idle_time_and_after_the_first_byte_keeps_the_clocks():
    connection = TrackedConnection("127.0.0.1:5", None)
    connection.released_at = time.monotonic() - 2.0
    state = RoundState(0, 1, 1.0)
    state.headers(1.5)  # an SDK retry that reconnects after an answer: the clocks stay
    state.connected(connection, True, 2.0)
    assert state.reused is True and state.idle_s == pytest.approx(2.0, abs=0.5)
    assert state.last_progress == 1.5


def test_released_marks_its_connection_idle_from_now():
    state = RoundState(0, 1, 0.0)
    state.released()  # no connection: nothing to mark
    connection = TrackedConnection(None, None)
    state.connected(connection, False, 0.1)
    state.released()
    assert connection.released_at == pytest.approx(time.monotonic(), abs=0.1)
    assert connection.idle_s() == pytest.approx(0.0, abs=0.1)


def test_client_waiting_holds_the_round_for_the_client():
    state = RoundState(0, 1, 0.0)
    state.connected(TrackedConnection(None, None), False, 0.1)
    state.client_waiting("the openai SDK's back-off after HTTP 503 (attempt 1)")
    assert state.client_wait == "the openai SDK's back-off after HTTP 503 (attempt 1)"


def test_headers_are_the_first_byte_and_end_any_wait():
    state = RoundState(0, 1, 0.0)
    state.headers(0.4)
    assert (state.first_byte, state.last_byte, state.last_progress) == (0.4, 0.4, 0.4)
    assert state.phase == "mid-stream" and state.client_wait is None


def test_answered_by_names_the_hop():
    state = RoundState(0, 1, 0.0)
    state.answered_by("nginx", "1.1 gateway")
    assert (state.server, state.via) == ("nginx", "1.1 gateway")


def test_trickle_counts_reads_without_progress_since_the_last_progress():
    state = RoundState(0, 1, 0.0)
    state.headers(1.0)
    assert state.trickle_every() is None
    state.trickle(2.0)
    state.trickle(3.0)
    assert state.last_byte == 3.0 and state.trickle_reads == 2 and state.trickle_every() == 1.0
    assert state.last_progress == 1.0  # bytes are no progress
    state.received(4.0, 1, 1, False)
    assert state.trickle_every() is None  # progress resets the count
    state.trickle(6.0)
    assert state.trickle_reads == 1 and state.trickle_every() == 2.0


def test_received_stamps_bytes_progress_gap_events_first_token_and_the_last_event():
    state = RoundState(0, 1, 0.0)
    state.headers(1.0)
    state.received(1.5, 2, 0, False)  # a role-only event: no text, no first token
    assert (state.last_byte, state.last_progress, state.events, state.max_gap) == (1.5, 1.5, 2, 0.5)
    assert state.first_token is None
    state.received(3.5, 3, 4, False)
    assert state.first_token == 3.5 and state.max_gap == 2.0
    state.received(3.6, 4, 0, True)
    assert state.phase == "after-last-event" and state.first_token == 3.5 and state.max_gap == 2.0


def test_progressed_is_progress_without_a_byte_stamp():
    state = RoundState(0, 1, 0.0)
    state.headers(1.0)
    state.trickle(1.2)
    state.progressed(1.4, 1, 3, False)
    assert (state.last_byte, state.last_progress, state.events, state.first_token) == (1.2, 1.4, 1, 1.4)
    state.progressed(1.2, 2, 0, True)
    assert state.phase == "after-last-event" and state.max_gap == pytest.approx(0.4)


def test_suspected_stalled_and_resumed():
    state = RoundState(0, 1, 0.0)
    state.suspected(4.0)
    state.stalled(10.0)
    assert (state.suspected_at, state.stalled_at) == (4.0, 10.0)
    state.resumed()
    assert state.stalled_at is None and not state.ended_by_stall


async def test_abandon_and_time_out_read_cancel_the_rounds_scope():
    abandoned, timed_out = RoundState(0, 1, 0.0), RoundState(0, 2, 0.0)
    abandoned.abandon()  # not yet bounded: nothing to cancel, nothing marked
    assert not abandoned.abandoned
    for state, end in ((abandoned, abandoned.abandon), (timed_out, timed_out.time_out_read)):
        with anyio.CancelScope() as scope:
            state.bounded_by(scope)
            end()
            await anyio.sleep(1)
        assert scope.cancelled_caught
    assert abandoned.abandoned and abandoned.ended_by_stall
    assert timed_out.read_timed_out and not timed_out.ended_by_stall  # no stall was being judged
    timed_out.stalled(1.0)
    assert timed_out.ended_by_stall


# --- the pieces the clients share -------------------------------------------------------------------

def test_round_hooks_tell_the_runs_clock():
    hooks = RoundHooks(url="http://x/v1/chat/completions",
                       options=ClientOptions(client="aiohttp", api_key=None, connect_timeout=1.0, keepalive_expiry=1.0,
                                             connections="per-conversation", client_timeouts="repro", conversations=1),
                       origin=time.monotonic() - 5.0, emit=lambda e: None, connected=lambda *a: None, read_backstop=9.0)
    assert hooks.now() == pytest.approx(5.0, abs=0.1)


def test_every_client_says_an_error_answer_alike():
    from repro.core.text import http_error_text

    assert http_error_text(429, b'{"error": "slow down"}\n', "5", None) == 'HTTP 429 (Retry-After: 5): {"error": "slow down"}'
    assert http_error_text(401, b"bad key sk-123", None, "sk-123") == "HTTP 401: bad key [redacted]"
    assert http_error_text(502, b"<html><body>Bad Gateway</body></html>", None, None).startswith("HTTP 502: HTML page (")
    assert http_error_text(503, b"", None, None) == "HTTP 503"
    assert len(http_error_text(500, b"x" * 10_000, None, None)) == len("HTTP 500: ") + 300
