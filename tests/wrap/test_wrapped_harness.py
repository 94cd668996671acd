"""repro/session/wrapped_harness.py's parts that need no server: the exit status a wrap ends with,
the command as its run log records it (no key in it), a signal ending an attached watch (the
watched process is this one, its hop a port nothing listens on), and the rounds and stalls it
makes of the kernel's byte counters (readings given as probes.sockets returns them)."""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from repro.core.hop import Hop
from repro.core.socket_state import SocketState
from repro.core.verdict import Verdict
from repro.io.harness_child import ChildEnd
from repro.session.wrapped_harness import EXIT_BOUND, Stall, WrappedHarness, WrapSettings, exit_of, redacted_argv


def verdict(side: str) -> Verdict:
    return Verdict(side=side, where="proxy", kind="connection-wedged", confidence="high", phase=None,
                   conversation=1, round=3, stalled_for_s=None, evidence=[], ruled_out=[], summary="s")


def test_the_exit_status_says_what_ended_the_wrap():
    assert exit_of(ChildEnd(3), []) == 3  # the harness's own code
    assert exit_of(ChildEnd(143), [verdict("client")]) == 10  # a verdict wins over the stopped harness's
    assert exit_of(ChildEnd(0), [verdict("client"), verdict("server")]) == 11  # server side wins, as run's
    assert exit_of(ChildEnd(137, bounded=True), []) == EXIT_BOUND
    assert exit_of(ChildEnd(137, bounded=True), [verdict("server")]) == 11
    assert exit_of(ChildEnd(130, interrupted=signal.SIGINT), [verdict("server")]) == 130
    assert exit_of(ChildEnd(0, interrupted=signal.SIGTERM), []) == 130  # attached: as `repro run` interrupted


def test_no_key_of_the_command_reaches_the_log():
    argv = ["agent", "--api-key", "abc123", "--token=xyz", "ANTHROPIC_API_KEY=k1", "-H", "Authorization: Bearer t",
            "sk-live-0123", "--model", "m", "read notes.txt"]
    out = redacted_argv(argv)
    assert out == ["agent", "--api-key", "<redacted>", "--token=<redacted>", "ANTHROPIC_API_KEY=<redacted>", "-H",
                   "Authorization: <redacted>", "<redacted>", "--model", "m", "read notes.txt"]
    assert not any(secret in " ".join(out) for secret in ("abc123", "xyz", "k1", "Bearer t", "0123"))


@pytest.mark.network  # the watch reads this process's sockets (netlink)
@pytest.mark.timeout(60)
def test_sigterm_ends_an_attached_watch_and_records_it(tmp_path):
    # Attached to this very process (alive throughout): only the watch may end on the signal.
    settings = WrapSettings(hops=(Hop("engine-0", "http://127.0.0.1:9"),), attach=os.getpid(), bound=30.0,
                            out=tmp_path / "run")
    before = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        result = WrappedHarness(settings).run()
    finally:
        timer.cancel()
    assert result.exit == 130 and result.interrupted == signal.SIGTERM and not result.bounded
    assert result.harness_exit is None
    assert signal.getsignal(signal.SIGTERM) is before  # our handler gone again
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert events[-1]["type"] == "run_finished" and events[-1]["reason"] == "interrupted by SIGTERM"


# --- rounds and stalls from the kernel's byte counters (values as probes.sockets reads them) ------

def watched(tmp_path, **settings) -> WrappedHarness:
    return WrappedHarness(WrapSettings(hops=(Hop("engine-0", "http://127.0.0.1:9"),), stall_after=1.0,
                                       out=tmp_path / "run", **settings))


def read(wrap: WrappedHarness, port: int, t: float, *, acked: int, received: int, sent_age: float,
         recv_age: float) -> None:
    """One poll's reading of the harness's connection from local port `port` at wrap time `t`."""
    sock = SocketState(local=f"127.0.0.1:{port}", remote="127.0.0.1:9", state="ESTABLISHED", bytes_acked=acked,
                       bytes_received=received, last_data_sent_s=sent_age, last_data_recv_s=recv_age,
                       pid=os.getpid(), inode=None)  # no inode: counted as watched by the harness (Bun, Node)
    wrap._update(wrap._connection(sock, "engine-0", os.getpid()), sock, t)


def logged_events(wrap: WrappedHarness) -> list[dict]:
    wrap.log.close()
    return [json.loads(line) for line in (wrap.run_dir / "events.jsonl").read_text().splitlines()]


def test_an_answer_read_before_the_harness_asked_again_elsewhere_is_no_stall(tmp_path):
    # opencode: its title request answered in full on connection 1, its rounds on connection 2,
    # whose latest request then hangs (headers came, no token). Both go quiet, kept watched by Bun:
    # only the round the harness waits on, the latest, is a stall; the title's answer is done.
    wrap = watched(tmp_path)
    read(wrap, 1, 0.1, acked=100, received=0, sent_age=0.05, recv_age=0.1)
    read(wrap, 1, 0.5, acked=100, received=500, sent_age=0.45, recv_age=0.0)
    read(wrap, 1, 0.7, acked=100, received=900, sent_age=0.65, recv_age=0.0)
    read(wrap, 2, 1.0, acked=100, received=0, sent_age=0.0, recv_age=1.0)
    read(wrap, 2, 1.1, acked=100, received=50, sent_age=0.1, recv_age=0.0)
    read(wrap, 1, 2.5, acked=100, received=900, sent_age=2.45, recv_age=1.8)
    read(wrap, 2, 2.5, acked=100, received=50, sent_age=1.5, recv_age=1.4)
    assert [(s.conv, s.round, s.phase) for s in wrap.stalls] == [(2, 1, "mid-stream")]
    # The stall judged a stream stopped, still stopped when the harness went: abandoned, not done.
    wrap.stalls[0].verdicts.append(verdict("server"))
    wrap._read([])  # the harness gone: none of its connections left
    ends = [(e["type"], e["conv"]) for e in logged_events(wrap) if e["type"] in ("round_done", "round_abandoned")]
    assert sorted(ends) == [("round_abandoned", 2), ("round_done", 1)]


def test_stalls_queued_behind_a_verdict_that_stops_the_harness_are_not_judged(tmp_path):
    # The harness is being stopped: a judgement now would see its connections closing and the
    # hops dropping what they held (an engine's requests aborted: "frontend lost"), not the stall.
    wrap = watched(tmp_path, stop_on_verdict=True)
    wrap._verdict.set()
    stall = Stall(conv=2, round=3, hop="engine-0", phase="mid-stream", stalled_for_s=1.5, t=5.0)
    wrap._stalls.put((stall, [os.getpid()]))
    wrap._stalls.put(None)
    wrap._judge_each()
    assert stall.not_judged and not stall.judged and stall.result is None and stall.verdicts == []
    assert stall.to_dict()["not_judged"] == stall.not_judged


def test_an_answer_and_the_next_request_first_seen_in_one_poll_leave_the_request_unanswered(tmp_path):
    # Claude Code: round 1 answered and round 2 sent 0.1 s apart, on a connection first read after
    # both. Round 2 has no byte of its answer: a stall before the first byte, not mid-stream.
    wrap = watched(tmp_path)
    read(wrap, 1, 0.25, acked=200, received=900, sent_age=0.05, recv_age=0.12)
    read(wrap, 1, 2.0, acked=200, received=900, sent_age=1.8, recv_age=1.87)
    assert [(s.conv, s.phase) for s in wrap.stalls] == [(1, "before-first-byte")]
