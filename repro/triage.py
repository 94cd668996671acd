"""Triage a live hang without generating load: watch every hop for a window, send one canary
per hop, and judge where requests are stuck with the same classify as `repro run`.

Triage cannot see the harness's own stuck request, so it judges the stack as a whole: engines
hung, saturated or losing requests (server side); a hop that fails a fresh request or holds
requests while every engine sits idle (client side, at that hop); or nothing found, which is
itself evidence: every fresh path works, so a harness still stuck is stuck on its own reused
connections (a connection-level wedge).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

import anyio

from probes.sampler import Sampler
from repro.core import events as ev
from repro.core.classify import classify
from repro.core.hop import Hop
from repro.core.verdict import Verdict
from repro.evidence import EvidenceBook
from repro.judge import LiveJudge, fresh_canary


@dataclass
class TriageResult:
    hops: list[Hop]
    latest: dict[str, ev.ProbeSample]  # hop name -> last probe sample
    canaries: dict[str, ev.CanaryResult]  # hop name -> last canary
    verdict: Verdict | None  # None: nothing stuck that triage can see
    ruled_out: list[str]
    window_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "window_s": self.window_s,
            "hops": [{**h.to_dict(), "sample": _builtins(self.latest.get(h.name)),
                      "canary": _builtins(self.canaries.get(h.name))} for h in self.hops],
            "verdicts": [self.verdict.to_dict()] if self.verdict else [],
            "ruled_out": self.ruled_out,
        }


def _builtins(event: ev.ProbeSample | ev.CanaryResult | None) -> dict[str, Any] | None:
    if event is None:
        return None
    payload = event.snapshot if isinstance(event, ev.ProbeSample) else event.outcome
    return {**payload.to_dict(), "t": event.t}


async def triage(hops: list[Hop], *, model: str, window: float = 5.0, interval: float = 1.0,
                 canary_timeout: float = 3.0, api_key: str | None = None) -> TriageResult:
    origin = time.monotonic()
    book = EvidenceBook(hops, stall_after=window)

    def now() -> float:
        return time.monotonic() - origin

    sampler = Sampler(hops, interval=interval, emit=book.add, origin=origin) if any(h.metrics_url for h in hops) else None
    # The live judge's evidence wave, run once: an extra sample and one bounded canary per hop.
    judge = LiveJudge(book, emit=book.add, now=now, sample_all=sampler.sample_now if sampler else None,
                      canary=functools.partial(fresh_canary, model=model, timeout=canary_timeout, api_key=api_key),
                      canary_timeout=canary_timeout)

    async with anyio.create_task_group() as tasks:
        if sampler is not None:
            tasks.start_soon(sampler.run)
        # One canary per hop, in the middle of the window: never more than one per hop per interval.
        await anyio.sleep(window / 2)
        await judge.prepare(now())
        await anyio.sleep(max(0.0, window - now()))
        tasks.cancel_scope.cancel()
    if sampler is not None:
        with anyio.move_on_after(canary_timeout):
            await sampler.sample_now()

    until = now()
    # The hang triage looks at is the stack's, not one of ours: a round that 'stalled' at the
    # window's start, before any byte, on no particular connection.
    stall = ev.RoundStalled(t=0.0, conv=0, round=0, phase="before-first-byte", stalled_for_s=round(until, 3),
                            started_t=0.0, last_progress_t=0.0)
    verdict = classify(book.evidence_for(stall, until=until, driver_in_flight=0))
    latest = {name: samples[-1] for name, samples in book.samples.items() if samples}
    canaries = {name: history[-1] for name, history in book.canaries.items() if history}
    # Every fresh path works and no hop holds anything: nothing triage can pin down.
    nothing_found = verdict.kind == "connection-wedged" and verdict.where == "connection"
    return TriageResult(hops, latest, canaries, None if nothing_found else verdict, verdict.ruled_out, window)
