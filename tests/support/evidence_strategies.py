"""Evidence of a stalled or failed round, built by Hypothesis from the real payload types: probe
samples before and after the stall (readable or not, each gauge read or not), canaries that pass
or fail every way (a refused connection among them), /health answering or not, the round's own
failure with real error bodies, the harness's sockets and threads (triage --pid). Shared by the
property tests of what a verdict says and how it is rendered."""

from __future__ import annotations

from hypothesis import strategies as st

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.error_shapes import ErrorAnswer
from repro.core.evidence import Evidence, HopEvidence
from repro.core.snapshot import Snapshot
from repro.core.socket_state import SocketState
from repro.core.thread_state import ProcessThreads, ThreadState
from tests.support import error_bodies as bodies

STALL_T = 20.0
LAST_PROGRESS_T = 15.0


@st.composite
def samples(draw, hop: str, history: str | None = None):
    out = []
    t = 8.0
    # Its metrics page on the canary's own port (an engine's), or another one.
    url = draw(st.sampled_from(["http://127.0.0.1:1/metrics", "http://127.0.0.1:9/metrics"]))
    # A page that answers at random after the stall, one that stopped answering at it (a frozen
    # process), or one never seen answering (a wrong URL, or frozen before the window).
    history = history or draw(st.sampled_from(["any", "any", "stopped", "never"]))
    for _ in range(draw(st.integers(0 if history == "any" else 4, 5))):
        t += draw(st.sampled_from([0.5, 1.0, 2.0, 3.0]))
        if t > STALL_T:
            break
        answers = {"stopped": t <= LAST_PROGRESS_T, "never": False}.get(history, draw(st.booleans()) or t <= LAST_PROGRESS_T)
        if answers:
            # A page gives the gauges its dialect has: a proxy's none, an engine's one or both.
            snapshot = Snapshot(hop=hop, url=url, ok=True, running=draw(st.none() | st.integers(0, 3)),
                                queued=draw(st.none() | st.integers(0, 2)),
                                itl_count=float(100 + draw(st.integers(0, 50))) if draw(st.booleans()) else None,
                                itl_sum=draw(st.sampled_from([None, 1.0, 400.0])),
                                held=draw(st.none() | st.integers(0, 2)), in_flight=draw(st.none() | st.integers(0, 3)))
        else:
            snapshot = Snapshot(hop=hop, url=url, ok=False, error="timeout: no complete metrics page in 1 s")
        out.append(ev.ProbeSample(t=t, hop=hop, snapshot=snapshot))
    # Counters only grow: sort the progress counter along time, as a real engine's would be.
    counts = sorted(s.snapshot.itl_count for s in out if s.snapshot.itl_count is not None)
    it = iter(counts)
    for s in out:
        if s.snapshot.itl_count is not None:
            s.snapshot.itl_count = next(it)
    return tuple(out)


@st.composite
def canaries(draw, hop: str, serving: bool = False, kind: str | None = None):
    # A refused certificate ends the judging at that hop: rarer, so the rest is judged too.
    kind = "ok" if serving else kind or draw(st.sampled_from(
        ["none", "ok", "connect", "refused", "timeout", "http", "stream", "reset"] * 3 + ["tls"]))
    if kind == "none":
        return None
    health = draw(st.sampled_from([None, 200, 503]))
    if kind == "ok":
        outcome = CanaryOutcome(hop=hop, url="http://127.0.0.1:1", ok=True, status=200, total_s=0.1,
                                health_status=health, events=1, done=True)
    else:
        status = {"http": 502, "stream": 200}.get(kind)
        refused = kind == "refused"
        outcome = CanaryOutcome(hop=hop, url="http://127.0.0.1:1", ok=False, failure="connect" if refused else kind,
                                status=status, total_s=1.0, health_status=None if refused else health,
                                refused=refused, error="connect: connection refused" if refused else f"{kind} failure",
                                tls_reason=draw(st.sampled_from(["unknown-ca", "name-mismatch", "expired", "handshake"]))
                                if kind == "tls" else None)
    return ev.CanaryResult(t=STALL_T + 0.1, hop=hop, outcome=outcome)


@st.composite
def evidences(draw, triage_pid: bool = False):
    """Evidence of a stalled round; `triage_pid`: as `repro triage --pid` gathers it with every hop
    serving fresh requests (no round watched, the harness's connections and threads read)."""
    hops = []
    # Engines that serve fresh requests, so what is in front of them is judged; among those, a
    # front hop frozen at the stall (its canary and its page silent: hop-unresponsive).
    serving = triage_pid or draw(st.sampled_from([False, False, True]))
    frozen = serving and not triage_pid and draw(st.booleans())
    for i in range(draw(st.integers(1 if frozen else 0, 2))):
        name = f"front-{i}"
        role = draw(st.sampled_from(["proxy", "router"]))
        if frozen and i == 0:
            hops.append(HopEvidence(name, role, draw(samples(name, draw(st.sampled_from(["stopped", "never"])))),
                                    draw(canaries(name, kind="timeout"))))
        else:
            hops.append(HopEvidence(name, role, draw(samples(name)), draw(canaries(name, triage_pid))))
    for i in range(draw(st.integers(1, 2))):
        name = f"engine-{i}"
        hops.append(HopEvidence(name, "engine", draw(samples(name)), draw(canaries(name, serving))))
    stall = ev.RoundStalled(t=STALL_T, conv=0, round=2, phase=draw(st.sampled_from(
        ["before-first-byte", "mid-stream", "after-last-event"])), stalled_for_s=5.0, started_t=14.0,
        last_progress_t=LAST_PROGRESS_T, reused=draw(st.booleans()), in_flight=draw(st.integers(1, 3)))
    if triage_pid:  # triage's stand-in: no round of its own outstanding, judged as before any byte
        stall = ev.RoundStalled(t=STALL_T, conv=0, round=0, phase="before-first-byte", stalled_for_s=5.0, started_t=14.0,
                                last_progress_t=LAST_PROGRESS_T, in_flight=0)
    failure = None
    sent: tuple[ev.RoundStarted, ...] = ()
    kind = None if triage_pid or frozen else draw(st.sampled_from(
        [None, "http", "http", "http", "connect", "reset", "early-close", "truncated", "stream", "timeout",
         "client-wait", "deadline", "tls"]))
    if kind is not None:
        status, answer = draw(answers()) if kind == "http" else (None, None)
        failure = ev.RoundFailed(t=STALL_T, conv=0, round=2, phase=stall.phase, error="words", duration_s=5.0,
                                 failure=kind, status=status, answer=answer,
                                 request_bytes=draw(st.sampled_from([None, 9000])) if kind == "http" else None,
                                 reused=stall.reused, idle_s=draw(st.sampled_from([None, 0.2, 5.1])),
                                 server=draw(st.sampled_from([None, "uvicorn", "haproxy", "nginx/1.22.1"])),
                                 events=draw(st.sampled_from([0, 12])),
                                 last_progress_t=draw(st.sampled_from([None, LAST_PROGRESS_T, STALL_T - 0.4])))
        sent = tuple(ev.RoundStarted(t=5.0 * r, conv=0, round=r, prompt_chars=3000 * r, messages=2 * r - 1)
                     for r in range(1, 3) if draw(st.booleans()))
    sockets = ()
    if not triage_pid and draw(st.booleans()):
        sockets = (ev.SocketSample(t=STALL_T, conv=0, round=2, socket=SocketState(
            local="127.0.0.1:5", remote="127.0.0.1:6", state="ESTABLISHED", rqueue=draw(st.sampled_from([0, 0, 512])),
            wqueue=draw(st.sampled_from([0, 100])), unacked=1, last_data_recv_s=3.0, last_data_sent_s=4.0)),)
    for i in range(draw(st.integers(0, 2))):  # a harness's connections, read from outside (triage --pid)
        sockets += (ev.SocketSample(t=STALL_T, socket=SocketState(
            local=f"127.0.0.1:{7 + i}", remote="127.0.0.1:8", state=draw(st.sampled_from(["ESTABLISHED", "CLOSE_WAIT"])),
            rqueue=draw(st.sampled_from([0, 0, 64])), wqueue=draw(st.sampled_from([0, 0, 300])), unacked=0, pid=4242,
            hop=draw(st.sampled_from([None, *(h.name for h in hops)])), bytes_received=draw(st.sampled_from([0, 900])),
            bytes_acked=draw(st.sampled_from([1, 700])), last_ack_recv_s=draw(st.sampled_from([0.1, 8.0])),
            last_data_recv_s=draw(st.sampled_from([0.5, 8.0])), last_data_sent_s=draw(st.sampled_from([0.2, 9.0])),
            inode=100 + i)),)
    threads = ()
    if triage_pid or draw(st.booleans()):  # the harness's threads (triage --pid): read or not, blocked on a connection or not
        error = draw(st.sampled_from([None, None, "cannot list /proc/4242/task (Permission denied)"]))
        found = [] if error else [ThreadState(
            tid=4242 + j, name="MainThread", state="S", syscall=draw(st.sampled_from(["futex", "poll", "epoll_wait", None])),
            sockets=draw(st.sampled_from([[], [100], [101]])), via_epoll=draw(st.booleans()),
            stack=draw(st.sampled_from([[], ["main (h.py:3)"]]))) for j in range(draw(st.integers(1, 2)))]
        threads = (ProcessThreads(pid=4242, t=STALL_T, threads=found, error=error),)
    return Evidence(stall=stall, hops=tuple(hops), stall_after=5.0, driver_in_flight=stall.in_flight,
                    loop_lag_p99_ms=3.0, judge_loop_lag_p99_ms=draw(st.sampled_from([None] * 4 + [4.0, 4000.0])),
                    failure=failure, sockets=sockets, sent=sent, threads=threads,
                    last_answered=draw(st.sampled_from([None, 1])) if failure is not None else None,
                    round_watched=not triage_pid and (draw(st.booleans()) or bool(failure)))


# An HTTP failure's status and the answer it came with: real bodies, from every kind of writer, and
# statuses that do not match them (a mismatch must still give a verdict whose advice fits).
ANSWERS = [(502, None), (504, None), (429, None), (500, None), (413, bodies.NGINX_413), (413, bodies.HAPROXY_413),
           (413, ""), (400, bodies.VLLM_034), (400, bodies.SGLANG_INPUT), (400, bodies.SGLANG_TOTAL),
           (400, bodies.LITELLM_CONTEXT), (400, bodies.OPENAI_CONTEXT), (400, bodies.VLLM_TOOLS), (400, "{}"),
           (401, '{"error":"Unauthorized"}'), (401, bodies.OPENAI_KEY), (404, bodies.VLLM_MODEL), (404, ""),
           (429, bodies.LITELLM_RATE), (503, bodies.VLLM_BUSY), (502, bodies.NGINX_502_TOKENS_OFF),
           (504, bodies.HAPROXY_504), (408, ""), (400, bodies.LLAMACPP_CONTEXT), (422, bodies.TGI_TOTAL)]


@st.composite
def answers(draw):
    status, body = draw(st.sampled_from(ANSWERS))
    if body is None:
        return status, None
    headers = draw(st.sampled_from([{}, {"server": "nginx/1.22.1"}, {"server": "uvicorn"}, {"retry-after": "3"}]))
    return status, ErrorAnswer(body=body, headers=headers)
