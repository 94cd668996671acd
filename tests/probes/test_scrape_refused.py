"""probes.scrape.refused reads a refusal from the exception's class or errno, wherever the client
library put it in the chain, and never from the message: a message that merely says "Connection
refused" is not a refusal (no socket-level evidence of one). The real sockets' cases are in
test_probe_network.py (a refused port through httpx and the canary)."""

from __future__ import annotations

import errno

from probes.scrape import connect_reason, refused


def wrapped(inner: BaseException, outer: BaseException) -> BaseException:
    outer.__cause__ = inner
    return outer


def test_a_refusal_is_found_in_the_cause_chain_and_in_exception_groups():
    # anyio's happy eyeballs: OSError("All connection attempts failed") from a group of attempts.
    group = ExceptionGroup("multiple connection attempts failed",
                           [TimeoutError("slow"), ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed")])
    assert refused(wrapped(group, OSError("All connection attempts failed")))
    assert refused(wrapped(ConnectionRefusedError(errno.ECONNREFUSED, "x"), RuntimeError("wrapped")))


def test_an_oserror_with_the_refusal_errno_is_a_refusal_whatever_its_class():
    class ConnectorError(OSError):  # aiohttp's ClientConnectorError: its own class, the socket's errno
        pass

    error = ConnectorError()
    error.errno = errno.ECONNREFUSED
    assert refused(error)
    assert connect_reason(error) == "connection refused"


def test_a_message_that_only_says_refused_is_not_a_refusal():
    for exc in (OSError("Connection refused"), RuntimeError("[Errno 111] Connection refused"),
                OSError(errno.ECONNRESET, "Connection reset by peer")):
        assert not refused(exc), exc
    assert connect_reason(OSError("Connection  refused\n by  a proxy")) == "Connection refused by a proxy"
