"""The evidence wave, with fake samplers and canaries: one wave at a time, shared by the rounds that
ask together; the sample and the canaries run together; a canary that overruns is a timeout."""

from __future__ import annotations

import anyio
import pytest

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.hop import Hop
from repro.live.evidence_wave import EvidenceWave, default_canary_timeout

HOPS = [Hop("proxy", "http://127.0.0.1:9", role="proxy"), Hop("engine-0", "http://127.0.0.1:10")]


class Clock:
    def __init__(self) -> None:
        self.origin = anyio.current_time()

    def __call__(self) -> float:
        return anyio.current_time() - self.origin


def wave_with(events: list[ev.Event], *, canary_s: float = 0.05, sample_s: float = 0.05,
              log: list[tuple[str, str, float]] | None = None, canary_timeout: float = 1.0) -> EvidenceWave:
    now = Clock()

    async def canary(hop: Hop) -> CanaryOutcome:
        if log is not None:
            log.append(("canary", "start", now()))
        await anyio.sleep(canary_s)
        return CanaryOutcome(hop=hop.name, url=hop.url, status=200)

    async def sample_all() -> None:
        if log is not None:
            log.append(("sample", "start", now()))
        await anyio.sleep(sample_s)
        if log is not None:
            log.append(("sample", "end", now()))

    return EvidenceWave(HOPS, emit=events.append, now=now, sample_all=sample_all, canary=canary,
                        canary_timeout=canary_timeout)


@pytest.mark.anyio
async def test_rounds_that_ask_together_share_one_wave():
    events: list[ev.Event] = []
    wave = wave_with(events)
    async with anyio.create_task_group() as tasks:
        for _ in range(5):
            tasks.start_soon(lambda: wave.gather(since=0.0))
    assert sorted(e.hop for e in events) == ["engine-0", "proxy"]  # one canary per hop, not per round
    first = wave.started_t
    await wave.gather(since=first)  # a wave that started at `since` covers it
    assert len(events) == 2
    await wave.gather(since=first + 0.001)  # one that started earlier does not
    assert len(events) == 4 and wave.started_t > first


@pytest.mark.anyio
async def test_the_sample_and_the_canaries_run_together():
    log: list[tuple[str, str, float]] = []
    wave = wave_with([], canary_s=0.2, sample_s=0.2, log=log)
    await wave.gather(since=0.0)
    sample_end = next(t for what, edge, t in log if (what, edge) == ("sample", "end"))
    assert all(t < sample_end for what, edge, t in log if (what, edge) == ("canary", "start"))


@pytest.mark.anyio
async def test_a_canary_that_overruns_its_deadline_is_recorded_as_a_timeout():
    events: list[ev.Event] = []
    wave = wave_with(events, canary_s=10.0, canary_timeout=0.1)
    with anyio.fail_after(5):
        await wave.gather(since=0.0)
    assert {e.hop: (e.outcome.ok, e.outcome.failure) for e in events} == {
        "proxy": (False, "timeout"), "engine-0": (False, "timeout")}


def test_the_default_canary_timeout_fits_in_the_verdict_budget():
    assert default_canary_timeout(10.0, 0.5) == 1.0  # at least 1 s
    assert default_canary_timeout(10.0, 2.0) == 4.0  # two probe intervals
    assert default_canary_timeout(0.2, 0.1) == 0.2  # no more than the trigger's half plus two intervals, less 0.1
