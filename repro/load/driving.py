"""What a run or a bench drives its rounds with, declared once: the in-process Driver
(repro/load/driver.py) and the ShardedDriver over worker processes (repro/load/shards.py) both
have this shape, so a session picks one at one place and uses either the same way after."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from repro.load.round import RoundOutcome


@runtime_checkable  # so a test can hold both drivers to it
class RoundDriver(Protocol):
    # Set to stop starting rounds (the ShardedDriver also cuts those in flight, as a Ctrl-C does).
    stop_requested: bool

    @property
    def in_flight(self) -> Mapping[tuple[int, int], object]:
        """The rounds started and not ended, by (conversation, round)."""

    @property
    def outcomes(self) -> list[RoundOutcome]:
        """Every round's outcome so far."""

    async def run(self) -> list[RoundOutcome]:
        """Drive the conversations to their end (or a stop); their outcomes."""

    def cpu_seconds(self) -> list[float | None]:
        """CPU seconds so far of each process driving rounds besides the caller's own (none for
        the in-process Driver), None where not read."""
