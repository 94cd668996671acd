"""The harness's side judged from outside (triage --pid), on hand-built evidence: a hop is named
only on positive evidence, a harness with no request outstanding is `harness-idle`, and the
verdict's phase and stalled_for_s are only what was observed.

Each test of the first group is one way the code before `harness-idle` named a hop without
evidence (a wrong `where`, the worst kind of bug); the second group keeps every positive case
naming its hop."""

from __future__ import annotations

import dataclasses

import pytest

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.classify import classify
from repro.core.evidence import Evidence, HopEvidence
from repro.core.harness import HARNESS, thread_facts, use_of
from repro.core.snapshot import Snapshot
from repro.core.socket_state import SocketState
from repro.core.thread_state import ProcessThreads, ThreadState
from repro.core.verdict import Verdict

PID = 4242
T_END = 5.2  # triage's last look, on its clock
PROXY_PORT, ENGINE_PORT = 8080, 30000


def ok_canary(hop: str) -> ev.CanaryResult:
    return ev.CanaryResult(t=2.6, hop=hop, outcome=CanaryOutcome(hop=hop, url="http://127.0.0.1:1", ok=True, status=200,
                                                                 total_s=0.03, health_status=200, events=1, done=True))


def sample(hop: str, t: float, **counts) -> ev.ProbeSample:
    return ev.ProbeSample(t=t, hop=hop, snapshot=Snapshot(hop=hop, ok=True, **counts))


def failed_sample(hop: str, t: float) -> ev.ProbeSample:
    return ev.ProbeSample(t=t, hop=hop, snapshot=Snapshot(hop=hop, ok=False, error="timeout: no complete metrics page"))


def stack(*, proxy_samples=None, engine_samples=None, proxy_canary=True) -> tuple[HopEvidence, ...]:
    """nginx in front of one engine, both serving fresh requests and idle unless told otherwise."""
    proxy = HopEvidence("nginx", "proxy", tuple(proxy_samples if proxy_samples is not None else
                                                 [sample("nginx", 1.0, in_flight=0), sample("nginx", 5.1, in_flight=0)]),
                        ok_canary("nginx") if proxy_canary else None)
    engine = HopEvidence("engine-0", "engine", tuple(engine_samples if engine_samples is not None else
                                                     [sample("engine-0", 1.0, running=0, queued=0, itl_count=100.0),
                                                      sample("engine-0", 5.1, running=0, queued=0, itl_count=100.0)]),
                         ok_canary("engine-0"))
    return proxy, engine


def conn(*, hop: str | None = "nginx", port: int = PROXY_PORT, inode: int = 77, **figures) -> SocketState:
    """A harness connection, by default an idle keep-alive one: its last request answered 16.9 s
    ago (bytes came after the request), nothing queued either way."""
    fields = dict(local="127.0.0.1:40000", remote=f"127.0.0.1:{port}", state="ESTABLISHED", rqueue=0, wqueue=0,
                  unacked=0, retransmits=0, last_data_recv_s=16.9, last_data_sent_s=17.0, last_ack_recv_s=16.9,
                  bytes_received=2400, bytes_acked=1301, pid=PID, inode=inode, hop=hop)
    fields.update(figures)
    return SocketState(**fields)


def thread(tid: int = PID, **fields) -> ThreadState:
    base = dict(name="MainThread", state="S", wchan="futex_do_wait", syscall="futex",
                stack=["compact_history (openai_chat.py:53)", "save_history (openai_chat.py:49)"])
    base.update(fields)
    return ThreadState(tid=tid, **base)


def threads(*items: ThreadState) -> ProcessThreads:
    return ProcessThreads(pid=PID, t=T_END, threads=list(items), stacks_by="py-spy 0.4.3")


def triage_evidence(*sockets: SocketState, read: ProcessThreads | None = None, hops=None,
                    pid_given: bool = True) -> Evidence:
    """Evidence as `repro triage --pid` builds it: a stand-in stall at the window's start, no round watched."""
    stall = ev.RoundStalled(t=0.0, conv=0, round=0, phase="before-first-byte", stalled_for_s=T_END, started_t=0.0,
                            last_progress_t=0.0)
    return Evidence(stall=stall, hops=hops if hops is not None else stack(), stall_after=5.0, driver_in_flight=0,
                    sockets=tuple(ev.SocketSample(t=T_END, socket=s) for s in sockets),
                    threads=(read,) if read is not None else ((threads(thread()),) if pid_given else ()),
                    round_watched=False)


def assert_harness_idle(verdict: Verdict, confidence: str) -> None:
    assert (verdict.side, verdict.where, verdict.kind) == ("client", HARNESS, "harness-idle"), verdict.summary
    assert verdict.confidence == confidence, verdict.summary
    assert verdict.phase is None  # no request outstanding: no phase of one
    assert "it is not waiting on the network" in verdict.summary


# --- every way a hop was named without evidence ---------------------------------------------------

def test_an_idle_pooled_connection_names_no_hop_the_harness_is_idle():
    """The issue's case: one idle keep-alive connection to nginx, both canaries answer, nginx holds
    nothing, the harness's thread waits on a lock. Was: CLIENT-SIDE at nginx: connection-wedged."""
    verdict = classify(triage_evidence(conn()))
    assert_harness_idle(verdict, "high")
    assert "nginx 127.0.0.1:40000: its last request answered" in verdict.summary and "no thread reads it" in verdict.summary
    assert verdict.stalled_for_s == 16.9  # the harness's own socket: nothing in or out for 16.9 s
    threads_seen = [e for e in verdict.evidence if e["hop"] == HARNESS]
    assert threads_seen and "in futex (futex_do_wait); Python: compact_history (openai_chat.py:53)" in threads_seen[0]["value"]


def test_an_idle_connection_whose_threads_were_not_read_names_no_hop_and_says_so():
    read = ProcessThreads(pid=PID, t=T_END, error="pid 4242: cannot list /proc/4242/task (Permission denied)")
    verdict = classify(triage_evidence(conn(), read=read))
    assert_harness_idle(verdict, "low")
    assert "its threads were not read, so a stalled answer is not ruled out" in verdict.summary


def test_a_connection_an_event_loop_watches_names_neither_the_hop_nor_the_harness():
    """An answer began and stopped, and the harness's event loop watches the connection: awaited
    (httpx on anyio registers a socket only while it awaits it) or idle in a pool (aiohttp and plain
    asyncio streams keep idle ones registered). The kernel cannot tell: no hop, no harness-idle."""
    loop = thread(wchan="do_epoll_wait", syscall="epoll_wait", fds=[5, 9], sockets=[77], via_epoll=True,
                  stack=["EpollSelector.select (selectors.py:468)"])
    verdict = classify(triage_evidence(conn(), read=threads(loop)))
    assert (verdict.side, verdict.where, verdict.kind, verdict.confidence) == \
        ("client", "connection", "connection-wedged", "low"), verdict.summary
    assert "the event loop of thread 4242 watches it for reading" in verdict.summary
    assert "no hop is named on that alone" in verdict.summary
    assert any(e["signal"] == "watched by its event loop" and e["hop"] == HARNESS for e in verdict.evidence)


def test_a_connection_opened_and_never_used_names_no_hop():
    """Nothing ever received and nothing sent (bytes_acked 1 is the SYN): was taken as a request waiting."""
    fresh = conn(bytes_received=0, bytes_acked=1, last_data_recv_s=12.0, last_data_sent_s=12.0)
    assert use_of(fresh, None) == "unused"
    assert_harness_idle(classify(triage_evidence(fresh)), "high")


def test_no_connection_open_is_harness_idle_not_nothing_found():
    verdict = classify(triage_evidence())
    assert_harness_idle(verdict, "high")
    assert f"pid {PID} has no connection open to any hop" in verdict.summary
    assert verdict.stalled_for_s is None  # nothing observed to count from


def test_a_connection_the_hop_closed_names_no_hop():
    verdict = classify(triage_evidence(conn(state="CLOSE_WAIT")))
    assert_harness_idle(verdict, "high")


def test_engines_busy_with_someone_elses_requests_name_no_hop_in_triage():
    """The engine runs another client's stream and moves tokens; triage has no round outstanding of
    its own. Was: response-withheld at nginx ('covering the driver's 1 outstanding round')."""
    busy = [sample("engine-0", 1.0, running=1, queued=0, itl_count=100.0),
            sample("engine-0", 5.1, running=1, queued=0, itl_count=180.0)]
    hops = stack(engine_samples=busy, proxy_samples=[sample("nginx", 1.0, in_flight=1), sample("nginx", 5.1, in_flight=1)])
    with_pid = classify(triage_evidence(conn(), hops=hops))
    assert_harness_idle(with_pid, "high")
    without_pid = classify(triage_evidence(hops=hops, pid_given=False))
    assert without_pid.kind != "response-withheld" and without_pid.where != "nginx", without_pid.summary


def test_a_thread_blocked_on_a_connection_outside_the_stack_is_not_idle_and_names_no_hop():
    database = conn(hop=None, port=5432, inode=99, last_data_sent_s=7.0, last_data_recv_s=9.0)
    blocked = thread(wchan="poll_schedule_timeout", syscall="poll", fds=[7], sockets=[99], stack=["query (db.py:12)"])
    verdict = classify(triage_evidence(conn(), database, read=threads(blocked)))
    assert verdict.kind != "harness-idle" and verdict.where not in ("nginx", "engine-0"), verdict.summary
    # Said where it waits instead: outside the stack given (what triage prints when nothing is stuck in it).
    assert ("harness: pid 4242 waits on 127.0.0.1:5432, no hop of the stack (request sent and acknowledged, "
            "nothing received since), no byte received for 9.0 s") in verdict.ruled_out, verdict.ruled_out


# --- positive evidence still names the hop ----------------------------------------------------------

def test_a_request_sent_acknowledged_and_unanswered_names_its_hop():
    waiting = conn(last_data_sent_s=6.5, last_data_recv_s=16.9)  # round 3's request went out after round 2's answer
    verdict = classify(triage_evidence(waiting))
    assert (verdict.side, verdict.where, verdict.kind, verdict.confidence) == ("client", "nginx", "connection-wedged", "high")
    assert verdict.phase == "before-first-byte"  # observed: nothing came after the request
    assert verdict.stalled_for_s == 6.5  # since the request went out


def test_an_answer_that_stopped_while_a_thread_reads_the_socket_names_its_hop():
    """The sync SDK stuck after the response headers: the socket alone looks idle; the thread
    blocked in poll on it says the harness waits on it."""
    reader = thread(wchan="poll_schedule_timeout", syscall="poll", fds=[5], sockets=[77],
                    stack=["_receive_event (httpcore/_sync/http11.py:217)"])
    stuck = conn(last_data_recv_s=6.0, last_data_sent_s=6.01)
    verdict = classify(triage_evidence(stuck, read=threads(reader)))
    assert (verdict.side, verdict.where, verdict.kind) == ("client", "nginx", "connection-wedged"), verdict.summary
    assert "are read by a blocked thread after an answer began and stopped" in verdict.summary
    assert verdict.phase is None  # the answer began: mid-stream or after its last event, the kernel cannot tell
    assert verdict.stalled_for_s == 6.0


def test_our_bytes_unacknowledged_name_the_hop():
    unacked = conn(wqueue=4096, unacked=3, last_ack_recv_s=8.0, last_data_sent_s=8.0)
    verdict = classify(triage_evidence(unacked))
    assert (verdict.where, verdict.kind) == ("nginx", "connection-wedged"), verdict.summary
    assert "hold our bytes unacknowledged" in verdict.summary


def test_bytes_unread_in_the_harness_are_the_harness_not_reading():
    verdict = classify(triage_evidence(conn(rqueue=512)))
    assert (verdict.side, verdict.where, verdict.kind) == ("client", "client", "client-overloaded")


def test_a_hop_holding_requests_is_named_unless_the_harness_surely_has_none_outstanding():
    hops = stack(proxy_samples=[sample("nginx", 5.1, in_flight=0, held=3)])
    unsure = classify(triage_evidence(conn(), hops=hops, read=ProcessThreads(pid=PID, t=T_END, error="not readable")))
    assert (unsure.where, unsure.kind) == ("nginx", "connection-wedged"), unsure.summary
    assert "nginx holds it" in unsure.summary
    # Every thread read, none on the connection: nginx's three requests are someone else's.
    sure = classify(triage_evidence(conn(), hops=hops))
    assert_harness_idle(sure, "high")
    assert "nginx holds 3 request(s), none of them this harness's" in sure.summary


def test_a_hop_whose_fresh_canary_fails_is_named_not_the_idle_harness():
    failing = ev.CanaryResult(t=2.6, hop="nginx", outcome=CanaryOutcome(
        hop="nginx", url="http://127.0.0.1:1", ok=False, failure="http", status=502, total_s=0.01, error="HTTP 502"))
    proxy, engine = stack()
    hops = (HopEvidence("nginx", "proxy", proxy.samples, failing), engine)
    verdict = classify(triage_evidence(conn(), hops=hops))
    assert verdict.where == "nginx" and verdict.kind != "harness-idle"


# --- only what was observed ------------------------------------------------------------------------

def test_triage_without_the_harness_leaves_phase_and_stall_unknown():
    hops = stack(proxy_samples=[sample("nginx", 5.1, in_flight=0, held=2)])
    verdict = classify(triage_evidence(hops=hops, pid_given=False))
    assert (verdict.where, verdict.kind) == ("nginx", "connection-wedged")
    assert verdict.phase is None and verdict.stalled_for_s is None  # not the window's length


def test_a_run_keeps_its_own_rounds_phase_and_stall():
    stall = ev.RoundStalled(t=20.0, conv=1, round=3, phase="mid-stream", stalled_for_s=5.0, started_t=10.0,
                            last_progress_t=15.0, reused=True, in_flight=1)
    verdict = classify(Evidence(stall=stall, hops=stack(), stall_after=5.0))
    assert verdict.phase == "mid-stream" and verdict.stalled_for_s == 5.0


@pytest.mark.parametrize("answered_before", [True, False])
def test_stopped_answering_only_of_a_page_seen_answering(answered_before):
    """A frozen proxy: canary timed out, every read of its page since the stall failed. Said to
    have 'stopped answering' only when a read answered before; else 'never seen answering'."""
    timed_out = ev.CanaryResult(t=2.6, hop="nginx", outcome=CanaryOutcome(
        hop="nginx", url="http://127.0.0.1:1", ok=False, failure="timeout", total_s=3.0, error="no answer in 3 s"))
    before = [sample("nginx", -1.0, in_flight=0)] if answered_before else []
    proxy = HopEvidence("nginx", "proxy", (*before, failed_sample("nginx", 1.0), failed_sample("nginx", 5.1)), timed_out)
    verdict = classify(triage_evidence(hops=(proxy, stack()[1]), pid_given=False))
    assert (verdict.where, verdict.kind) == ("nginx", "hop-unresponsive")
    assert ("stopped answering" in verdict.summary) is answered_before, verdict.summary
    if not answered_before:
        assert "answered no read (never seen answering)" in verdict.summary and verdict.confidence == "medium"


# --- a harness in use during the window is not stuck -------------------------------------------------

def test_a_request_sent_a_moment_ago_names_no_hop():
    """A busy harness read the instant after it sent a request: not a wedge."""
    just_sent = conn(last_data_sent_s=0.3, last_data_recv_s=16.9)
    assert use_of(just_sent, None) == "waiting"
    verdict = classify(triage_evidence(just_sent))
    assert verdict.where not in ("nginx", "engine-0", HARNESS), verdict.summary
    assert any(line.startswith("harness: in use during the window (pid 4242 127.0.0.1:40000 to nginx carried a byte 0.3 s")
               for line in verdict.ruled_out), verdict.ruled_out


def test_a_connection_answered_a_moment_ago_is_not_an_idle_harness():
    verdict = classify(triage_evidence(conn(last_data_recv_s=0.2, last_data_sent_s=0.3)))
    assert verdict.kind != "harness-idle" and verdict.where not in ("nginx", "engine-0"), verdict.summary


def test_a_connection_closed_during_the_window_is_judged_by_the_last_read_not_its_stale_figures():
    """Seen waiting at the wave, gone at the last look (the harness finished the round and closed it)."""
    stale = ev.SocketSample(t=2.5, socket=conn(last_data_sent_s=6.5, last_data_recv_s=16.9))
    verdict = classify(dataclasses.replace(triage_evidence(), sockets=(stale,)))
    assert verdict.where != "nginx" and verdict.kind != "harness-idle", verdict.summary
    assert any("closed during the window" in line for line in verdict.ruled_out), verdict.ruled_out


def test_bytes_unread_for_an_instant_are_a_reading_harness_not_an_overloaded_one():
    verdict = classify(triage_evidence(conn(rqueue=1200, last_data_recv_s=0.01, last_data_sent_s=0.5)))
    assert verdict.kind != "client-overloaded", verdict.summary
    # Unread at the earlier read too: it is not reading.
    earlier = ev.SocketSample(t=2.5, socket=conn(rqueue=800, last_data_recv_s=0.01, last_data_sent_s=0.5))
    evidence = triage_evidence(conn(rqueue=1200, last_data_recv_s=0.01, last_data_sent_s=0.5))
    assert classify(dataclasses.replace(evidence, sockets=(earlier, *evidence.sockets))).kind == "client-overloaded"


def test_one_stuck_request_is_named_while_other_connections_move():
    stuck = conn(last_data_sent_s=9.0, last_data_recv_s=16.9)
    busy = conn(inode=78, local="127.0.0.1:40001", last_data_sent_s=0.1, last_data_recv_s=0.05)
    verdict = classify(triage_evidence(stuck, busy))
    assert (verdict.where, verdict.kind) == ("nginx", "connection-wedged"), verdict.summary
    assert verdict.stalled_for_s == 9.0


@pytest.mark.parametrize("woken", [0, 70])
def test_threads_woken_between_the_looks_are_a_harness_in_use_not_an_idle_one(woken):
    """Both looks found no connection (a harness between rounds at both instants, or one blocked
    for good): its threads' context switches between the looks tell them apart."""
    first = ProcessThreads(pid=PID, t=2.5, threads=[thread(switches=85)])
    last = ProcessThreads(pid=PID, t=T_END, threads=[thread(switches=85 + woken)])
    verdict = classify(dataclasses.replace(triage_evidence(), threads=(first, last)))
    if woken:
        assert verdict.kind != "harness-idle" and verdict.where not in ("nginx", "engine-0"), verdict.summary
        assert "harness: in use during the window (pid 4242's threads woke 70 time(s) between triage's looks (2.7 s " \
               "apart))" in verdict.ruled_out, verdict.ruled_out
    else:
        assert_harness_idle(verdict, "high")


# --- the hop's side: bytes its process holds unread --------------------------------------------------

def hop_end(*, serves: str = "127.0.0.1:40000", rqueue: int, recv: float, remote: str = "127.0.0.1:30000",
            pid: int = 5151) -> ev.SocketSample:
    """A socket of the hop's process (socat's child, say) serving the harness connection `serves`."""
    return ev.SocketSample(t=T_END, socket=SocketState(
        local="127.0.0.1:51000", remote=remote, state="ESTABLISHED", rqueue=rqueue, wqueue=0,
        last_data_recv_s=recv, last_data_sent_s=recv, pid=pid, hop="nginx", serves=serves))


def watched_by_loop() -> ProcessThreads:
    return threads(thread(wchan="do_epoll_wait", syscall="epoll_wait", sockets=[77], via_epoll=True))


def test_bytes_the_hop_process_holds_unread_name_the_hop():
    """The answer stopped; the hop's process serving this connection has the engine's bytes unread
    for 3 s in its upstream socket: it stopped, positive evidence."""
    evidence = triage_evidence(conn(), read=watched_by_loop())
    verdict = classify(dataclasses.replace(evidence, sockets=(*evidence.sockets, hop_end(rqueue=1678, recv=3.0))))
    assert (verdict.where, verdict.kind, verdict.confidence) == ("nginx", "connection-wedged", "high"), verdict.summary
    assert ("nginx's process (pid 5151) serving 127.0.0.1:40000 has 1678 B from 127.0.0.1:30000 unread, the last of "
            "them received 3.0 s ago") in verdict.summary
    assert any(e["hop"] == "nginx" and e["value"].startswith("nginx's pid 5151 127.0.0.1:51000 -> 127.0.0.1:30000")
               for e in verdict.evidence)


@pytest.mark.parametrize("end", [
    hop_end(rqueue=1678, recv=0.02),  # just arrived: a working proxy reads it within milliseconds
    hop_end(rqueue=1678, recv=3.0, serves="127.0.0.1:49999"),  # serves another connection
    hop_end(rqueue=0, recv=3.0),  # nothing held
], ids=["just-arrived", "another-connection", "nothing-held"])
def test_the_hops_side_names_it_only_for_bytes_held_on_this_connection(end):
    evidence = triage_evidence(conn(), read=watched_by_loop())
    verdict = classify(dataclasses.replace(evidence, sockets=(*evidence.sockets, end)))
    assert (verdict.where, verdict.confidence) == ("connection", "low"), verdict.summary


def test_the_threads_shown_are_those_waiting_on_a_socket_and_few_parked_ones():
    """A Bun or Node harness has a dozen threads parked in futex: they say nothing of where a request
    waits, so two stand for them; every thread waiting on a socket or with a Python stack is shown."""
    parked = [ThreadState(tid=tid, name="JITWorker", state="S", syscall="futex") for tid in range(101, 114)]
    loop = ThreadState(tid=120, name="opencode", state="S", syscall="epoll_pwait2", sockets=[77], via_epoll=True)
    read = ProcessThreads(pid=100, t=1.0, threads=[*parked, loop])
    signals = [f["signal"] for f in thread_facts([read])]
    assert signals == ["pid 100 thread 120 (opencode)", "pid 100 thread 101 (JITWorker)",
                       "pid 100 threads"], signals
    only_parked = ProcessThreads(pid=100, t=1.0, threads=parked)
    assert [f["signal"] for f in thread_facts([only_parked])] == [
        "pid 100 thread 101 (JITWorker)", "pid 100 thread 102 (JITWorker)", "pid 100 threads"]
