"""The harness as our child (repro/io/harness_child.py): its own group, its descendants followed,
signals forwarded first, a bounded stop by pid, its exit code as a shell tells it, a time bound.

Real processes: small Python and shell programs that fork, ignore SIGTERM, print their
environment. Every wait is bounded by a condition, never a bare sleep.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from repro.core.errors import UsageError
from repro.io.harness_child import HarnessChild, descendants, exit_code, forwarding_signals, run_bounded
from tests.support.processes import alive, gone_within

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]

PY = sys.executable


def until(condition, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.02)
    return condition()


def family_of(child: HarnessChild, size: int) -> list[int] | None:
    """The harness's family once it holds `size` processes (None: not within the wait)."""
    return until(lambda: (found if len(found := child.family()) == size else None))


# A harness that forks a worker which forks again (Bun's workers, Node's child processes), then waits.
FORKING = """
import os, sys, time
if os.fork() == 0:
    if os.fork() == 0:
        time.sleep(600)
    time.sleep(600)
time.sleep(600)
"""

# A harness that ignores SIGTERM (and its worker too): only SIGKILL ends them.
STUBBORN = """
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    time.sleep(600)
print("ready", flush=True)
time.sleep(600)
"""


def test_exit_code_as_a_shell_reports_it():
    assert exit_code(3) == 3
    assert exit_code(0) == 0
    assert exit_code(-signal.SIGKILL) == 137
    assert exit_code(-signal.SIGTERM) == 143


def test_its_own_exit_code_passes_through_with_env_and_folder(tmp_path):
    child = HarnessChild.start([PY, "-c", "import os, sys; print(os.environ['WRAP_T'], os.getcwd()); sys.exit(7)"],
                               env={**os.environ, "WRAP_T": "given"}, cwd=tmp_path, stdout=subprocess.PIPE)
    end = run_bounded(child, 30)
    assert end.code == 7 and not end.bounded and end.interrupted is None
    assert child.process.stdout.read().decode().split() == ["given", str(tmp_path)]


def test_runs_in_its_own_process_group():
    child = HarnessChild.start([PY, "-c", "import time; time.sleep(600)"])
    try:
        assert os.getpgid(child.pid) == child.pid != os.getpgid(0)
    finally:
        child.stop(grace=1)


def test_descendants_are_followed_and_stopped_with_it():
    child = HarnessChild.start([PY, "-c", FORKING])
    family = family_of(child, 3)
    assert family and family[0] == child.pid and len(set(family)) == 3
    assert set(descendants(child.pid)) == set(family[1:])
    code = child.stop(grace=2)
    assert code == 128 + signal.SIGTERM
    assert gone_within(family, 5) == []


def test_a_child_that_ignores_term_is_killed_after_the_grace():
    child = HarnessChild.start([PY, "-c", STUBBORN], stdout=subprocess.PIPE)
    assert child.process.stdout.readline().strip() == b"ready"
    family = family_of(child, 2)
    started = time.monotonic()
    code = child.stop(grace=0.5)
    took = time.monotonic() - started
    assert code == 128 + signal.SIGKILL
    assert gone_within(family, 5) == []
    assert took < 5  # TERM ignored, KILL after the grace: bounded


def test_a_worker_that_left_the_group_is_still_stopped():
    # The worker moves to a process group of its own (setsid): killpg misses it; its pid does not.
    script = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(600)\ntime.sleep(600)\n")
    child = HarnessChild.start([PY, "-c", script])
    family = family_of(child, 2)
    # The fork is seen before its setsid may have run: wait (bounded) for the group to change.
    deadline = time.monotonic() + 10
    while family and os.getpgid(family[1]) == child.pid and time.monotonic() < deadline:
        time.sleep(0.05)
    assert family and os.getpgid(family[1]) != child.pid
    child.stop(grace=1)
    assert gone_within(family, 5) == []


def test_the_time_bound_stops_it():
    child = HarnessChild.start([PY, "-c", "import time; time.sleep(600)"])
    started = time.monotonic()
    end = run_bounded(child, 0.5, grace=1)
    assert end.bounded and end.code == 128 + signal.SIGTERM
    assert time.monotonic() - started < 10
    assert not alive(child.pid)


def test_exit_by_signal_is_128_plus_n():
    child = HarnessChild.start([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert run_bounded(child, 30).code == 137


def test_sigint_to_us_goes_to_the_harness_first(tmp_path):
    # The harness catches SIGINT, says so, and exits 5: we must not die of it, and pass its code on.
    script = ("import signal, sys, time\n"
              "def bye(n, f):\n    print('got', n, flush=True); sys.exit(5)\n"
              "signal.signal(signal.SIGINT, bye)\nprint('ready', flush=True)\ntime.sleep(600)\n")
    child = HarnessChild.start([PY, "-c", script], stdout=subprocess.PIPE)
    assert child.process.stdout.readline().strip() == b"ready"
    threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    end = run_bounded(child, 30, grace=5)
    assert end.code == 5 and end.interrupted == signal.SIGINT
    assert child.process.stdout.readline().split() == [b"got", str(int(signal.SIGINT)).encode()]
    assert child.forwarded == [signal.SIGINT]


def test_a_forwarded_signal_the_harness_ignores_still_ends_it_within_the_grace():
    script = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(600)\n"
    child = HarnessChild.start([PY, "-c", script], stdout=subprocess.PIPE)
    assert child.process.stdout.readline().strip() == b"ready"
    threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
    started = time.monotonic()
    end = run_bounded(child, 60, grace=0.5)
    assert end.interrupted == signal.SIGTERM and end.code == 137
    assert time.monotonic() - started < 10


def test_handlers_are_put_back():
    before = signal.getsignal(signal.SIGINT)
    child = HarnessChild.start([PY, "-c", "pass"])
    with forwarding_signals(child):
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before
    child.wait(10)


@pytest.mark.parametrize("argv, cwd", [(["/no/such/harness"], None), ([], None), ([PY, "-c", "pass"], "/etc/passwd")])
def test_a_command_that_cannot_start_is_one_line(argv, cwd):
    with pytest.raises(UsageError) as caught:
        HarnessChild.start(argv, cwd=cwd)
    assert "\n" not in str(caught.value)
