"""An evidence wave: fresh evidence about every hop at once, for judging a round (or a stack) now.

A wave is an extra probe sample of every hop and a fresh-connection canary to every hop (the
first hop is what the harness talks to, the others are reached directly), run together so
that the wave takes as long as the slower of them, not their sum, each bounded by the canary
deadline. Waves are shared: one runs at a time, and a round that asks for evidence while a
recent enough wave has run (or is running) gets that one, so when several rounds stall
together each hop still gets one canary per wave, not one per stalled round: a judge never
floods the stack it is diagnosing. `repro run` and `repro bench` gather waves through the live
judge; `repro triage` gathers one itself.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Sequence

import anyio

from probes.canary import run_canary
from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.hop import Hop
from repro.core.wire_api import Api

SampleAll = Callable[[], Awaitable[None]]
Canary = Callable[[Hop], Awaitable[CanaryOutcome]]


def fresh_canaries(*, model: str, timeout: float, api_key: str | None, api: Api = "chat") -> Canary:
    """The canary of a wave: one bounded fresh-connection request to a hop (probes/canary.py), on
    the wire API the judged traffic speaks (a messages run is judged by messages canaries)."""
    return functools.partial(run_canary, model=model, timeout=timeout, api_key=api_key, api=api)


def default_canary_timeout(stall_after: float, probe_interval: float) -> float:
    """Two probe intervals (at least 1 s), but short enough that an evidence wave started
    halfway to the trigger ends within the verdict budget: the trigger plus two intervals."""
    interval = probe_interval or 0.5
    return round(min(max(1.0, 2 * interval), stall_after / 2 + 2 * interval - 0.1), 3)


class EvidenceWave:
    """Gathers waves for a stack's hops; each canary's answer is emitted as an ev.CanaryResult
    and each sample by `sample_all` itself (into the evidence book, through the caller's emit)."""

    def __init__(self, hops: Sequence[Hop], *, emit: Callable[[ev.Event], None], now: Callable[[], float],
                 sample_all: SampleAll | None, canary: Canary | None, canary_timeout: float) -> None:
        self.hops = list(hops)
        self.emit = emit
        self.now = now
        self.sample_all = sample_all
        self.canary = canary
        self.canary_timeout = canary_timeout
        self.started_t = float("-inf")  # when the last wave started
        self._one_at_a_time = anyio.Lock()

    async def gather(self, *, since: float) -> None:
        """Return once a wave that started at `since` or later has ended: the one running when
        called (waited for), or a new one when the last started earlier."""
        async with self._one_at_a_time:
            if self.started_t < since:
                self.started_t = self.now()
                await self._collect()

    async def _collect(self) -> None:
        # The extra sample and the canaries run together: the wave waits for the slower, not the sum.
        async with anyio.create_task_group() as tasks:
            if self.sample_all is not None:
                tasks.start_soon(self._sample_bounded)
            if self.canary is not None:
                for hop in self.hops:
                    # A hop read by its metrics only (Hop.canary False: its URL is where it was
                    # found, not an API) is sent none: a chat request to a metrics port would
                    # fail, and read as the hop failing.
                    if hop.canary:
                        tasks.start_soon(self._one_canary, hop)

    async def _sample_bounded(self) -> None:
        with anyio.move_on_after(self.canary_timeout):
            await self.sample_all()

    async def _one_canary(self, hop: Hop) -> None:
        started = time.monotonic()
        outcome: CanaryOutcome | None = None
        with anyio.move_on_after(self.canary_timeout + 1.0):
            outcome = await self.canary(hop)
        if outcome is None:  # the canary overran its own deadline: no answer, as far as we know
            outcome = CanaryOutcome(hop=hop.name, url=hop.url, failure="timeout",
                                    error=f"no answer within {time.monotonic() - started:.1f} s")
        self.emit(ev.CanaryResult(t=self.now(), hop=hop.name, outcome=outcome))
