"""Polling a condition, bounded: for what a server shows some time after it is asked."""

from __future__ import annotations

import time


def wait_for(check, timeout: float = 10.0, what: str = "condition", every: float = 0.2):
    """`check()`'s first truthy value, polled every `every` seconds; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"{what} not reached in {timeout:g} s; last: {last!r}")
