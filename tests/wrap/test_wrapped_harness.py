"""repro/session/wrapped_harness.py's pure parts: the exit status a wrap ends with, and the command
as its run log records it (no key in it); and a signal ending an attached watch (no socket: the
watched process is this one, its hop a port nothing listens on)."""

from __future__ import annotations

import json
import os
import signal
import threading

from repro.core.hop import Hop
from repro.core.verdict import Verdict
from repro.io.harness_child import ChildEnd
from repro.session.wrapped_harness import EXIT_BOUND, WrappedHarness, WrapSettings, exit_of, redacted_argv


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
