"""The simulated engine's batch-size-dependent decode step, measured: one setting, two sims.

    .venv/bin/python benchmarks/decode_curve.py [--seconds 6] [--concurrency 32,48,64,80,96]

Starts two simulated engines that differ only in SGLang's `--cuda-graph-max-bs` (48, then 64:
batches above it run without CUDA graphs, each step 1.13x slower), with a decode step that
grows with the batch (20 ms + 0.2 ms per request + 2 ms per wave of 16 requests) and room for
128 running requests. Then, for each concurrency N, runs a closed loop of N clients (each sends
its next request as soon as the last answer arrived, 64 tokens each, non-streamed so the client
side stays cheap) for a few seconds against each sim (A-B-B-A) and prints decoded tokens per second
and the gain of 64 over 48: a gain between the two values (where only one of them runs graphed
batches) and none below or above, as in the incident where this setting was reverted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from repro.sim import SimConfig, start_sim_process  # noqa: E402

CURVE = dict(itl=0.020, itl_per_request=0.0002, wave_size=16, wave_step=0.002, max_running=128)
MAX_TOKENS = 64


async def closed_loop(url: str, concurrency: int, seconds: float, warmup: float = 1.5) -> float:
    """Tokens per second the engine decoded over `seconds` (its own counter, read from /sim/state
    before and after: exact, where counting finished requests would quantize), with `concurrency`
    clients, started spread over the first second so that they do not finish in lockstep."""
    body = {"model": "sim-model", "max_tokens": MAX_TOKENS, "messages": [{"role": "user", "content": "hi"}]}
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=concurrency + 1, max_keepalive_connections=concurrency + 1)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits, trust_env=False) as client:
        async def one_client(index: int) -> None:
            await asyncio.sleep(index / concurrency)
            while not stop.is_set():
                await client.post("/v1/chat/completions", json=body)

        async def tokens() -> tuple[float, int]:
            state = (await client.get("/sim/state")).json()
            return time.monotonic(), state["generation_tokens_total"]

        clients = [asyncio.ensure_future(one_client(i)) for i in range(concurrency)]
        await asyncio.sleep(warmup)
        t0, n0 = await tokens()
        await asyncio.sleep(seconds)
        t1, n1 = await tokens()
        stop.set()
        await asyncio.gather(*clients)
    return (n1 - n0) / (t1 - t0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--concurrency", default="32,48,64,80,96")
    args = parser.parse_args()
    levels = [int(n) for n in args.concurrency.split(",")]
    results: dict[int, dict[str, float]] = {n: {} for n in levels}
    sims = {setting: start_sim_process(SimConfig(cuda_graph_max_bs=setting, **CURVE)) for setting in (48, 64)}
    try:
        for n in levels:
            # A-B-B-A: load from other processes on the machine drifts; the order cancels a linear drift.
            samples: dict[int, list[float]] = {48: [], 64: []}
            for setting in (48, 64, 64, 48):
                samples[setting].append(asyncio.run(closed_loop(sims[setting].url, n, args.seconds)))
            for setting, values in samples.items():
                results[n][str(setting)] = round(sum(values) / len(values), 1)
    finally:
        for sim in sims.values():
            sim.stop()
    rows = [{"concurrency": n, "tok_s_cuda_graph_max_bs_48": r["48"], "tok_s_cuda_graph_max_bs_64": r["64"],
             "gain_pct": round(100 * (r["64"] / r["48"] - 1), 1)} for n, r in results.items()]
    print(json.dumps({"curve": CURVE, "max_tokens": MAX_TOKENS, "seconds": args.seconds, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
