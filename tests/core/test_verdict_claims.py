"""Property: a verdict asserts nothing its evidence lacks, and never blames the front for an engine
whose own fresh canary failed. Hypothesis builds evidence from the real payload types (samples
before and after the stall, readable or not; canaries that pass or fail every way, /health
answering or not) and every sentence of the verdict is checked against it."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from repro.core import events as ev
from repro.core.canary import CanaryOutcome
from repro.core.classify import classify
from repro.core.error_shapes import ErrorAnswer
from repro.core.evidence import Evidence, HopEvidence
from repro.core.harness import HARNESS, quiet_for, use_of
from repro.core.next_actions import ADVICE
from repro.core.snapshot import Snapshot
from repro.core.sockets import SocketState
from repro.core.threads import ProcessThreads, ThreadState
from tests.support import error_bodies as bodies
from tests.support.claims import advice_misfits, unbacked_claims

STALL_T = 20.0
LAST_PROGRESS_T = 15.0


@st.composite
def samples(draw, hop: str):
    out = []
    t = 8.0
    for _ in range(draw(st.integers(0, 5))):
        t += draw(st.sampled_from([0.5, 1.0, 2.0, 3.0]))
        if t > STALL_T:
            break
        if draw(st.booleans()) or t <= LAST_PROGRESS_T:
            snapshot = Snapshot(hop=hop, ok=True, running=draw(st.integers(0, 3)), queued=draw(st.integers(0, 2)),
                                itl_count=float(100 + draw(st.integers(0, 50))) if draw(st.booleans()) else None,
                                held=draw(st.integers(0, 2)), in_flight=draw(st.integers(0, 3)))
        else:
            snapshot = Snapshot(hop=hop, ok=False, error="timeout: no complete metrics page in 1 s")
        out.append(ev.ProbeSample(t=t, hop=hop, snapshot=snapshot))
    # Counters only grow: sort the progress counter along time, as a real engine's would be.
    counts = sorted(s.snapshot.itl_count for s in out if s.snapshot.itl_count is not None)
    it = iter(counts)
    for s in out:
        if s.snapshot.itl_count is not None:
            s.snapshot.itl_count = next(it)
    return tuple(out)


@st.composite
def canaries(draw, hop: str, serving: bool = False):
    kind = "ok" if serving else draw(st.sampled_from(["none", "ok", "connect", "timeout", "http", "stream", "reset"]))
    if kind == "none":
        return None
    health = draw(st.sampled_from([None, 200, 503]))
    if kind == "ok":
        outcome = CanaryOutcome(hop=hop, url="http://127.0.0.1:1", ok=True, status=200, total_s=0.1,
                                health_status=health, events=1, done=True)
    else:
        status = {"http": 502, "stream": 200}.get(kind)
        outcome = CanaryOutcome(hop=hop, url="http://127.0.0.1:1", ok=False, failure=kind, status=status,
                                total_s=1.0, health_status=health, error=f"{kind} failure")
    return ev.CanaryResult(t=STALL_T + 0.1, hop=hop, outcome=outcome)


@st.composite
def evidences(draw, triage_pid: bool = False):
    """Evidence of a stalled round; `triage_pid`: as `repro triage --pid` gathers it with every hop
    serving fresh requests (no round watched, the harness's connections and threads read)."""
    hops = []
    for i in range(draw(st.integers(0, 2))):
        name = f"front-{i}"
        role = draw(st.sampled_from(["proxy", "router"]))
        hops.append(HopEvidence(name, role, draw(samples(name)), draw(canaries(name, triage_pid))))
    for i in range(draw(st.integers(1, 2))):
        name = f"engine-{i}"
        hops.append(HopEvidence(name, "engine", draw(samples(name)), draw(canaries(name, triage_pid))))
    stall = ev.RoundStalled(t=STALL_T, conv=0, round=2, phase=draw(st.sampled_from(
        ["before-first-byte", "mid-stream", "after-last-event"])), stalled_for_s=5.0, started_t=14.0,
        last_progress_t=LAST_PROGRESS_T, reused=draw(st.booleans()), in_flight=draw(st.integers(1, 3)))
    if triage_pid:  # triage's stand-in: no round of its own outstanding, judged as before any byte
        stall = ev.RoundStalled(t=STALL_T, conv=0, round=0, phase="before-first-byte", stalled_for_s=5.0, started_t=14.0,
                                last_progress_t=LAST_PROGRESS_T, in_flight=0)
    failure = None
    sent: tuple[ev.RoundStarted, ...] = ()
    kind = None if triage_pid else draw(st.sampled_from(
        [None, "http", "http", "http", "connect", "reset", "early-close", "truncated", "stream", "timeout"]))
    if kind is not None:
        status, answer = draw(answers()) if kind == "http" else (None, None)
        failure = ev.RoundFailed(t=STALL_T, conv=0, round=2, phase=stall.phase, error="words", duration_s=5.0,
                                 failure=kind, status=status, answer=answer,
                                 request_bytes=draw(st.sampled_from([None, 9000])) if kind == "http" else None,
                                 reused=stall.reused, idle_s=draw(st.sampled_from([None, 0.2, 5.1])),
                                 server=draw(st.sampled_from([None, "uvicorn", "haproxy", "nginx/1.22.1"])))
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
                    loop_lag_p99_ms=3.0, failure=failure, sockets=sockets, sent=sent, threads=threads,
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


# A refusal stands on the round's own answer (a 4xx that says why): an engine failing its canary
# now does not make the request that was refused then the engine's fault.
REFUSALS = frozenset({"request-too-large", "context-exceeded", "request-rejected"})


def fresh_readable(hop: HopEvidence) -> ev.ProbeSample | None:
    return next((s for s in reversed(hop.samples) if s.t > LAST_PROGRESS_T and s.snapshot.ok), None)


def idle_since_stall(hop: HopEvidence) -> bool:
    s = fresh_readable(hop)
    return s is not None and s.snapshot.running == 0 and s.snapshot.queued == 0


@settings(max_examples=600, deadline=None)
@given(evidences())
def test_every_claim_has_its_evidence(evidence):
    assert_claims_backed(evidence)


@settings(max_examples=400, deadline=None)
@given(evidences(triage_pid=True))
def test_a_harness_read_from_outside_names_a_hop_only_on_positive_evidence(evidence):
    assert_claims_backed(evidence)
    assert unbacked_claims(classify(evidence).to_dict()) == []


def assert_claims_backed(evidence: Evidence) -> None:
    v = classify(evidence)
    hops = {h.name: h for h in evidence.hops}
    engines = [h for h in evidence.hops if h.role == "engine"]
    texts = [v.summary, *v.ruled_out]

    # The worst bug: an engine whose own fresh canary failed, and the verdict blames the front.
    # (Unless bytes wait unread in our own receive queue: then our canaries are suspect too.)
    unread = any(s.socket.rqueue for s in evidence.sockets)
    if any(h.canary is not None and not h.canary.outcome.ok for h in engines) and not unread \
            and v.kind not in REFUSALS:
        assert v.side == "server", (v.side, v.kind, v.summary)
    if v.kind in REFUSALS:
        assert evidence.failure is not None and 400 <= evidence.failure.status < 500, (v.kind, evidence.failure)
    # The advice fits the kind and the cause: never "check the API key" for a body too large.
    assert advice_misfits(v.to_dict()) == [], v.summary

    for text in texts:
        for name, hop in hops.items():
            if f"{name} answers /health (200)" in text:
                assert hop.canary is not None and hop.canary.outcome.health_status == 200, text
            if text.startswith(f"{name}: idle"):
                assert idle_since_stall(hop), text
            if text.startswith(f"{name}: moving"):
                assert len([s for s in hop.samples if s.t > LAST_PROGRESS_T and s.snapshot.ok]) >= 2, text
            if text.startswith(f"{name}:") and "running" in text and "before" not in text:
                counts = re.search(r"(\d+) running, (\d+) queued", text)
                if counts:
                    present = fresh_readable(hop)
                    assert present is not None, text
                    assert (int(counts[1]), int(counts[2])) == (present.snapshot.running, present.snapshot.queued), text
        if "engines serve fresh requests" in text:
            assert engines and all(h.canary is not None and h.canary.outcome.ok for h in engines), text
        if "every fresh path answers" in text:
            assert all(h.canary is not None and h.canary.outcome.ok for h in evidence.hops), text
    if "show idle" in v.summary:
        assert v.where in hops and idle_since_stall(hops[v.where]), v.summary
    if "stopped answering" in v.summary and v.where in hops:
        hop = hops[v.where]
        fresh = [s for s in hop.samples if s.t > LAST_PROGRESS_T]
        assert fresh and not any(s.snapshot.ok for s in fresh), v.summary
    # Every evidence entry names a hop of the stack (or the client, or the harness read from outside) and carries a time.
    for entry in v.evidence:
        assert entry["hop"] in hops or entry["hop"] in ("client", HARNESS), entry
        assert entry["at"] is not None and entry["value"], entry
    # Triage watched no round: its phase and stall only as the harness's sockets showed them.
    harness = [s.socket for s in evidence.sockets if s.conv is None]
    read = {t.pid: t for t in evidence.threads}
    if not evidence.round_watched:
        assert v.phase in (None, "before-first-byte"), v.phase
        if v.phase == "before-first-byte":
            assert any(s.hop and use_of(s, read.get(s.pid)) in ("waiting", "unacked") for s in harness), v
        assert v.stalled_for_s is None or any(quiet_for(s) is not None and abs(quiet_for(s) - v.stalled_for_s) < 1e-3
                                              for s in harness), v.stalled_for_s
    # harness-idle only with every fresh path answering and no connection of the harness in use.
    if v.kind == "harness-idle":
        assert all(h.canary is not None and h.canary.outcome.ok for h in evidence.hops), v.summary
        assert not any(use_of(s, read.get(s.pid)) in ("waiting", "unacked", "read", "unread", "connecting")
                       for s in harness), v.summary
    # The worst bug's cousin: a hop named as where a harness's connection is wedged, with no
    # positive evidence (its connection in use, a hop holding requests or failing a canary).
    if v.kind == "connection-wedged" and v.where in hops and harness and not any(e["signal"] == "holds requests"
                                                                                 for e in v.evidence):
        assert any(s.hop == v.where and use_of(s, read.get(s.pid)) in ("waiting", "unacked", "read") for s in harness), v


@settings(max_examples=300, deadline=None)
@given(evidences())
def test_the_matrix_checker_finds_every_claim_backed(evidence):
    """The checker run over every verdict of the scenario matrix agrees with the property above."""
    assert unbacked_claims(classify(evidence).to_dict()) == []


def test_the_matrix_checker_catches_a_claim_without_evidence():
    verdict = {"where": "engine-0", "summary": "engine-0 answers /health (200) yet a fresh request failed; "
               "its gauges, read since the stall, show idle", "ruled_out": ["engine-1: idle, 0 running, 0 queued"],
               "evidence": [{"hop": "engine-0", "signal": "/health", "value": "no answer", "at": 1.0},
                            {"hop": "engine-1", "signal": "running/queued before the stall", "value": "0 running, 0 queued",
                             "at": 1.0}]}
    problems = " | ".join(unbacked_claims(verdict))
    for claim in ("'engine-0 answers /health'", "'engine-1: idle'", "counts for engine-1", "'show idle'"):
        assert claim in problems, problems


def test_the_advice_checker_catches_advice_that_does_not_fit():
    """What the tool used to say of nginx's 413 (a conversation past client_max_body_size) is caught."""
    assert all(sentence.split("{")[0] for sentence in ADVICE.values()), "each advice opens with fixed words to find"
    old = {"kind": "request-rejected", "status": 413, "evidence": [], "summary": "round failed: HTTP 413; the "
           "request itself is refused: check the API key, the model name and the URL against what nginx accepts"}
    assert "a 413 (too large) given request-rejected's advice" in " | ".join(advice_misfits(old)), old
    too_large = {"kind": "request-too-large", "status": 413, "evidence": [], "summary": "nginx refused the request "
                 "with HTTP 413; check the API key (--api-key, or the environment variable the harness reads)"}
    problems = " | ".join(advice_misfits(too_large))
    assert "advice 'key' in a request-too-large verdict" in problems and "without its advice" in problems, problems
    key_for_400 = {"kind": "request-rejected", "status": 400, "evidence": [], "summary": 'engine-0 refused the request '
                   'itself with HTTP 400: "bad json"; check the API key (--api-key, or the environment variable the '
                   'harness reads)'}
    assert "API-key advice for HTTP 400" in " | ".join(advice_misfits(key_for_400))
