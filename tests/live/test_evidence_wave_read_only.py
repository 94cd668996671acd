"""An evidence wave sends no canary to a hop read by its metrics only (Hop.canary False: a router
found through its metrics port): a chat request there would fail and read as the hop failing."""

from __future__ import annotations

import anyio
import pytest

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.hop import Hop
from repro.live.evidence_wave import EvidenceWave

pytestmark = pytest.mark.timeout(30)


def test_a_read_only_hop_gets_no_canary_and_the_others_do():
    hops = [Hop("router", "http://127.0.0.1:29000", role="router", canary=False), Hop("engine-0", "http://127.0.0.1:1")]
    asked: list[str] = []
    emitted: list[ev.Event] = []

    async def canary(hop: Hop) -> CanaryOutcome:
        asked.append(hop.name)
        return CanaryOutcome(hop=hop.name, url=hop.url, ok=True, total_s=0.01)

    wave = EvidenceWave(hops, emit=emitted.append, now=lambda: 1.0, sample_all=None, canary=canary, canary_timeout=1.0)
    anyio.run(lambda: wave.gather(since=0.0))
    assert asked == ["engine-0"]
    assert [e.hop for e in emitted if isinstance(e, ev.CanaryResult)] == ["engine-0"]
