"""A harness command run as our child: in its own process group, followed with its descendants,
stopped by pid within a deadline, its exit told as a shell tells it.

Why each piece:
- Its own process group (`process_group=0`, same session): a terminal's Ctrl-C reaches our group
  only, so the harness hears it from us (`forward`), first, and we stay alive to stop it surely
  and say what it did. Same session, not a new one: a harness that reads its terminal keeps it.
- Its descendants (`family`): Bun runs workers, Node spawns child processes, a Python harness may
  shell out; each holds sockets of its own. They are read from /proc/PID/task/TID/children (the
  kernel's list of a thread's live children), walked down; where that file is missing (a kernel
  without CONFIG_PROC_CHILDREN) from every process's parent in /proc/*/stat.
- A bounded stop (`stop`): SIGTERM to the whole group and every descendant seen (one that moved
  to a group of its own is still ours to stop), a grace, then SIGKILL to the same; each by its id,
  never by a name. A descendant that outlives the harness is stopped with it.
- The exit code as a shell reports it: the harness's own code, or 128+N when signal N ended it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from repro.core.errors import UsageError

STOP_GRACE_S = 5.0  # SIGTERM, then this long before SIGKILL
MAX_DESCENDANTS = 512  # bounded work on a harness that forks a crowd
FORWARDED = (signal.SIGINT, signal.SIGTERM)


def exit_code(returncode: int) -> int:
    """Popen's returncode as a shell reports it: a death by signal N is 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def _children_files(pid: int) -> list[int] | None:
    """The live children of every thread of `pid`; None when the kernel has no such file."""
    found: list[int] = []
    any_file = False
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []  # gone: no children either
    for tid in tasks:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/children").read_text()
        except FileNotFoundError:
            continue
        except OSError:
            any_file = True
            continue
        any_file = True
        found += [int(c) for c in text.split()]
    return found if any_file or not tasks else None


def _parents() -> dict[int, int]:
    """{pid: parent pid} of every process /proc shows (the fallback walk)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields start after the last ')'.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) >= 2:
            parents[int(name)] = int(fields[1])
    return parents


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children, theirs, ...), breadth first, at most MAX_DESCENDANTS."""
    found: list[int] = []
    frontier = [pid]
    parents: dict[int, int] | None = None
    while frontier and len(found) < MAX_DESCENDANTS:
        below: list[int] = []
        for each in frontier:
            kids = _children_files(each)
            if kids is None:
                parents = parents if parents is not None else _parents()
                kids = [child for child, parent in parents.items() if parent == each]
            below += [k for k in kids if k not in found and k != pid]
        found += below[:MAX_DESCENDANTS - len(found)]
        frontier = below
    return found


def _signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class HarnessChild:
    """A harness command running as our child (see the module's docstring). Start it with `start`."""

    process: subprocess.Popen
    argv: tuple[str, ...]
    started: float  # time.monotonic() at its start
    # Every descendant seen so far, with its start time: stopped with it, and only while that pid is
    # still the same process (a pid freed and reused by another is never signalled).
    seen: dict[int, int] = field(default_factory=dict)
    forwarded: list[int] = field(default_factory=list)  # the signals passed on to it, in order
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(cls, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | os.PathLike | None = None,
              stdin: Any = None, stdout: IO | int | None = None, stderr: IO | int | None = None) -> HarnessChild:
        """Start `argv` in its own process group, with `env` (the whole environment; None: ours)
        and `cwd`. A command that cannot be started is a one-line UsageError naming it."""
        if not argv:
            raise UsageError("no harness command given: put it after `--`, e.g. `repro wrap -- opencode run ...`")
        try:
            process = subprocess.Popen(list(argv), env=dict(env) if env is not None else None, cwd=cwd, stdin=stdin,
                                       stdout=stdout, stderr=stderr, process_group=0)
        except FileNotFoundError:
            raise UsageError(f"harness command {argv[0]!r} not found: give its path or put it on PATH") from None
        except PermissionError:
            raise UsageError(f"harness command {argv[0]!r} is not executable: check its mode (chmod +x)") from None
        except NotADirectoryError:
            raise UsageError(f"working folder {cwd!s} is not a folder: give an existing folder") from None
        except OSError as exc:
            raise UsageError(f"harness command {argv[0]!r} could not start ({exc.strerror or exc}); "
                             "check the command and its working folder") from None
        return cls(process, tuple(argv), time.monotonic())

    def family(self) -> list[int]:
        """The harness's pid and its live descendants' (remembered in `seen` for the stop)."""
        # Once reaped, its pid may be another process's: its descendants are then those seen before.
        kids = descendants(self.pid) if self.process.poll() is None else []
        with self._lock:
            for kid in kids:
                if kid not in self.seen and (started := _start_time(kid)) is not None:
                    self.seen[kid] = started
        return [self.pid, *kids]

    def poll(self) -> int | None:
        """Its exit code (128+N for signal N) once it has ended, else None."""
        code = self.process.poll()
        return None if code is None else exit_code(code)

    def wait(self, timeout: float | None) -> int | None:
        """Wait up to `timeout` seconds (None: for good) for it to end: its exit code, or None."""
        try:
            return exit_code(self.process.wait(timeout))
        except subprocess.TimeoutExpired:
            return None

    def forward(self, sig: int) -> None:
        """Pass a signal we received on to the harness's group, as a terminal would have."""
        self.forwarded.append(sig)
        if self.process.poll() is None:
            _signal_group(self.pid, sig)

    def _all_gone(self, others: Sequence[int], within: float) -> bool:
        deadline = time.monotonic() + within
        while True:
            if self.process.poll() is not None and not any(alive(p) for p in others):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def stop(self, grace: float = STOP_GRACE_S) -> int:
        """SIGTERM to its group and every descendant seen, `grace` seconds, then SIGKILL to the same;
        returns its exit code. Bounded: at most about 2 x grace (a process in uninterruptible
        sleep may outlast SIGKILL; it is then left, the harness's own code still returned)."""
        self.family()  # the latest descendants, before the harness's end reparents them
        with self._lock:
            others = sorted(pid for pid, started in self.seen.items() if _start_time(pid) == started)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.process.poll() is None:
                _signal_group(self.pid, sig)
            for pid in others:
                if alive(pid):
                    _signal_pid(pid, sig)
            if self._all_gone(others, grace):
                break
        code = self.wait(grace)
        return code if code is not None else exit_code(-signal.SIGKILL)


def _start_time(pid: int) -> int | None:
    """When the process started (clock ticks after boot, /proc/PID/stat field 22); None: gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def alive(pid: int) -> bool:
    """Running, not gone nor a zombie (a zombie holds nothing and is its parent's to reap)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@dataclass
class ChildEnd:
    """How a bounded run of the harness ended."""

    code: int  # the harness's exit code (128+N for a signal), after a stop too
    bounded: bool = False  # our time bound ended it
    interrupted: int | None = None  # the signal (SIGINT/SIGTERM) we received and forwarded, if any


@contextmanager
def forwarding_signals(child: HarnessChild) -> Iterator[None]:
    """While inside: SIGINT and SIGTERM we receive go to the harness first (`forward`), not to us.
    Only the main thread may set handlers; elsewhere this does nothing (the caller's own handling stays)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.signal(sig, lambda number, _frame: child.forward(number)) for sig in FORWARDED}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def run_bounded(child: HarnessChild, bound: float | None, *, grace: float = STOP_GRACE_S,
                poll_s: float = 0.05) -> ChildEnd:
    """Wait for the harness to end, for at most `bound` seconds from its start (None: no bound),
    forwarding SIGINT/SIGTERM meanwhile. A harness still running at the bound, or after a
    forwarded signal and `grace`, is stopped (`stop`)."""
    end = _wait(child, bound, grace=grace, poll_s=poll_s, stop_at_bound=True)
    assert end is not None  # stopping at the bound, every way out is an end
    return end


def run_until(child: HarnessChild, moment: float, *, grace: float = STOP_GRACE_S,
              poll_s: float = 0.05) -> ChildEnd | None:
    """As `run_bounded`, but a harness still running `moment` seconds after its start is left
    running: None. So a caller can look at it (`repro harness` judges a harness about to be
    called hung) before it waits again with `run_bounded`."""
    return _wait(child, moment, grace=grace, poll_s=poll_s, stop_at_bound=False)


def _wait(child: HarnessChild, bound: float | None, *, grace: float, poll_s: float,
          stop_at_bound: bool) -> ChildEnd | None:
    interrupted_at: float | None = None
    with forwarding_signals(child):
        while True:
            code = child.wait(poll_s)
            if code is not None:
                child.stop(grace=min(grace, 1.0))  # descendants it left behind
                return ChildEnd(code, interrupted=child.forwarded[0] if child.forwarded else None)
            now = time.monotonic()
            if child.forwarded and interrupted_at is None:
                interrupted_at = now
            if interrupted_at is not None and now - interrupted_at >= grace:
                return ChildEnd(child.stop(grace), interrupted=child.forwarded[0])
            if bound is not None and now - child.started >= bound:
                if not stop_at_bound:
                    if not child.forwarded:
                        return None
                    continue  # a forwarded signal's grace runs its course first (above)
                return ChildEnd(child.stop(grace), bounded=True,
                                interrupted=child.forwarded[0] if child.forwarded else None)
