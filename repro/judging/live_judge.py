"""The live judge: when the driver flags a stall, collect fresh evidence and classify it.

At the moment of the stall, with the stuck stream still open: take an extra probe sample of
every hop, send a fresh-connection canary to every hop (the first hop is what the harness
talks to, the others are reached directly), then classify with the evidence book. Canaries
are shared: when several rounds stall together, each hop still gets one canary per stall
wave, not one per stalled round, so a judge never floods the stack it is diagnosing.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import anyio

from probes.canary import run_canary
from repro.core import events as ev
from repro.core.canary import CanaryOutcome
from repro.core.classify import classify
from repro.core.evidence_book import EvidenceBook, with_client_fate
from repro.core.hop import Hop
from repro.core.verdict import Verdict

SampleAll = Callable[[], Awaitable[None]]


Canary = Callable[[Hop], Awaitable[CanaryOutcome]]


async def fresh_canary(hop: Hop, *, model: str, timeout: float, api_key: str | None) -> CanaryOutcome:
    """One bounded fresh-connection canary to a hop."""
    return await run_canary(hop, model=model, timeout=timeout, api_key=api_key)


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

    async def __call__(self, stall: ev.RoundStalled) -> None:
        async with self._wave_lock:
            # A wave that began while this round was already suspect (prepare) or after it was
            # flagged covers it: canaries are fresh to within their own deadline.
            if self._wave_t < stall.t - self.lead_s - 0.5:
                self._wave_t = self.now()
                await self._collect()
        verdict = classify(self.book.evidence_for(stall, until=self.now(), driver_in_flight=self.driver_in_flight(),
                                                  canaries_since=max(stall.last_progress_t, self._wave_t)))
        self._reached(with_client_fate(verdict, self.book.client_fate(stall)))

    async def judge_failure(self, failure: ev.RoundFailed) -> None:
        """A round that failed is judged like a stall, from an evidence wave begun after it failed
        (or within half a second before: canaries are fresh to within their own deadline)."""
        async with self._wave_lock:
            if self._wave_t < failure.t - 0.5:
                self._wave_t = self.now()
                await self._collect()
        started = failure.t - failure.duration_s
        last_progress = failure.last_progress_t if failure.last_progress_t is not None else started
        self._reached(classify(self.book.evidence_for_failure(
            failure, until=self.now(), driver_in_flight=self.driver_in_flight(),
            canaries_since=max(last_progress, self._wave_t))))

    def _reached(self, verdict: Verdict) -> None:
        self.verdicts.append(verdict)
        self.emit(ev.VerdictReached(t=self.now(), verdict=verdict))
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

    async def _one_canary(self, hop: Hop) -> None:
        started = time.monotonic()
        outcome: CanaryOutcome | None = None
        with anyio.move_on_after(self.canary_timeout + 1.0):
            outcome = await self.canary(hop)
        if outcome is None:  # the canary overran its own deadline: no answer, as far as we know
            outcome = CanaryOutcome(hop=hop.name, url=hop.url, failure="timeout",
                                    error=f"no answer within {time.monotonic() - started:.1f} s")
        self.emit(ev.CanaryResult(t=self.now(), hop=hop.name, outcome=outcome))
