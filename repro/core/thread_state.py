"""A process's threads as the kernel (and, for Python, py-spy) shows them: where each one waits.

Read from outside by probes/threads.py for `repro triage --pid`; judged by repro/core/harness.py,
which asks one question of them: is any thread of the harness blocked on one of its connections
(waiting on the network), or does it wait in its own code (a lock, a sleep, an event never set)?
Typed, so the verdict reads fields, never text.
"""

from __future__ import annotations

from typing import Any

import msgspec


class ThreadState(msgspec.Struct, kw_only=True):
    tid: int
    name: str | None = None  # /proc/PID/task/TID/comm (Python sets it from threading's name on 3.x only if asked)
    state: str | None = None  # R running, S sleeping, D disk sleep, T stopped, Z zombie (stat field 3)
    wchan: str | None = None  # the kernel function it sleeps in (futex_wait_queue, ep_poll, ...); None: not shown
    syscall: str | None = None  # the system call it is in ("futex", "epoll_wait", "poll"...), "running", or None: not readable
    fds: list[int] = []  # the descriptors that call waits on (read/recv: its fd; poll: its set; epoll: the set's fds read)
    sockets: list[int] = []  # the socket inodes among `fds`
    via_epoll: bool = False  # `sockets` are an epoll set's (an event loop's): watched, not necessarily awaited
    stack: list[str] = []  # Python frames, innermost first, "function (file:line)" (py-spy); [] when not read
    python: str | None = None  # py-spy's word for the thread: idle, active, active+gil
    # Context switches so far (voluntary + involuntary, /proc/PID/task/TID/status): unchanged between
    # two reads, the thread never woke in between; None: not read.
    switches: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)


class ProcessThreads(msgspec.Struct, kw_only=True):
    """One read of a process's threads, on triage's clock, or why it failed."""

    pid: int
    t: float
    threads: list[ThreadState] = []
    error: str | None = None  # the threads were not read: why (one line)
    stacks_by: str | None = None  # what read the Python stacks ("py-spy 0.4.3"); None: not read
    stacks_error: str | None = None  # why the Python stacks were not read, when they were tried
    # Its executable and its mappings show no Python (a Bun or Node harness): no stacks were tried,
    # as there are none to read; not a failure to say.
    not_python: bool = False

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)

    @property
    def read(self) -> bool:
        return self.error is None and bool(self.threads)

    @property
    def syscalls_read(self) -> bool:
        """Every thread's system call was read: a thread blocked on a socket would have shown."""
        return self.read and all(t.syscall is not None for t in self.threads)
