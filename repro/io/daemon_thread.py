"""A blocking call awaited from the event loop in a daemon thread of its own, so that a signal
that stops the loop never waits on it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel


async def in_daemon_thread[T](blocking: Callable[[str], T], arg: str) -> T:
    """`blocking(arg)` in a daemon thread of its own, awaited. Cancelled (a signal), it is
    abandoned and the process exits at once: anyio's worker threads are not daemons, so one still
    in a blocking call (a model lookup, up to --connect-timeout) would hold the exit until its
    own deadline passed."""
    done = anyio.Event()
    outcome: list[tuple[bool, Any]] = []
    token = anyio.lowlevel.current_token()

    def run() -> None:
        try:
            outcome.append((True, blocking(arg)))
        except BaseException as exc:  # noqa: BLE001  (handed to the awaiting task, raised there)
            outcome.append((False, exc))
        with contextlib.suppress(Exception):  # the loop may be gone (the caller stopped): nobody waits
            anyio.from_thread.run_sync(done.set, token=token)

    threading.Thread(target=run, name=f"repro {getattr(blocking, '__name__', 'call')}", daemon=True).start()
    await done.wait()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value
