"""Waiting on a harness without stopping it (repro.io.harness_child.run_until), as `repro harness`
does before it judges a harness about to be called hung, then waiting on to the limit; and a
judgement that cannot be made (repro.session.harness_sweep.judge_running), said, never raised."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from repro.core.hung_judgement import JUDGE_BOUND_S
from repro.io.harness_child import HarnessChild, alive, run_bounded, run_until
from repro.session.harness_sweep import judge_running, judged_hops

pytestmark = [pytest.mark.network, pytest.mark.timeout(30)]


def test_a_harness_still_running_at_the_moment_is_left_running_then_stopped_at_the_bound():
    child = HarnessChild.start(["sleep", "20"])
    try:
        assert run_until(child, 0.3) is None
        assert alive(child.pid) and child.poll() is None
        end = run_bounded(child, 0.8, grace=1)
        assert end.bounded and end.code == 128 + signal.SIGTERM and not alive(child.pid)
    finally:
        child.stop(grace=1)


def test_a_harness_that_ends_before_the_moment_gives_its_end():
    child = HarnessChild.start([sys.executable, "-c", "raise SystemExit(4)"])
    try:
        end = run_until(child, 20)
        assert end is not None and end.code == 4 and not end.bounded
    finally:
        child.stop(grace=1)


def test_a_forwarded_signal_is_not_cut_short_by_the_moment():
    # Told to stop (a Ctrl-C forwarded) just before the moment, it is given its grace to end, not left running.
    child = HarnessChild.start([sys.executable, "-c",
                                "import signal, time\n"
                                "signal.signal(signal.SIGINT, lambda *a: (time.sleep(0.3), exit(7)))\n"
                                "print('ready', flush=True)\n"
                                "time.sleep(20)"], stdout=subprocess.PIPE)
    try:
        assert child.process.stdout.readline() == b"ready\n"  # its handler is set (bounded: the test's timeout)
        child.forward(signal.SIGINT)
        end = run_until(child, 0.1, grace=5)
        assert end is not None and end.code == 7 and end.interrupted == signal.SIGINT and not end.bounded
    finally:
        child.stop(grace=1)


def test_a_judgement_that_cannot_be_made_is_said_in_one_line_and_the_harness_runs_on():
    child = HarnessChild.start(["sleep", "20"])
    try:
        closed = "http://127.0.0.1:9"  # nothing listens on the discard port here
        judged = judge_running(child, judged_hops(closed, None, closed), model="sim-model", api="no-such-api")
        assert judged.judgement.verdicts == () and judged.judgement.error
        assert len(judged.judgement.error.splitlines()) == 1 and "KeyError" in judged.judgement.error
        assert judged.exited_at is None and child.poll() is None
        assert judged.ended - judged.began <= JUDGE_BOUND_S + 1
    finally:
        child.stop(grace=1)
