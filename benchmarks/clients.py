"""CPU per SSE event of each of the driver's clients (--client), side by side in one run.

    python benchmarks/clients.py [--streams 64] [--rounds 4] [--tokens 64] [--repeat 3]

Each client drives the same simulated engine (one process) from its own process, exactly as
`repro run --client X` drives (run log included); runs are interleaved so that a slow minute of
a noisy machine hits them all alike, and each figure is the median of --repeat runs. CPU is the
client process's own. The sync openai client runs a thread per conversation in flight.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.run import measure  # noqa: E402
from repro.sim import SimConfig, start_sim_process  # noqa: E402

KINDS = {"aiohttp": "ours", "httpx": "ours_httpx", "openai-async": "ours_openai_async", "openai": "ours_openai"}


def measured_side_by_side(kinds: tuple[str, ...], description: str) -> tuple[argparse.Namespace, dict]:
    """The flags of a side-by-side driver benchmark, and each kind measured against one simulated
    engine (benchmarks/run.py's measure: interleaved runs, medians of --repeat)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    config = SimConfig(ttft=0.005, itl=0.005, max_running=4096, max_tokens_default=args.tokens)
    with start_sim_process(config) as sim:
        return args, measure(kinds, sim.url, args.streams, args.rounds, args.tokens, args.repeat)


def main() -> int:
    started = time.time()
    args, m = measured_side_by_side(tuple(KINDS.values()), __doc__.splitlines()[0])
    base = m["ours"]["cpu_per_1k"]
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"CPU per SSE event by client: {args.streams} streams x {args.rounds} rounds x {args.tokens} "
                        f"tokens ({os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}, medians of {args.repeat})")
    for col in ("--client", "CPU us/event", "x aiohttp", "events/s", "CPU share", "loop lag p99 ms", "rounds"):
        table.add_column(col, justify="right")
    for name, kind in KINDS.items():
        r = m[kind]
        table.add_row(name, f"{r['cpu_per_1k'] * 1000:.1f}", f"{r['cpu_per_1k'] / max(1e-9, base):.2f}",
                      str(r["events_per_s"]), f"{r['cpu_share']:.2f}", f"{r['lag_p99_ms']:.1f}",
                      f"{r['rounds']}/{args.streams * args.rounds}")
    Console(width=140).print(table)
    print(f"elapsed {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
