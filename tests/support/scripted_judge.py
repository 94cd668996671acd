"""A judge that records what the driver and the watchdog ask of it (repro.load.watchdog.Judge)."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

from repro.core import events as ev


class ScriptedJudge:
    """Records each call with its time on the run's clock (`now`, set by `drive`); `stalled` and
    `failed` take as long as they are told."""

    def __init__(self, *, stalled_s: float = 0.0, failed_s: float = 0.0, lead_s: float = 0.0) -> None:
        self.lead_s = lead_s
        self.now: Callable[[], float] = time.monotonic
        self.stalled_s = stalled_s
        self.failed_s = failed_s
        self.calls: list[tuple[str, float, object]] = []

    async def prepare(self, t: float) -> None:
        self.calls.append(("prepare", self.now(), t))

    async def stalled(self, stall: ev.RoundStalled) -> None:
        self.calls.append(("stalled", self.now(), stall))
        await anyio.sleep(self.stalled_s)
        self.calls.append(("stalled-returned", self.now(), stall))

    async def failed(self, failure: ev.RoundFailed) -> None:
        self.calls.append(("failed", self.now(), failure))
        await anyio.sleep(self.failed_s)
        self.calls.append(("failed-returned", self.now(), failure))

    def of(self, name: str) -> list:
        return [what for call, _, what in self.calls if call == name]
