"""Faults applied from outside while a scenario runs, timed from the moment its stack is up
(`Scenario.action_after`), and undone (SIGCONT, sockets closed) before the stack is torn down.

A part an action reaches is anything with `pids()`, `children()`, `stop()` and `url`: a real
proxy (repro.lab.stacks.Proxy), the engine process (EngineProcess), or the run's own fault proxy.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from repro.lab.stacks import signal_pids, slow_upload

# What a timed action does to a part of the stack (a proxy by its kind, or "engine-0", or the
# injected fault proxy "proxy"): SIGSTOP all its processes; SIGSTOP only its per-connection
# children or workers; stop it (its listener dies); open a request that sends its headers and
# then nothing more (a slow client holding one of the proxy's server slots).
ACTIONS = ("freeze", "freeze-children", "stop", "slow-upload")


@dataclass
class EngineProcess:
    """The engine process as an action's target: one process, no children."""

    sim: Any

    def pids(self) -> list[int]:
        return [self.sim.process.pid] if self.sim.process.poll() is None else []

    def children(self) -> list[int]:
        return []

    def stop(self) -> None:
        self.sim.stop()


class TimedAction:
    """One action ("verb part") fired once after a delay, and what undoes it, run once the
    scenario's run is over (or failed)."""

    def __init__(self, delay: float, action: str) -> None:
        self.delay, self.action = delay, action
        self._lock = threading.Lock()
        self._done = False
        self._undo_steps: list[Callable[[], None]] = []
        self._timer: threading.Timer | None = None
        self.error: str | None = None  # the action raised: the scenario did not run as written

    def start(self, parts: dict[str, Any]) -> None:
        """Fire the action on one of `parts` (by name) after the delay, from a timer thread."""
        def fire() -> None:
            with self._lock:
                if not self._done:
                    try:
                        self._apply(parts)
                    except Exception as exc:
                        self.error = f"{type(exc).__name__}: {exc}"

        self._timer = threading.Timer(self.delay, fire)
        self._timer.daemon = True
        self._timer.start()

    def undo(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:  # an action under way finishes first; none starts after this
            self._done = True
        for step in reversed(self._undo_steps):
            with contextlib.suppress(Exception):
                step()

    def _apply(self, parts: dict[str, Any]) -> None:
        verb, _, name = self.action.partition(" ")
        target = parts.get(name)
        if target is None:
            raise ValueError(f"action {self.action!r}: no part named {name!r} (have {', '.join(sorted(parts))})")
        if verb in ("freeze", "freeze-children"):
            pids = target.children() if verb == "freeze-children" else target.pids()
            self._undo_steps.append(lambda: signal_pids(pids, signal.SIGCONT))
            signal_pids(pids, signal.SIGSTOP)
        elif verb == "stop":
            target.stop()
        elif verb == "slow-upload":
            sock: socket.socket = slow_upload(target.url)
            self._undo_steps.append(sock.close)
