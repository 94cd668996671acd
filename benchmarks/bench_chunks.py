"""The chunk reader's hot path, before and after a change: plain content chunks through `feed`.

    .venv/bin/python benchmarks/bench_chunks.py                 # the working tree against HEAD
    .venv/bin/python benchmarks/bench_chunks.py --against REV --repeat 9

Both versions of repro/core/openai_chunks.py (REV's read with `git show`, loaded as a module of
its own) decode the same events: SGLang-shaped content chunks, one or four per read as the driver
sees them. They run alternately, so a noisy machine slows both alike; the fastest and the median
ns per event are printed, and a tool-call stream through the working tree for comparison.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from repro.core import openai_chunks  # noqa: E402
from repro.core.sse import SSEEvent  # noqa: E402


def module_at(rev: str):
    source = subprocess.run(["git", "show", f"{rev}:repro/core/openai_chunks.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader(f"openai_chunks_{rev}", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # msgspec resolves the Structs' annotations through it
    exec(compile(source, f"{rev}:repro/core/openai_chunks.py", "exec"), module.__dict__)
    return module


def content_events(n: int) -> list[SSEEvent]:
    return [SSEEvent(json.dumps({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": {"content": f"word{i} "}, "finish_reason": None}]}).encode())
        for i in range(n)]


def tool_events(n: int) -> list[SSEEvent]:
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": ""}}
    events = [first] + [{"index": 0, "function": {"arguments": f"ab{i}"}} for i in range(n - 1)]
    return [SSEEvent(json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                 "choices": [{"index": 0, "delta": {"tool_calls": [d]}, "finish_reason": None}]}).encode())
            for d in events]


def ns_per_event(module, events: list[SSEEvent], per_read: int, streams: int = 50) -> float:
    reads = [events[i:i + per_read] for i in range(0, len(events), per_read)]
    start = time.perf_counter_ns()
    for _ in range(streams):
        feed = module.ChunkReader().feed
        for read in reads:
            feed(read)
    return (time.perf_counter_ns() - start) / (streams * len(events))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="git revision to compare with (default HEAD)")
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    before, after = module_at(args.against), openai_chunks
    events = content_events(256)
    rows = []
    for per_read in (1, 4):
        runs: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(args.repeat):
            runs["before"].append(ns_per_event(before, events, per_read))
            runs["after"].append(ns_per_event(after, events, per_read))
        b, a = statistics.median(runs["before"]), statistics.median(runs["after"])
        # The fastest run is the one least disturbed by other processes: the fairest comparison
        # of two code paths on a shared machine; the medians show the spread.
        fb, fa = min(runs["before"]), min(runs["after"])
        rows.append({"path": "content", "events_per_read": per_read, "before_min_ns": round(fb),
                     "after_min_ns": round(fa), "min_ratio": round(fa / fb, 3), "before_median_ns": round(b),
                     "after_median_ns": round(a), "median_ratio": round(a / b, 3)})
    if hasattr(after.ChunkReader(), "tool_calls"):
        tools = tool_events(256)
        rows.append({"path": "tool_calls (after only)", "events_per_read": 1,
                     "after_min_ns": round(min(ns_per_event(after, tools, 1) for _ in range(args.repeat)))})
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
