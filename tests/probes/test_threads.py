"""probes/threads.py on real processes: where each thread waits (/proc: state, wait channel, system
call, the sockets it waits on) and the Python stacks (py-spy), and how it degrades without them.

The target is a Python child whose threads wait in known places: a lock taken twice (futex), a
blocking recv on a socket (recvfrom), a recv with a timeout (poll), an asyncio loop with a reader
on a socket (epoll_wait, the socket in its interest list).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from probes import threads as probe
from probes.sockets import connections_of
from repro.core.harness import thread_facts
from repro.core.thread_state import ThreadState

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]

TARGET = textwrap.dedent("""
    import asyncio, socket, sys, threading
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
    polled = socket.create_connection(srv.getsockname()); polled.settimeout(600)
    blocking = socket.create_connection(srv.getsockname())
    looped = socket.create_connection(srv.getsockname())
    peers = [srv.accept()[0] for _ in range(3)]

    def wait_polled(): polled.recv(10)
    def wait_blocking(): blocking.recv(10)
    def loop():
        async def main():
            loop = asyncio.get_running_loop()
            looped.setblocking(False)
            await loop.sock_recv(looped, 10)
        asyncio.run(main())

    for target, name in ((wait_polled, "polled"), (wait_blocking, "blocking"), (loop, "looped")):
        threading.Thread(target=target, name=name, daemon=True).start()
    lock = threading.Lock(); lock.acquire()
    print(" ".join(str(s.getsockname()[1]) for s in (polled, blocking, looped)), flush=True)
    lock.acquire()
""")


@contextmanager
def target() -> Iterator[tuple[int, dict[str, int]]]:
    """The child's pid and {thread name: the inode of the socket it waits on}."""
    process = subprocess.Popen([sys.executable, "-c", TARGET], stdout=subprocess.PIPE, text=True)
    try:
        ports = [int(p) for p in process.stdout.readline().split()]
        by_port = {int(c.local.rsplit(":", 1)[1]): c.inode for c in connections_of(process.pid)}
        time.sleep(0.3)  # every thread in its wait
        yield process.pid, {name: by_port[port] for name, port in zip(("polled", "blocking", "looped"), ports, strict=True)}
    finally:
        process.kill()
        process.wait(5)
        process.stdout.close()


def named(read, name: str) -> ThreadState:
    return next(t for t in read.threads if t.name == name)


def test_each_thread_shows_where_it_waits_and_on_which_socket():
    with target() as (pid, inodes):
        read = probe.process_threads(pid, 1.0)
    assert read.error is None and read.syscalls_read and read.stacks_by.startswith("py-spy"), read
    main = next(t for t in read.threads if t.tid == pid)
    assert (main.syscall, main.state, main.sockets) == ("futex", "S", []), main
    assert main.stack and main.stack[0].startswith("<module> (<string>:"), main.stack
    polled = named(read, "polled")
    assert polled.syscall == "poll" and polled.sockets == [inodes["polled"]] and not polled.via_epoll, polled
    assert polled.stack[0].startswith("wait_polled (<string>:"), polled.stack
    blocking = named(read, "blocking")
    assert blocking.syscall == "recvfrom" and blocking.sockets == [inodes["blocking"]] and not blocking.via_epoll
    looped = named(read, "looped")
    assert looped.syscall in ("epoll_wait", "epoll_pwait") and looped.via_epoll, looped
    assert inodes["looped"] in looped.sockets, (looped, inodes)
    assert inodes["polled"] not in looped.sockets


def test_without_py_spy_the_threads_still_come_from_proc(monkeypatch):
    monkeypatch.setattr(probe, "py_spy_path", lambda: None)
    with target() as (pid, inodes):
        read = probe.process_threads(pid, 1.0)
    assert read.stacks_by is None and "py-spy is not installed" in read.stacks_error, read
    assert all(t.stack == [] for t in read.threads)
    # /proc alone still says which thread waits on which socket, and in what call.
    waits = sorted((t.syscall, t.sockets[0]) for t in read.threads if t.sockets and not t.via_epoll)
    assert waits == [("poll", inodes["polled"]), ("recvfrom", inodes["blocking"])], read.threads


def test_a_process_that_is_not_python_is_not_asked_for_python_stacks(monkeypatch):
    """`sleep` stands for a Bun or Node harness: py-spy is never run on it, so no failure of its
    stands in the evidence for stacks that were never there to read."""
    asked = []
    monkeypatch.setattr(probe, "python_stacks", lambda pid, **_: asked.append(pid) or ({}, None, "asked"))
    process = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.2)
        read = probe.process_threads(process.pid, 1.0)
        assert probe.runs_python(process.pid) is False and probe.runs_python(os.getpid()) is True
    finally:
        process.kill()
        process.wait(5)
    (only,) = read.threads
    assert only.syscall in ("clock_nanosleep", "nanosleep") and only.name == "sleep", only
    assert asked == [] and read.not_python and read.stacks_by is None and read.stacks_error is None, read
    assert not [f for f in thread_facts([read]) if "Python" in f["signal"]]


def test_a_python_process_py_spy_fails_on_keeps_its_proc_view_and_the_reason(tmp_path, monkeypatch):
    """py-spy refused (as without SYS_PTRACE in a container): the threads from /proc, and why not."""
    refusing = tmp_path / "py-spy"
    refusing.write_text("#!/bin/sh\necho 'Error: Permission Denied: Try running again with elevated permissions' >&2\n"
                        "exit 1\n")
    refusing.chmod(0o755)
    monkeypatch.setattr(probe, "py_spy_path", lambda: str(refusing))
    with target() as (pid, _):
        read = probe.process_threads(pid, 1.0)
    assert read.threads and not read.not_python, read
    assert read.stacks_error == "py-spy failed: Error: Permission Denied: Try running again with elevated permissions"


def test_a_process_gone_is_an_error_recorded_not_raised():
    gone = subprocess.Popen(["true"])
    gone.wait(5)
    read = probe.process_threads(gone.pid, 1.0)
    assert read.threads == [] and read.error == f"pid {gone.pid}: no such process (has it exited?)"


def test_py_spy_is_bounded_in_time(tmp_path, monkeypatch):
    """A py-spy that does not answer is cut at its deadline: the threads still come from /proc."""
    slow = tmp_path / "py-spy"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setattr(probe, "py_spy_path", lambda: str(slow))
    started = time.monotonic()
    read = probe.process_threads(os.getpid(), 1.0, stack_timeout=0.5)
    assert time.monotonic() - started < 5
    assert read.stacks_error == "py-spy did not answer within 0.5 s" and read.threads, read
