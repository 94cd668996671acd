"""Where another process's threads wait (`repro triage --pid`): the kernel's view from /proc, and
for a Python process its stacks through py-spy.

`process_threads(pid)` reads, for every thread (/proc/PID/task/TID):
- `comm`, the state from `stat`, `wchan` (the kernel function it sleeps in), and its context
  switches from `status` (two reads with the same count: it never woke in between; reading them,
  and py-spy with --nonblocking, wake nothing);
- `syscall`: the system call it is blocked in and its arguments, from which the descriptors it
  waits on are recovered: read/recv*/accept/connect name their fd; poll/ppoll and select/pselect6
  point at their fd set in the process's memory (read from /proc/PID/mem, a few bytes); an
  epoll_wait names its epoll set, whose interest list /proc/PID/fdinfo/EPFD shows. Each fd is
  matched to a socket inode through /proc/PID/fd, so the judge can say "thread 4242 is blocked
  reading its connection to nginx" or "no thread waits on any connection".
`syscall` and `mem` need the right to trace the process (the same user without Yama's
restrictions, or root); what cannot be read stays None and says so, it is never guessed.

Why py-spy for the Python stacks (`py-spy dump --pid PID --json --nonblocking`):
- It reads a running CPython's frames from outside, with no change to the harness (no signal
  handler, no faulthandler, no debugger attached to the interpreter), for CPython 3.8 to 3.13
  (3.12 since 0.4.0), and ships as one static binary in a wheel (`pip install py-spy`), no
  runtime dependency. Checked here as root on CPython 3.12: exit 0, one JSON object per thread
  with its OS thread id (so /proc's view and the stack join on the tid).
- `--nonblocking`: it does not stop the process while it reads (a live incident's harness is not
  paused); a blocked thread's stack does not change meanwhile, so nothing is lost for our use.
- Alternatives: gdb with CPython's python-gdb.py needs debug symbols and stops the process;
  `faulthandler`/`sys._current_frames()` need code inside the harness; austin is not on PyPI as a
  binary wheel. py-spy is optional (`pip install 'repro[stacks]'`): missing, failing (not root, a
  container without SYS_PTRACE) or slower than its deadline, the threads are still shown from /proc
  and the reason the stacks are not is recorded. A process that is not Python (its executable
  and mappings show no interpreter: opencode's Bun, Claude Code's Node) is not asked at all, so
  no failure of py-spy's stands in its evidence for a value that was never there to read.

Layer: imports only repro.core.* (tests/test_layers.py).
"""

from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

from repro.core.thread_state import ProcessThreads, ThreadState

MAX_THREADS = 512  # a process with more is read up to this many: bounded work
MAX_POLL_FDS = 64  # a poll set larger than this is read up to this many entries
STACK_TIMEOUT_S = 5.0

# System call numbers of the calls a thread waits in, by machine (asm/unistd_64.h, asm-generic/unistd.h).
SYSCALLS: dict[str, dict[int, str]] = {
    "x86_64": {0: "read", 7: "poll", 17: "pread64", 19: "readv", 23: "select", 35: "nanosleep", 42: "connect",
               43: "accept", 45: "recvfrom", 47: "recvmsg", 61: "wait4", 202: "futex", 230: "clock_nanosleep",
               232: "epoll_wait", 270: "pselect6", 271: "ppoll", 281: "epoll_pwait", 288: "accept4",
               299: "recvmmsg", 441: "epoll_pwait2", 449: "futex_waitv", 1: "write", 44: "sendto", 46: "sendmsg",
               34: "pause", 130: "rt_sigsuspend", 128: "rt_sigtimedwait"},
    "aarch64": {63: "read", 73: "ppoll", 67: "pread64", 65: "readv", 72: "pselect6", 101: "nanosleep",
                203: "connect", 202: "accept", 207: "recvfrom", 212: "recvmsg", 260: "wait4", 98: "futex",
                115: "clock_nanosleep", 22: "epoll_pwait", 242: "accept4", 243: "recvmmsg", 441: "epoll_pwait2",
                449: "futex_waitv", 64: "write", 206: "sendto", 211: "sendmsg", 133: "rt_sigsuspend",
                137: "rt_sigtimedwait"},
}
FD_CALLS = {"read", "pread64", "readv", "recvfrom", "recvmsg", "recvmmsg", "accept", "accept4", "connect"}
POLL_CALLS = {"poll", "ppoll"}
SELECT_CALLS = {"select", "pselect6"}
EPOLL_CALLS = {"epoll_wait", "epoll_pwait", "epoll_pwait2"}
POLLIN, POLLPRI, EPOLLIN = 0x1, 0x2, 0x1
_POLLFD = struct.Struct("=ihh")  # struct pollfd: int fd; short events; short revents


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def socket_inode(pid: int, fd: int) -> int | None:
    try:
        link = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None
    if link.startswith("socket:[") and link.endswith("]"):
        try:
            return int(link[8:-1])
        except ValueError:
            return None
    return None


def _memory(pid: int, address: int, size: int) -> bytes | None:
    """`size` bytes of the process's memory at `address` (needs the right to trace it), or None."""
    if address <= 0 or size <= 0:
        return None
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            data = os.pread(mem.fileno(), size, address)
    except (OSError, OverflowError, ValueError):
        return None
    return data if len(data) == size else None


def epoll_read_fds(pid: int, epfd: int) -> list[int] | None:
    """The fds an epoll set watches for reading (its interest list in /proc/PID/fdinfo/EPFD)."""
    text = _read(f"/proc/{pid}/fdinfo/{epfd}")
    if text is None:
        return None
    fds = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0] == "tfd:" and parts[2] == "events:":
            try:
                fd, events = int(parts[1]), int(parts[3], 16)
            except ValueError:
                continue
            if events & EPOLLIN:
                fds.append(fd)
    return fds


def waited_fds(pid: int, call: str, args: list[int]) -> tuple[list[int] | None, bool]:
    """(the fds a blocked call waits to read, whether through an epoll set); None: not recoverable."""
    if call in FD_CALLS:
        return [args[0]], False
    if call in POLL_CALLS:
        count = min(args[1], MAX_POLL_FDS)
        data = _memory(pid, args[0], count * _POLLFD.size)
        if data is None:
            return None, False
        entries = (_POLLFD.unpack_from(data, i * _POLLFD.size) for i in range(count))
        return [fd for fd, events, _ in entries if fd >= 0 and events & (POLLIN | POLLPRI)], False
    if call in SELECT_CALLS:
        nfds = min(args[0], 1024)
        data = _memory(pid, args[1], (nfds + 7) // 8) if args[1] else b""
        if data is None:
            return None, False
        return [fd for fd in range(nfds) if data[fd // 8] >> (fd % 8) & 1], False
    if call in EPOLL_CALLS:
        return epoll_read_fds(pid, args[0]), True
    return [], False


def _switches(status: str | None) -> int | None:
    """voluntary_ctxt_switches + nonvoluntary_ctxt_switches from a task's status: how often it woke."""
    if status is None:
        return None
    counts = [int(line.split()[1]) for line in status.splitlines()
              if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")) and line.split()[1].isdigit()]
    return sum(counts) if len(counts) == 2 else None


def _one_thread(pid: int, tid: int, names: dict[int, str]) -> ThreadState:
    base = f"/proc/{pid}/task/{tid}"
    comm = (_read(f"{base}/comm") or "").strip() or None
    stat = _read(f"{base}/stat")
    state = stat.rsplit(")", 1)[1].split()[0] if stat and ")" in stat else None
    wchan = (_read(f"{base}/wchan") or "").strip()
    thread = ThreadState(tid=tid, name=comm, state=state, wchan=wchan if wchan and wchan != "0" else None,
                         switches=_switches(_read(f"{base}/status")))
    raw = _read(f"{base}/syscall")
    if raw is None:
        return thread
    parts = raw.split()
    if not parts:
        return thread
    if parts[0] == "running":
        thread.syscall = "running"
        return thread
    try:
        number = int(parts[0])
        args = [int(a, 16) for a in parts[1:7]]
    except ValueError:
        return thread
    if number < 0:
        thread.syscall = "none"  # blocked, not in a system call (a page fault, a stop)
        return thread
    call = names.get(number, f"syscall {number}")
    thread.syscall = call
    if len(args) == 6:
        fds, via_epoll = waited_fds(pid, call, args)
        if fds is not None:
            thread.fds = fds
            thread.via_epoll = via_epoll
            thread.sockets = [inode for inode in (socket_inode(pid, fd) for fd in fds) if inode is not None]
    return thread


def py_spy_path() -> str | None:
    """py-spy on PATH, or beside this interpreter (a virtualenv not activated)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def python_stacks(pid: int, *, timeout: float = STACK_TIMEOUT_S) -> tuple[dict[int, dict[str, Any]], str | None, str | None]:
    """({os tid: py-spy's thread record}, what read them, why not): `py-spy dump --json --nonblocking`."""
    binary = py_spy_path()
    if binary is None:
        return {}, None, "py-spy is not installed (pip install 'repro[stacks]' or pip install py-spy)"
    env = {**os.environ, "RUST_BACKTRACE": "0"}
    try:
        out = subprocess.run([binary, "dump", "--pid", str(pid), "--json", "--nonblocking"], capture_output=True,
                             text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {}, None, f"py-spy did not answer within {timeout:g} s"
    except OSError as exc:
        return {}, None, f"py-spy could not start ({exc.strerror or exc})"
    if out.returncode != 0:
        lines = [line.strip() for line in out.stderr.splitlines() if line.strip()]
        reason = next((line for line in lines if line.startswith(("Error", "Permission"))), lines[0] if lines else "")
        return {}, None, f"py-spy failed: {reason[:200] or f'exit {out.returncode}'}"
    try:
        records = json.loads(out.stdout)
    except json.JSONDecodeError:
        return {}, None, "py-spy's output was not JSON"
    version = _py_spy_version(binary, timeout)
    return ({int(r["os_thread_id"]): r for r in records if isinstance(r, dict) and r.get("os_thread_id")},
            f"py-spy {version}" if version else "py-spy", None)


@functools.lru_cache(maxsize=4)
def _py_spy_version(binary: str, timeout: float) -> str | None:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = out.stdout.split()
    return words[-1] if out.returncode == 0 and words else None


def frame_text(frame: dict[str, Any]) -> str:
    return f"{frame.get('name', '?')} ({frame.get('short_filename') or frame.get('filename', '?')}:{frame.get('line', '?')})"


def runs_python(pid: int) -> bool | None:
    """The process is a Python interpreter (its executable's name, or libpython among its mappings:
    an embedded or frozen one); None when /proc does not say (not ours to read)."""
    try:
        exe = Path(os.readlink(f"/proc/{pid}/exe")).name
        if exe.startswith(("python", "pypy")):
            return True
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
            return any("libpython" in line for line in maps)
    except OSError:
        return None


def process_threads(pid: int, t: float, *, stacks: bool = True, stack_timeout: float = STACK_TIMEOUT_S) -> ProcessThreads:
    """Every thread of `pid` (up to MAX_THREADS) and where it waits. Never raises: a process that
    cannot be read is recorded with its error."""
    try:
        tids = sorted(int(name) for name in os.listdir(f"/proc/{pid}/task") if name.isdigit())
    except FileNotFoundError:
        return ProcessThreads(pid=pid, t=t, error=f"pid {pid}: no such process (has it exited?)")
    except OSError as exc:
        return ProcessThreads(pid=pid, t=t, error=f"pid {pid}: cannot list /proc/{pid}/task ({exc.strerror or exc})")
    names = SYSCALLS.get(platform.machine(), {})
    threads = [_one_thread(pid, tid, names) for tid in tids[:MAX_THREADS]]
    read = ProcessThreads(pid=pid, t=t, threads=threads)
    read.not_python = stacks and runs_python(pid) is False
    if stacks and not read.not_python:
        by_tid, read.stacks_by, read.stacks_error = python_stacks(pid, timeout=stack_timeout)
        for thread in threads:
            record = by_tid.get(thread.tid)
            if record is None:
                continue
            thread.stack = [frame_text(f) for f in record.get("frames") or []]
            thread.name = record.get("thread_name") or thread.name
            thread.python = ("active+gil" if record.get("owns_gil") else "active") if record.get("active") else "idle"
    return read
