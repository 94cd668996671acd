"""CPU per streamed SSE event of the driver on each wire API (--api), side by side in one run.

    python benchmarks/wire_apis.py [--streams 64] [--rounds 4] [--tokens 64] [--repeat 3]

Each API drives the same simulated engine (one process) from its own process, exactly as
`repro run --api X` drives (aiohttp, run log included); runs are interleaved so that a slow minute
of a noisy machine hits them all alike, each figure the median of --repeat runs. An event is what
the API streams per token (a chat chunk, a Messages content_block_delta, a Responses
output_text.delta) plus its few framing events, so the ratio is the cost of the API's reader.
The goal (issue 33): none over 1.5x chat's.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.clients import measured_side_by_side  # noqa: E402

KINDS = {"chat": "ours", "responses": "ours_responses", "messages": "ours_messages"}


def main() -> int:
    started = time.time()
    args, m = measured_side_by_side(tuple(KINDS.values()), __doc__.splitlines()[0])
    base = m["ours"]["cpu_per_1k"]
    print(f"CPU per SSE event by wire API: {args.streams} streams x {args.rounds} rounds x {args.tokens} tokens")
    print(f"({os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}, medians of {args.repeat})")
    print(f"{'--api':<10} {'CPU us/event':>12} {'x chat':>7} {'events/s':>9} {'lag p99 ms':>10} {'rounds':>8}")
    for name, kind in KINDS.items():
        r = m[kind]
        print(f"{name:<10} {r['cpu_per_1k'] * 1000:>12.1f} {r['cpu_per_1k'] / max(1e-9, base):>7.2f} "
              f"{r['events_per_s']:>9} {r['lag_p99_ms']:>10.1f} {r['rounds']:>4}/{args.streams * args.rounds}")
    print(f"elapsed {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
