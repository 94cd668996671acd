"""`--workers 2` against 1, side by side in one run: a sharded run's throughput and loop lag.

    python benchmarks/workers.py                  # a table
    python benchmarks/workers.py --json
    python benchmarks/workers.py --quick          # 512 conversations, one repeat

1. A whole `repro run` (repro.session.run.Run: probes, evidence book, judge, run log; the merge of the
   workers' segments included) at a top level of conversations against a simulated engine in its
   own process with a short inter-token latency, so that the driver is the limit, with 1 and with 2
   workers, interleaved `--repeat` times, medians. From each run's own log: SSE events/s over the
   window from the first round's start to the last round's end, the event-loop lag (each worker
   reports its loop's p99 and max every second: the median second's p99, the worst second's max)
   and the CPU seconds of the run's processes (the engine's excluded) per 1000 events.
2. The merge at the end of a sharded run: seconds and peak memory to merge a million log lines
   from three files (a parent log and two segments), as repro.io.runlog.merge_segments does it: the
   usual case (segments in time order, streamed) and its fallback (a segment out of order).

The machine's core count is printed with the table: a worker only helps if it gets a core of its
own beside the engine and the parent.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from repro.core import events as ev  # noqa: E402
from repro.io.runlog import read_run_log  # noqa: E402
from repro.sim import SimConfig, start_sim_process  # noqa: E402

RUN = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from repro.load.prompts import PromptSource
    from repro.core.hop import Hop
    from repro.load.driver import DriverConfig
    from repro.session.run import Run, RunSettings

    url, out, workers, conversations, rounds, max_tokens = sys.argv[1:7]
    settings = RunSettings(
        driver=DriverConfig(base_url=url, model="sim-model", conversations=int(conversations), rounds=int(rounds),
                            max_tokens=int(max_tokens), stall_after=30.0),
        prompts=PromptSource(prompt_chars=200), out=Path(out), workers=int(workers), run_timeout=600,
        hops=[Hop("engine-0", url)], probe_interval=0.5,
    )
    started = time.monotonic()
    result = Run(settings).execute()
    print(json.dumps({"wall_s": time.monotonic() - started, "completed": result.summary["rounds_completed"]}))
""")


def one_run(url: str, workers: int, conversations: int, rounds: int, max_tokens: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([sys.executable, "-c", RUN, url, str(out), str(workers), str(conversations), str(rounds),
                               str(max_tokens)], capture_output=True, text=True, timeout=900, cwd=HERE.parent)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"run with {workers} worker(s) failed: {done.stderr.strip()[-800:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        log = read_run_log(out)
    starts = [e.t for e in log.of(ev.RoundStarted)]
    ends = [e.t for e in log.events if isinstance(e, (ev.RoundDone, ev.RoundFailed, ev.RoundAbandoned))]
    events = sum(e.events for e in log.of(ev.SSEReceived))
    lags = [e.p99_ms for e in log.of(ev.LoopLag)]  # each worker reports its loop's p99 every second
    window = max(ends) - min(starts)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {
        "events": events,
        "events_per_s": events / window,
        "lag_p99_ms": statistics.median(lags) if lags else 0.0,
        "lag_max_ms": max((e.max_ms for e in log.of(ev.LoopLag)), default=0.0),
        "cpu_per_1k": cpu / max(1, events) * 1000,
        "completed": result["completed"],
        "wall_s": result["wall_s"],
    }


def bench_runs(conversations: int, rounds: int, max_tokens: int, itl: float, repeat: int) -> dict:
    config = SimConfig(ttft=itl, itl=itl, max_running=8192, max_tokens_default=max_tokens)
    runs: dict[int, list[dict]] = {1: [], 2: []}
    with start_sim_process(config) as sim:
        for _ in range(repeat):
            for workers in runs:  # interleaved: a slow minute of a noisy machine hits both alike
                runs[workers].append(one_run(sim.url, workers, conversations, rounds, max_tokens))
    out = {}
    for workers, results in runs.items():
        out[workers] = {key: round(statistics.median(r[key] for r in results), 3 if key == "cpu_per_1k" else 1)
                        for key in ("events_per_s", "lag_p99_ms", "lag_max_ms", "cpu_per_1k", "wall_s")}
        out[workers]["completed"] = min(r["completed"] for r in results)
        out[workers]["rounds"] = conversations * rounds
    return out


MERGE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from repro.core import events as ev
    from repro.io.runlog import RunLogWriter, merge_segments, segment_name

    run_dir, lines, disorder = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "disorder"
    writers = [RunLogWriter(run_dir, flush_interval=1.0)]
    writers += [RunLogWriter(run_dir, name=segment_name(w), flush_interval=1.0) for w in (0, 1)]
    # The parent writes a sample now and then; each worker SSE reads, its rounds interleaved in time.
    for i in range(lines // 2):
        t = i * 1e-4  # 20k lines/s in all, about what two workers write at 1024 streams
        for w, writer in enumerate(writers[1:]):
            writer.write(ev.SSEReceived(t=t + w * 3e-6, conv=2 * (i % 512) + w, round=1 + i // 512, seq=i % 32,
                                        chars=4))
        if i % 1000 == 0:
            writers[0].write(ev.LoopLag(t=t, max_ms=1.0, p99_ms=1.0, in_flight=512))
    if disorder:  # one line out of order at the very end: the merge finds out late and sorts in memory
        writers[2].write(ev.LoopLag(t=0.0, max_ms=1.0, p99_ms=1.0, in_flight=512))
    for writer in writers:
        writer.close()
    def status(field):
        line = next(l for l in open("/proc/self/status") if l.startswith(field + ":"))
        return int(line.split()[1])

    Path("/proc/self/clear_refs").write_text("5")  # resets the peak (VmHWM) to the size now
    before = status("VmRSS")
    started = time.perf_counter()
    merged = merge_segments(run_dir)
    took = time.perf_counter() - started
    peak = status("VmHWM")
    size = (run_dir / "events.jsonl").stat().st_size
    print(merged, round(took, 2), round((peak - before) / 1024), round(size / 2**20))
""")


def bench_merge(lines: int, disorder: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, "-c", MERGE, tmp, str(lines), "disorder" if disorder else "ordered"],
                              capture_output=True, text=True, timeout=900, cwd=HERE.parent)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip()[-800:])
    merged, seconds, extra_mib, size_mib = done.stdout.split()
    return {"lines": int(merged), "seconds": float(seconds), "peak_extra_mib": int(extra_mib),
            "log_mib": int(size_mib)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--itl", type=float, default=0.005, help="the engine's seconds per token (default 0.005)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--merge-lines", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="512 conversations, one repeat, 200k merged lines")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.conversations, args.repeat, args.merge_lines = 512, 1, 200_000
    result = {
        "machine": f"{os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
        "conversations": args.conversations, "rounds": args.rounds, "max_tokens": args.max_tokens, "itl": args.itl,
        "repeat": args.repeat,
        "workers": bench_runs(args.conversations, args.rounds, args.max_tokens, args.itl, args.repeat),
        "merge": bench_merge(args.merge_lines),
        "merge_out_of_order": bench_merge(args.merge_lines, disorder=True),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"repro run --workers, {result['conversations']} conversations x {result['rounds']} rounds, "
                        f"engine itl {args.itl * 1000:g} ms ({result['machine']}, {result['date']}, "
                        f"median of {args.repeat})")
    for column in ("workers", "SSE events/s", "loop lag p99 ms (median second)", "loop lag max ms (worst second)",
                   "CPU s / 1k events",
                   "rounds completed", "wall s"):
        table.add_column(column, justify="right")
    for workers, row in result["workers"].items():
        table.add_row(str(workers), f"{row['events_per_s']:,.0f}", f"{row['lag_p99_ms']:g}", f"{row['lag_max_ms']:g}",
                      f"{row['cpu_per_1k']:.3f}", f"{row['completed']}/{row['rounds']}", f"{row['wall_s']:g}")
    console = Console()
    console.print(table)
    for key, what in (("merge", "in order (streamed)"), ("merge_out_of_order", "one line out of order (sorted in memory)")):
        merge = result[key]
        console.print(f"merge of {merge['lines']:,} segment lines ({merge['log_mib']} MiB log), {what}: "
                      f"{merge['seconds']:g} s, {merge['peak_extra_mib']} MiB above the process's size before it")


if __name__ == "__main__":
    main()
