"""Polling a condition, bounded: for what a server shows some time after it is asked."""

from __future__ import annotations

import time


def wait_for(check, timeout: float = 10.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what} not reached in {timeout:g} s; last: {last!r}")
