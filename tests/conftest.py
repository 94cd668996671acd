"""Suite-wide fixtures, and the guard that keeps the fast set socket-free.

A test that opens a socket, binds a port or starts a process carries the `network` marker.
When a run deselects those (`-m "not network"`, `make test-fast`), every socket connect or bind
and every new process raises instead, and the test that tried fails, even if the code under test
caught the error: an unmarked test that needs the network fails loudly instead of slipping into
the fast set. socket.socketpair() stays allowed: asyncio's event loop wakes itself up through one.
"""

from __future__ import annotations

import os
import socket
import subprocess

import pytest
from _pytest.mark.expression import Expression  # how `-m` itself reads its expression


class NetworkUsed(RuntimeError):
    """A test outside the `network` marker opened a socket or started a process."""


_used: list[str] = []  # what the running test tried, reported at its teardown
_replaced: list[tuple[object, str, object]] = []  # (owner, name, original), put back at the end of the run


def _network_deselected(config: pytest.Config) -> bool:
    """True when a test marked `network` alone is left out by this run's `-m`."""
    expression = config.getoption("markexpr")
    return bool(expression) and not Expression.compile(expression).evaluate(lambda name, **_: name == "network")


def _refuse(what: str):
    def refused(*args, **kwargs):
        _used.append(what)
        raise NetworkUsed(f"{what} in a test without the `network` marker")

    return refused


def pytest_configure(config: pytest.Config) -> None:
    if not _network_deselected(config):
        return
    # Process-wide, from collection on: module-scoped fixtures and server threads are caught too.
    for owner, name, what in [(socket.socket, "connect", "socket connect"),
                              (socket.socket, "connect_ex", "socket connect"),
                              (socket.socket, "bind", "socket bind"),
                              (subprocess.Popen, "_execute_child", "a child process"),
                              (os, "fork", "a forked process"),
                              (os, "posix_spawn", "a spawned process"),
                              (os, "posix_spawnp", "a spawned process"),
                              (os, "system", "a shell command")]:
        _replaced.append((owner, name, getattr(owner, name)))
        setattr(owner, name, _refuse(what))


def pytest_unconfigure(config: pytest.Config) -> None:
    while _replaced:  # a pytest run inside this process (pytester) leaves the outer run as it was
        owner, name, original = _replaced.pop()
        setattr(owner, name, original)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _used.clear()  # before any of the item's fixtures, module-scoped ones included


@pytest.fixture(autouse=True)
def _network_guard():
    yield
    if _used:
        tried = ", ".join(dict.fromkeys(_used))
        pytest.fail(f"this test used {tried} but is not marked `network` (pytest.mark.network)", pytrace=False)


@pytest.fixture
def anyio_backend():
    return "asyncio"
