"""The live judge: when the driver flags a stall, collect fresh evidence and classify it.

At the moment of the stall, with the stuck stream still open: take an extra probe sample of
every hop, send a fresh-connection canary to every hop (the first hop is what the harness
talks to, the others are reached directly), then classify with the evidence book. Canaries
are shared: when several rounds stall together, each hop still gets one canary per stall
wave, not one per stalled round, so a judge never floods the stack it is diagnosing.
"""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable

import anyio

from repro import events as ev
from repro.driver import StallReport
from repro.evidence import EvidenceBook, HopInfo
from repro.verdict import Verdict, classify

SampleAll = Callable[[], Awaitable[None]]
Canary = Callable[[HopInfo], Awaitable[dict[str, Any]]]


def probe_hop(hop: HopInfo):
    """The probes' view of a hop (same fields; probes keep their own type to stay standalone)."""
    from probes import Hop

    return Hop(name=hop.name, url=hop.url, metrics_url=hop.metrics_url, role=hop.role)


async def fresh_canary(hop: HopInfo, *, model: str, timeout: float, api_key: str | None) -> dict[str, Any]:
    """One bounded fresh-connection canary to a hop, as the canary dict the verdict reads."""
    from probes import run_canary

    return (await run_canary(probe_hop(hop), model=model, timeout=timeout, api_key=api_key)).to_dict()


class LiveJudge:
    def __init__(
        self,
        book: EvidenceBook,
        *,
        emit: Callable[[ev.Event], None],
        now: Callable[[], float],
        sample_all: SampleAll | None,
        canary: Canary | None,
        on_verdict: Callable[[Verdict], None] = lambda verdict: None,
        canary_timeout: float = 3.0,
        driver_in_flight: Callable[[], int] = lambda: 1,
    ) -> None:
        self.book = book
        self.emit = emit
        self.now = now
        self.sample_all = sample_all
        self.canary = canary
        self.on_verdict = on_verdict
        self.canary_timeout = canary_timeout
        self.driver_in_flight = driver_in_flight
        self.verdicts: list[Verdict] = []
        self._wave_lock = anyio.Lock()
        self._wave_t = float("-inf")  # when the last evidence wave started

    async def __call__(self, report: StallReport) -> None:
        stall = ev.RoundStalled(
            t=report.t, conv=report.conv, round=report.round, phase=report.phase,
            stalled_for_s=report.stalled_for_s, started_t=report.started_t, last_progress_t=report.last_progress_t,
            last_byte_t=report.last_byte_t, local=report.local, reused=report.reused, events=report.events,
        )
        async with self._wave_lock:
            # A wave that began while this round was already suspect (prepare) or after it was
            # flagged covers it: canaries are fresh to within their own deadline.
            if self._wave_t < report.t - self.lead_s - 0.5:
                self._wave_t = self.now()
                await self._collect()
        verdict = classify(self.book.evidence_for(stall, until=self.now(), driver_in_flight=self.driver_in_flight(),
                                                  canaries_since=max(report.last_progress_t, self._wave_t)))
        self.verdicts.append(verdict)
        self.emit(ev.VerdictReached(t=self.now(), data=verdict.to_dict()))
        self.on_verdict(verdict)

    @property
    def lead_s(self) -> float:
        """How long before the stall trigger the driver should call prepare()."""
        return self.canary_timeout + 0.2

    async def prepare(self, t: float) -> None:
        """A round has been silent for most of the trigger: gather evidence now (one wave at a time)."""
        async with self._wave_lock:
            if self._wave_t < t - self.lead_s:
                self._wave_t = self.now()
                await self._collect()

    async def _collect(self) -> None:
        # The extra sample and the canaries run together: the verdict waits for the slower, not the sum.
        async with anyio.create_task_group() as tasks:
            if self.sample_all is not None:
                tasks.start_soon(self._sample_bounded)
            if self.canary is not None:
                for hop in self.book.hops:
                    tasks.start_soon(self._one_canary, hop)

    async def _sample_bounded(self) -> None:
        with anyio.move_on_after(self.canary_timeout):
            await self.sample_all()

    async def _one_canary(self, hop: HopInfo) -> None:
        started = time.monotonic()
        outcome: dict[str, Any]
        with anyio.move_on_after(self.canary_timeout + 1.0) as scope:
            outcome = await self.canary(hop)
        if scope.cancelled_caught:
            outcome = {"ok": False, "error": f"no answer within {time.monotonic() - started:.1f} s", "url": hop.url}
        self.emit(ev.CanaryResult(t=self.now(), hop=hop.name, data=outcome))
