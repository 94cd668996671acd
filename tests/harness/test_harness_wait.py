"""Waiting on a harness without stopping it (repro.io.harness_child.run_until), as `repro harness`
does before it judges a harness about to be called hung, then waiting on to the limit."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from repro.io.harness_child import HarnessChild, alive, run_bounded, run_until

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
