"""The rotating run log (repro.io.rotating_log) against the plain one (repro.io.runlog.RunLogWriter),
side by side in one run: what rotation costs a writer, and what a range read saves a reader.

    python benchmarks/runlog_rotation.py             # a table
    python benchmarks/runlog_rotation.py --json
    python benchmarks/runlog_rotation.py --quick     # 200k events, one repeat

1. Writing: the same events (a run log's mix: mostly SSE reads, a round's start and end, probe
   samples) written through a plain RunLogWriter, a RotatingRunLog with its defaults (64 MiB
   segments, a new one every hour: a benchmark this short never rotates, a busy watch every few
   minutes) and one with 1 MiB segments and a 4 MiB bound (rotates and deletes every ~9000
   events), on the real clock, interleaved `--repeat` times, medians: events/s, the ratio to the
   plain writer, the slowest write() that did not rotate (the machine's noise: a page-cache
   write, the scheduler) and the slowest that did (closing a segment, opening the next, copying
   the header, listing the folder, deleting the expired ones), each the worst of the repeats.
2. Reading: a folder of segments holding `--events` events over a simulated day; one hour read
   with read_range against the whole folder read with read_range(None, None).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from repro.core import events as ev  # noqa: E402
from repro.core.hop import Hop  # noqa: E402
from repro.core.snapshot import Snapshot  # noqa: E402
from repro.io.rotating_log import MIB, RotatingRunLog, list_segments, read_range  # noqa: E402
from repro.io.runlog import RunLogWriter  # noqa: E402

WALL0 = 1796464800.0  # 2026-12-05T10:00:00Z


def run_events(count: int, seconds: float) -> list[ev.Event]:
    """`count` events spread over `seconds`: per round a start, 30 SSE reads, an end; a probe sample every 50."""
    header = ev.RunStarted(t=0.0, config={"target": "http://127.0.0.1:1/v1", "model": "m", "stall_after": 10.0},
                           versions={"python": "3"}, monotonic_origin=1000.0, wall_clock_origin=WALL0,
                           hops=[Hop("engine-0", "http://127.0.0.1:2", "http://127.0.0.1:2/metrics", "engine")])
    events: list[ev.Event] = [header]
    step = seconds / count
    rnd = 0
    while len(events) < count:
        rnd += 1
        t = len(events) * step
        events.append(ev.RoundStarted(t=t, conv=rnd % 4, round=rnd, prompt_chars=400, messages=3))
        for seq in range(1, 31):
            events.append(ev.SSEReceived(t=t + seq * step, conv=rnd % 4, round=rnd, seq=seq, chars=4))
            if seq % 15 == 0:
                events.append(ev.ProbeSample(t=t + seq * step, hop="engine-0",
                                             snapshot=Snapshot(ok=True, running=4, queued=0, itl_count=rnd * 30)))
        events.append(ev.RoundDone(t=t + 31 * step, conv=rnd % 4, round=rnd, status=200, reply_chars=120,
                                   duration_s=31 * step, events=30, max_gap_s=step))
    return events[:count]


class Clock:
    """Wall time as the events tell it, so a simulated day rotates and trims as a real one would."""

    def __init__(self) -> None:
        self.wall = WALL0

    def __call__(self) -> float:
        return self.wall


def write_all(kind: str, folder: Path, events: list[ev.Event]) -> dict:
    # The real clock (time.time): the writers are timed as a session runs them.
    if kind == "plain":
        log = RunLogWriter(folder)
    elif kind == "rotating (defaults)":
        log = RotatingRunLog(folder)
    else:
        log = RotatingRunLog(folder, segment_bytes=MIB, keep_bytes=4 * MIB)
    slowest = slowest_rotating = 0.0
    rotations = 0
    started = time.perf_counter()
    for event in events:
        before = time.perf_counter()
        log.write(event)
        took = time.perf_counter() - before
        if getattr(log, "rotations", 0) != rotations:  # this write closed a segment and opened the next
            rotations = log.rotations
            slowest_rotating = max(slowest_rotating, took)
        else:
            slowest = max(slowest, took)
    log.close()
    took = time.perf_counter() - started
    return {"events_per_s": len(events) / took, "slowest_write_ms": slowest * 1000,
            "slowest_rotation_ms": slowest_rotating * 1000, "rotations": rotations,
            "segments_kept": len(list_segments(folder))}


KINDS = ("plain", "rotating (defaults)", "rotating (1 MiB segments, 4 MiB kept)")


def bench_writes(events: list[ev.Event], repeat: int) -> dict:
    runs: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    for _ in range(repeat):
        for kind in KINDS:  # interleaved: a slow moment of a shared machine hits all alike
            with tempfile.TemporaryDirectory() as tmp:
                runs[kind].append(write_all(kind, Path(tmp), events))
    out = {}
    for kind, results in runs.items():
        out[kind] = {key: statistics.median(r[key] for r in results) for key in results[0]}
        out[kind]["slowest_write_ms"] = max(r["slowest_write_ms"] for r in results)
        out[kind]["slowest_rotation_ms"] = max(r["slowest_rotation_ms"] for r in results)
    plain = out["plain"]["events_per_s"]
    for kind in KINDS:
        out[kind]["ratio_to_plain"] = out[kind]["events_per_s"] / plain
    return out


def bench_reads(events: list[ev.Event]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        clock = Clock()
        log = RotatingRunLog(folder, segment_bytes=8 * MIB, keep_bytes=1024 * MIB, clock=clock)
        for event in events:
            clock.wall = WALL0 + event.t
            log.write(event)
        log.close()
        segments = len(list_segments(folder))
        started = time.perf_counter()
        whole = read_range(folder, None, None)
        whole_s = time.perf_counter() - started
        started = time.perf_counter()
        hour = read_range(folder, WALL0 + 12 * 3600, WALL0 + 13 * 3600)
        hour_s = time.perf_counter() - started
    return {"segments": segments, "whole_s": whole_s, "whole_events": len(whole.events), "hour_s": hour_s,
            "hour_events": hour.in_range, "hour_segments_read": len(hour.segments)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.events, args.repeat = 200_000, 1
    events = run_events(args.events, 86400.0)
    writes = bench_writes(events, args.repeat)
    reads = bench_reads(events)
    if args.json:
        print(json.dumps({"events": args.events, "writes": writes, "reads": reads}, indent=2))
        return
    print(f"{args.events} events, medians of {args.repeat} interleaved repeats")
    print(f"{'writer':40} {'events/s':>9} {'vs plain':>8} {'slowest write':>13} {'slowest rotation':>16} "
          f"{'rotations':>9} {'kept':>4}")
    for kind, r in writes.items():
        rotation = f"{r['slowest_rotation_ms']:13.1f} ms" if r["rotations"] else f"{'-':>16}"
        kept = f"{r['segments_kept']:4.0f}" if kind != "plain" else f"{'-':>4}"
        print(f"{kind:40} {r['events_per_s']:9.0f} {r['ratio_to_plain']:8.2f} {r['slowest_write_ms']:10.1f} ms "
              f"{rotation} {r['rotations']:9.0f} {kept}")
    print(f"read back ({reads['segments']} segments of 8 MiB over a day): all {reads['whole_events']} events in "
          f"{reads['whole_s']:.2f} s; one hour ({reads['hour_events']} events, {reads['hour_segments_read']} segments "
          f"read) in {reads['hour_s']:.3f} s")


if __name__ == "__main__":
    main()
