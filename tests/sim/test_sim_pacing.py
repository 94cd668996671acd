"""The simulated engine paces decode steps by deadline, so a small ITL difference is the difference
it produces: --itl 0.0089 decodes ~11% faster than --itl 0.010 (an A/B of two engines 12% apart must
price about 12%, not the ~1% that sleeping a full step after each wake-up gave). The two rates are
measured side by side in one test and compared as a ratio: a noisy machine slows both alike."""

from __future__ import annotations

import asyncio
import time

from repro.sim.config import SimConfig
from repro.sim.engine import Engine, Request

STEPS = 150


async def seconds_per_step(itl: float) -> float:
    engine = Engine(SimConfig(itl=itl, ttft=0.0))
    loop = asyncio.create_task(engine.run())
    try:
        request = Request("r", 1, STEPS + 1, 0, time.monotonic())
        engine.submit(request)
        async with asyncio.timeout(STEPS * itl * 10 + 5):
            while request.first_token_at is None:
                await request.wake.wait()
                request.wake.clear()
            first = time.monotonic()
            while not request.finished:
                await request.wake.wait()
                request.wake.clear()
        return (time.monotonic() - first) / STEPS
    finally:
        engine.close()
        loop.cancel()


def test_an_itl_11_percent_shorter_decodes_about_11_percent_faster():
    async def both() -> tuple[float, float]:
        # Interleaved twice (A B B A): a drift in the machine's load hits both sides alike.
        a1 = await seconds_per_step(0.010)
        b1 = await seconds_per_step(0.0089)
        b2 = await seconds_per_step(0.0089)
        a2 = await seconds_per_step(0.010)
        return (a1 + a2) / 2, (b1 + b2) / 2

    slow, fast = asyncio.run(both())
    # 0.0089 / 0.010 = 0.89. Before deadline pacing both ran at ~10.1 ms (ratio ~0.99).
    assert 0.85 < fast / slow < 0.93, (slow, fast)
    assert slow < 0.0115, f"a 10 ms step took {slow * 1000:.2f} ms on average"
