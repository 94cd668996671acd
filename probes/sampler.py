"""Sample every hop on a fixed cadence during a run and emit each sample as a ProbeSample event.

One loop per hop, so a hop that hangs for its whole deadline does not delay the others; every
scrape is bounded by min(2 x interval, 2 s). Samples carry counter rates (from the previous
readable sample of the same hop) and the staleness judgement of probes/staleness.py.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio
import httpx

from probes.scrape import new_client, scrape
from probes.staleness import STALE_AFTER_SAMPLES, counter_rate, stale_gauges
from repro.core.events import ProbeSample
from repro.core.hop import Hop
from repro.core.snapshot import Snapshot


class Sampler:
    def __init__(self, hops: list[Hop], *, interval: float, emit: Callable[[Any], None], origin: float) -> None:
        if interval <= 0:
            raise ValueError(f"probe interval must be > 0 s, got {interval!r}")
        self.hops = [hop for hop in hops if hop.metrics_url]  # a hop with no page is never read
        self.interval = interval
        self.emit = emit
        self.origin = origin
        self.scrape_timeout = min(interval * 2, 2.0)
        # Readable samples of each hop as (monotonic time, dict), for rates and staleness.
        self._history: dict[str, deque[tuple[float, dict[str, Any]]]] = {
            hop.name: deque(maxlen=STALE_AFTER_SAMPLES + 1) for hop in self.hops
        }
        self._client: httpx.AsyncClient | None = None

    async def run(self) -> None:
        """Sample forever (the caller cancels); the shared HTTP client is closed on the way out."""
        self._client = new_client(pool=max(1, len(self.hops)))
        try:
            async with anyio.create_task_group() as tasks:
                for hop in self.hops:
                    tasks.start_soon(self._loop, hop)
        finally:
            client, self._client = self._client, None
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def sample_now(self) -> None:
        """One extra sample of every hop, now (the judge calls this when a round stalls)."""
        if self._client is not None:
            await self._sample_all(self._client)
            return
        client = new_client(pool=max(1, len(self.hops)))
        try:
            await self._sample_all(client)
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def _sample_all(self, client: httpx.AsyncClient) -> None:
        async with anyio.create_task_group() as tasks:
            for hop in self.hops:
                tasks.start_soon(self._sample, hop, client)

    async def _loop(self, hop: Hop) -> None:
        next_at = time.monotonic()
        while True:
            await self._sample(hop, self._client)
            # Fixed cadence; ticks missed while a slow scrape ran are skipped, not bunched up.
            next_at += self.interval
            now = time.monotonic()
            if next_at < now:
                next_at = now + self.interval - (now - next_at) % self.interval
            await anyio.sleep(next_at - now)

    async def _sample(self, hop: Hop, client: httpx.AsyncClient | None) -> None:
        snapshot = await scrape(hop, timeout=self.scrape_timeout, client=client)
        now = time.monotonic()
        self.emit(ProbeSample(t=now - self.origin, hop=hop.name, snapshot=self.annotate(hop.name, snapshot, now)))

    def annotate(self, name: str, snapshot: Snapshot, now: float) -> Snapshot:
        """Add rates and staleness from this hop's history (pure given the history; tested directly)."""
        history = self._history.setdefault(name, deque(maxlen=STALE_AFTER_SAMPLES + 1))
        if snapshot.ok:
            previous = history[-1] if history else None
            if previous is not None and previous[0] < now:
                before, seconds = previous[1], now - previous[0]
                current = snapshot.to_dict()
                snapshot.gen_tokens_per_s = counter_rate(before, current, "gen_tokens_total", seconds)
                snapshot.itl_per_s = counter_rate(before, current, "itl_count", seconds)
        data = snapshot.to_dict()
        if snapshot.ok:
            if history and history[-1][0] > now:
                return snapshot  # an out-of-order sample (sample_now raced the loop): leave the history alone
            history.append((now, data))
            data["stale"] = snapshot.stale = stale_gauges([d for _, d in history])
        return snapshot
