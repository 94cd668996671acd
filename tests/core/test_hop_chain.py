"""repro.core.hop_chain on hand-built sockets: a stuck request followed hop by hop, matched by time
and direction, to where it stopped; and the verdict it gives triage --pid (issue 31, defect 11).

The chain: the harness (127.0.0.1:40000) -> nginx (pid 100, listening on :8080) -> a proxy (pid 200,
:9000) -> the engine (pid 300, :30000). Times are seconds ago, as tcp_info gives them."""

from __future__ import annotations

import dataclasses

import msgspec

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.classify import classify
from repro.core.evidence import Evidence, HopEvidence
from repro.core.hop_chain import follow, stop_text
from repro.core.snapshot import Snapshot
from repro.core.socket_state import SocketState
from repro.core.thread_state import ProcessThreads, ThreadState

PID = 4242
T_END = 5.2  # triage's last look, on its clock


def ok_canary(hop: str) -> ev.CanaryResult:
    return ev.CanaryResult(t=2.6, hop=hop, outcome=CanaryOutcome(hop=hop, url="http://127.0.0.1:1", ok=True, status=200,
                                                                 total_s=0.03, health_status=200, events=1, done=True))


def sample(hop: str, t: float, **counts) -> ev.ProbeSample:
    return ev.ProbeSample(t=t, hop=hop, snapshot=Snapshot(hop=hop, ok=True, **counts))


def stack() -> tuple[HopEvidence, ...]:
    """nginx in front of one engine, both serving fresh requests, idle."""
    return (HopEvidence("nginx", "proxy", (sample("nginx", 1.0, in_flight=0), sample("nginx", 5.1, in_flight=0)),
                        ok_canary("nginx")),
            HopEvidence("engine-0", "engine", (sample("engine-0", 1.0, running=0, queued=0, itl_count=100.0),
                                               sample("engine-0", 5.1, running=0, queued=0, itl_count=100.0)),
                        ok_canary("engine-0")))


def conn(**figures) -> SocketState:
    """The harness's connection to nginx."""
    fields = dict(local="127.0.0.1:40000", remote="127.0.0.1:8080", state="ESTABLISHED", rqueue=0, wqueue=0,
                  unacked=0, retransmits=0, last_data_recv_s=16.9, last_data_sent_s=17.0, last_ack_recv_s=16.9,
                  bytes_received=2400, bytes_acked=1301, pid=PID, inode=77, hop="nginx")
    fields.update(figures)
    return SocketState(**fields)


def triage_evidence(*sockets: SocketState, hops=None) -> Evidence:
    """Evidence as `repro triage --pid` builds it: a stand-in stall at the window's start, no round
    watched; the harness's thread waits on a lock."""
    stall = ev.RoundStalled(t=0.0, conv=0, round=0, phase="before-first-byte", stalled_for_s=T_END, started_t=0.0,
                            last_progress_t=0.0)
    read = ProcessThreads(pid=PID, t=T_END, stacks_by="py-spy 0.4.3", threads=[ThreadState(
        tid=PID, name="MainThread", state="S", wchan="futex_do_wait", syscall="futex")])
    return Evidence(stall=stall, hops=hops if hops is not None else stack(), stall_after=5.0, driver_in_flight=0,
                    sockets=tuple(ev.SocketSample(t=T_END, socket=s) for s in sockets), threads=(read,),
                    round_watched=False)

HARNESS_END = "127.0.0.1:40000"


def sock(local: str, remote: str, pid: int, *, recv: float | None, sent: float | None, rqueue: int = 0,
         state: str = "ESTABLISHED", hop: str | None = None, process: str = "proc", received: int = 900) -> SocketState:
    return SocketState(local=local, remote=remote, state=state, rqueue=rqueue, wqueue=0, last_data_recv_s=recv,
                       last_data_sent_s=sent, bytes_received=received, bytes_acked=800, pid=pid, inode=pid * 10 + 1,
                       hop=hop, traced=True, process=process)


def listening(port: int, pid: int, process: str, hop: str | None = None) -> SocketState:
    return SocketState(local=f"127.0.0.1:{port}", remote="0.0.0.0:0", state="LISTEN", pid=pid, traced=True,
                       process=process, hop=hop)


# The harness's stuck connection: request sent 6.5 s ago, last answer 16.9 s ago.
STUCK = conn(last_data_sent_s=6.5, last_data_recv_s=16.9)
NGINX_IN = sock("127.0.0.1:8080", HARNESS_END, 100, recv=6.5, sent=16.9, hop="nginx", process="nginx")
NGINX_OUT = sock("127.0.0.1:41000", "127.0.0.1:9000", 100, recv=16.9, sent=6.49, process="nginx")  # waits
PROXY_IN = sock("127.0.0.1:9000", "127.0.0.1:41000", 200, recv=6.49, sent=16.9, process="corpproxy")
PROXY_OUT_IDLE = sock("127.0.0.1:42000", "127.0.0.1:30000", 200, recv=16.9, sent=17.0, process="corpproxy")
BASE = [listening(8080, 100, "nginx", "nginx"), listening(9000, 200, "corpproxy"), NGINX_IN, NGINX_OUT, PROXY_IN]


def test_a_request_read_by_the_second_hop_and_not_sent_on_stops_there():
    trace = follow(STUCK, [*BASE, PROXY_OUT_IDLE])
    assert [s.name for s in trace.steps] == ["nginx", "corpproxy:9000"] and trace.stop == "not-forwarded"
    assert trace.where == "corpproxy:9000" and trace.seen_to_the_end
    assert trace.steps[0].outbound == NGINX_OUT and trace.steps[1].outbound is None
    assert "the request went into corpproxy:9000 6.5 s ago and nothing went out of it since" in stop_text(trace)


def test_a_request_unread_in_a_frozen_hop_stops_there():
    frozen_in = msgspec.structs.replace(PROXY_IN, rqueue=412)
    trace = follow(STUCK, [*BASE[:-1], frozen_in])
    assert (trace.where, trace.stop) == ("corpproxy:9000", "unread")
    assert "waits unread in corpproxy:9000's receive queue (412 B" in stop_text(trace)


def test_a_request_passed_on_goes_to_the_next_hop_and_stops_in_the_engine():
    carrier = sock("127.0.0.1:42000", "127.0.0.1:30000", 200, recv=16.9, sent=6.48, process="corpproxy")
    engine_in = sock("127.0.0.1:30000", "127.0.0.1:42000", 300, recv=6.48, sent=16.9, hop="engine-0", process="sim")
    trace = follow(STUCK, [*BASE, carrier, listening(30000, 300, "sim", "engine-0"), engine_in])
    assert [s.name for s in trace.steps] == ["nginx", "corpproxy:9000", "engine-0"]
    assert (trace.where, trace.stop) == ("engine-0", "not-forwarded")


def test_an_answer_back_and_not_passed_on_is_held_by_that_hop():
    answered = sock("127.0.0.1:42000", "127.0.0.1:30000", 200, recv=5.0, sent=6.48, process="corpproxy")
    trace = follow(STUCK, [*BASE, answered])
    assert (trace.where, trace.stop) == ("corpproxy:9000", "answer-held")
    unread = msgspec.structs.replace(answered, rqueue=3000, last_data_recv_s=5.0)
    assert follow(STUCK, [*BASE, unread]).stop == "answer-held"
    # Every byte back passed on (the hop wrote to its client just after): not held here.
    passed = msgspec.structs.replace(PROXY_IN, last_data_sent_s=4.99)
    engine_in = sock("127.0.0.1:30000", "127.0.0.1:42000", 300, recv=6.48, sent=5.0, hop="engine-0")
    trace = follow(STUCK, [*BASE[:-1], passed, answered, engine_in])
    assert trace.steps[-1].name == "engine-0"


def test_a_canarys_connection_sent_later_and_answered_is_not_the_request():
    """A fresh canary through the proxy, seconds after the stuck request came in, answered: another
    request's connection, not a sign the stuck one went out."""
    canary = sock("127.0.0.1:42001", "127.0.0.1:30000", 200, recv=2.0, sent=2.1, process="corpproxy")
    trace = follow(STUCK, [*BASE, PROXY_OUT_IDLE, canary])
    assert (trace.where, trace.stop) == ("corpproxy:9000", "not-forwarded")


def test_a_hop_whose_other_end_is_not_on_this_host_ends_the_trace_out_of_sight():
    remote = sock("127.0.0.1:41000", "10.1.2.3:4000", 100, recv=16.9, sent=6.49, process="nginx")
    trace = follow(STUCK, [*BASE[:2], NGINX_IN, remote])
    assert trace.stop == "not-visible" and not trace.seen_to_the_end
    assert trace.where == "10.1.2.3:4000" and [s.name for s in trace.steps] == ["nginx"]
    assert "beyond nginx: not visible from here" in stop_text(trace)


def test_no_trace_without_the_first_hops_end():
    assert follow(STUCK, []) is None
    assert follow(STUCK, [NGINX_OUT, PROXY_IN]) is None


# --- the verdict ------------------------------------------------------------------------------------

def chained(*traced: SocketState, hops=None):
    evidence = triage_evidence(STUCK, hops=hops)
    return dataclasses.replace(evidence, sockets=(*evidence.sockets,
                                                  *(ev.SocketSample(t=T_END, socket=s) for s in traced)))


def with_corpproxy() -> tuple[HopEvidence, ...]:
    proxy, engine = stack()
    corp = HopEvidence("corpproxy", "proxy", (), ok_canary("corpproxy"))
    return proxy, corp, engine


def test_the_verdict_names_the_hop_the_request_stopped_in_not_the_first_hop():
    named = msgspec.structs.replace(PROXY_IN, hop="corpproxy")
    verdict = classify(chained(*BASE[:-1], named, PROXY_OUT_IDLE, hops=with_corpproxy()))
    assert (verdict.side, verdict.where, verdict.kind, verdict.confidence) == \
        ("client", "corpproxy", "connection-wedged", "high"), verdict.summary
    assert "its established connections to nginx (" in verdict.summary and "corpproxy holds it" in verdict.summary
    socket_entries = {e["hop"] for e in verdict.evidence if e["signal"] == "socket"}
    assert {"nginx", "corpproxy"} <= socket_entries
    followed = [e for e in verdict.evidence if e["signal"] == "followed through the hops' sockets"]
    assert followed[0]["hop"] == "corpproxy" and followed[0]["value"] in verdict.summary
    assert not [line for line in verdict.ruled_out if line.startswith("corpproxy")], verdict.ruled_out


def test_a_trace_out_of_sight_lowers_the_confidence_and_says_so():
    remote = sock("127.0.0.1:41000", "10.1.2.3:4000", 100, recv=16.9, sent=6.49, process="nginx")
    verdict = classify(chained(*BASE[:2], NGINX_IN, remote))
    assert (verdict.where, verdict.confidence) == ("10.1.2.3:4000", "medium"), verdict.summary
    assert "beyond nginx: not visible from here" in verdict.summary
    assert "it went on to 10.1.2.3:4000, not seen from here" in verdict.summary


def test_a_trace_that_stops_at_the_first_hop_keeps_it_named():
    frozen_nginx = msgspec.structs.replace(NGINX_IN, rqueue=300)
    verdict = classify(chained(BASE[0], frozen_nginx))
    assert (verdict.where, verdict.confidence) == ("nginx", "high"), verdict.summary
    assert "the request waits unread in nginx's receive queue" in verdict.summary


def test_without_traced_sockets_the_verdict_is_unchanged():
    assert classify(triage_evidence(STUCK)).where == "nginx"


def test_the_hops_previous_request_sent_just_before_ours_came_in_is_not_ours():
    """Rounds 0.1 s apart: the proxy's pooled connection carried the previous round (sent 6.7 s ago,
    answered 6.6 s ago) just before ours came in (6.49 s ago), and was not used since. It is not
    ours: the request went in and nothing went out (as `repro run` first judged it, at the engine)."""
    previous = sock("127.0.0.1:42000", "127.0.0.1:30000", 200, recv=6.6, sent=6.7, process="corpproxy")
    engine_in = sock("127.0.0.1:30000", "127.0.0.1:42000", 300, recv=6.7, sent=6.6, hop="engine-0")
    trace = follow(STUCK, [*BASE, previous, engine_in])
    assert (trace.where, trace.stop) == ("corpproxy:9000", "not-forwarded")


def test_a_request_followed_into_an_engine_that_serves_fresh_requests_names_nothing_new():
    """Which kind of fault an engine holding one request while answering fresh ones is, the trace
    does not decide: the verdict stays as before (the hop the harness waits on)."""
    carrier = sock("127.0.0.1:42000", "127.0.0.1:30000", 200, recv=16.9, sent=6.48, process="corpproxy")
    engine_in = sock("127.0.0.1:30000", "127.0.0.1:42000", 300, recv=6.48, sent=16.9, hop="engine-0", process="sim")
    verdict = classify(chained(*BASE, carrier, engine_in))
    assert verdict.where == "nginx" and "followed" not in verdict.summary, verdict.summary


def test_out_of_sight_to_a_known_hop_names_that_hop():
    remote = sock("127.0.0.1:41000", "10.1.2.3:4000", 100, recv=16.9, sent=6.49, process="nginx", hop="litellm")
    trace = follow(STUCK, [*BASE[:2], NGINX_IN, remote])
    assert (trace.where, trace.stop) == ("litellm", "not-visible")
