"""repro's benchmarks, side by side in one run so that ratios hold on a noisy machine.

    python benchmarks/run.py            # a table
    python benchmarks/run.py --json     # JSON (the keys issue #7 names)
    python benchmarks/run.py --quick    # under a minute (one run of each client)

Every figure is the median of --repeat runs (default 3) of each client, interleaved.

1. The simulated engine: SSE events/s it sustains and its CPU per 1000 events (one process, one core).
2. The driver against aiohttp (vLLM-benchmark style) and a raw asyncio-streams reader (the floor),
   at several concurrency levels, against simulated engines in other processes: events/s, CPU
   seconds per 1000 events, event-loop lag p99 (the driver's, and the same measure for the
   others), and the most rounds the driver had in flight at once (its ramp-up spreads the
   first rounds, so a short run may never hold all its streams open together).
3. The same clients at an engine's pace: the most streams, but the engine decodes 20 tokens/s
   per stream (a loaded engine's pace, not a flood), so no client is saturated and the event-loop
   lag shows the client's own hiccups (start bursts, GC), not a backlog; ours also with its start
   pacer off. At saturation (2.) every single-loop client lags by a full sweep of its sockets.
4. Memory: peak RSS of the driver with many conversations and growing histories.
Each client runs in its own process; CPU is that process's own CPU time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from repro.sim import SimConfig, start_sim_process  # noqa: E402


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client(kind: str, url: str, conversations: int, rounds: int, max_tokens: int, timeout: float = 600,
           tree: Path = HERE.parent) -> dict:
    """One client run in its own process; `tree` is the checkout whose clients and repro it runs."""
    out = subprocess.run([sys.executable, str(tree / "benchmarks" / "streaming_clients.py"), kind, url,
                          str(conversations), str(rounds), str(max_tokens)], capture_output=True, text=True,
                         timeout=timeout, cwd=tree, env=dict(os.environ, PYTHONPATH=str(tree)))
    if out.returncode != 0:
        raise RuntimeError(f"{kind} client of {tree} failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def per_1k(result: dict) -> float:
    return round(result["cpu_s"] / max(1, result["events"]) * 1000, 4)


def measure(kinds: tuple[str, ...], url: str, level: int, rounds: int, max_tokens: int, repeat: int) -> dict:
    """Each client `repeat` times, interleaved (so a slow minute of a noisy machine hits them all
    alike), reduced to medians per figure."""
    runs: dict[str, list[dict]] = {kind: [] for kind in kinds}
    for _ in range(repeat):
        for kind in kinds:
            runs[kind].append(client(kind, url, level, rounds, max_tokens))
    out = {}
    for kind, results in runs.items():
        out[kind] = {
            "cpu_per_1k": round(statistics.median(per_1k(r) for r in results), 4),
            "events_per_s": round(statistics.median(r["events"] / r["wall_s"] for r in results)),
            "lag_p99_ms": round(statistics.median(r.get("loop_lag_p99_ms", 0.0) for r in results), 1),
            "cpu_share": round(statistics.median(r["cpu_s"] / r["wall_s"] for r in results), 2),
            "rounds": min(r["rounds"] for r in results),
            "peak_in_flight": max(r.get("peak_in_flight") or 0 for r in results),
        }
    return out


def bench_driver(levels: list[int], rounds: int, max_tokens: int, repeat: int) -> list[dict]:
    rows = []
    config = SimConfig(ttft=0.005, itl=0.005, max_running=4096, max_tokens_default=max_tokens)
    with start_sim_process(config) as sim:
        for level in levels:
            # Fewer streams run more rounds (64: 4x), so that every level streams for long enough
            # that per-event figures are not a run's fixed costs (start-up, connections) spread thin.
            level_rounds = rounds * max(1, 256 // level)
            m = measure(("raw", "aiohttp", "httpx_floor", "ours"), sim.url, level, level_rounds, max_tokens, repeat)
            ours, aio, raw, floor = m["ours"], m["aiohttp"], m["raw"], m["httpx_floor"]
            rows.append({
                "concurrency": level,
                "rounds": level_rounds,
                "ours_cpu_s_per_1k_events": ours["cpu_per_1k"],
                "aiohttp_cpu_s_per_1k_events": aio["cpu_per_1k"],
                "raw_cpu_s_per_1k_events": raw["cpu_per_1k"],
                "httpx_floor_cpu_s_per_1k_events": floor["cpu_per_1k"],
                "ours_over_aiohttp": round(ours["cpu_per_1k"] / max(1e-9, aio["cpu_per_1k"]), 3),
                "ours_over_raw": round(ours["cpu_per_1k"] / max(1e-9, raw["cpu_per_1k"]), 3),
                "ours_over_httpx_floor": round(ours["cpu_per_1k"] / max(1e-9, floor["cpu_per_1k"]), 3),
                "ours_events_per_s": ours["events_per_s"],
                "aiohttp_events_per_s": aio["events_per_s"],
                "raw_events_per_s": raw["events_per_s"],
                "ours_loop_lag_p99_ms": ours["lag_p99_ms"],
                "aiohttp_loop_lag_p99_ms": aio["lag_p99_ms"],
                "raw_loop_lag_p99_ms": raw["lag_p99_ms"],
                "ours_peak_in_flight": ours["peak_in_flight"],
                "ours_rounds_completed": ours["rounds"],
                "rounds_expected": level * level_rounds,
            })
    return rows


def bench_paced(level: int, rounds: int, max_tokens: int, repeat: int, itl: float = 0.05) -> dict:
    """Loop lag and CPU share of each client when the engine, not the client, sets the pace."""
    config = SimConfig(ttft=itl, itl=itl, max_running=4096, max_tokens_default=max_tokens)
    row: dict = {"concurrency": level, "engine_tokens_per_s_per_stream": round(1 / itl)}
    with start_sim_process(config) as sim:
        m = measure(("raw", "aiohttp", "ours_unpaced", "ours"), sim.url, level, rounds, max_tokens, repeat)
    for kind, figures in m.items():
        row[f"{kind}_loop_lag_p99_ms"] = figures["lag_p99_ms"]
        row[f"{kind}_cpu_share"] = figures["cpu_share"]
        row[f"{kind}_events_per_s"] = figures["events_per_s"]
    return row


def bench_sim(conversations: int, rounds: int, max_tokens: int) -> dict:
    """The engine's own cost: events it served per second of its own CPU (one process = one core)."""
    config = SimConfig(ttft=0.0, itl=0.001, max_running=4096, max_tokens_default=max_tokens)
    with start_sim_process(config) as sim:
        cpu0 = proc_cpu_s(sim.process.pid)
        result = client("raw", sim.url, conversations, rounds, max_tokens)
        cpu = proc_cpu_s(sim.process.pid) - cpu0
    return {"sim_events": result["events"], "sim_cpu_s": round(cpu, 2),
            "sim_events_per_cpu_s": round(result["events"] / max(cpu, 1e-9)),
            "sim_events_per_s_wall": round(result["events"] / result["wall_s"])}


def bench_memory(conversations: int, rounds: int, max_tokens: int) -> dict:
    config = SimConfig(ttft=0.005, itl=0.005, max_running=4096, max_tokens_default=max_tokens)
    with start_sim_process(config) as sim:
        small = client("ours", sim.url, conversations, max(1, rounds // 4), max_tokens)
        full = client("ours", sim.url, conversations, rounds, max_tokens)
    return {"memory_conversations": conversations, "memory_rounds": rounds,
            "memory_peak_rss_mb": round(full["peak_rss_mb"], 1),
            "memory_peak_rss_mb_quarter_rounds": round(small["peak_rss_mb"], 1),
            "memory_rounds_completed": full["rounds"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="small sizes, one run each, under a minute")
    parser.add_argument("--repeat", type=int, help="runs of each client per figure, medians reported (default 3; --quick 1)")
    args = parser.parse_args()
    repeat = args.repeat or (1 if args.quick else 3)
    if repeat < 1:
        parser.error(f"--repeat must be >= 1, got {repeat}")
    started = time.time()
    if args.quick:
        levels, rounds, tokens, mem = [64, 256], 2, 16, (200, 8)
    else:
        levels, rounds, tokens, mem = [64, 256, 1024], 3, 32, (1000, 20)
    result: dict = {"machine": f"{os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"), "quick": args.quick,
                    "repeat": repeat}
    result["driver"] = bench_driver(levels, rounds, tokens, repeat)
    result["paced"] = bench_paced(levels[-1], rounds, tokens, repeat)
    result.update(bench_sim(256, rounds, tokens))
    result.update(bench_memory(*mem, max_tokens=tokens))
    result["elapsed_s"] = round(time.time() - started, 1)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"driver vs aiohttp vs raw floor ({result['machine']}, {result['date']}, "
                        f"medians of {repeat} runs)")
    for col in ("streams", "ours CPU s/1k ev", "aiohttp", "raw", "httpx floor", "ours/aiohttp", "ours/raw",
                "ours ev/s", "aiohttp ev/s", "lag p99 ms ours", "aiohttp", "raw", "ours peak in flight"):
        table.add_column(col, justify="right")
    for row in result["driver"]:
        table.add_row(str(row["concurrency"]), f"{row['ours_cpu_s_per_1k_events']:.3f}",
                      f"{row['aiohttp_cpu_s_per_1k_events']:.3f}", f"{row['raw_cpu_s_per_1k_events']:.3f}",
                      f"{row['httpx_floor_cpu_s_per_1k_events']:.3f}",
                      f"{row['ours_over_aiohttp']:.2f}", f"{row['ours_over_raw']:.2f}", str(row["ours_events_per_s"]),
                      str(row["aiohttp_events_per_s"]),
                      f"{row['ours_loop_lag_p99_ms']:.1f}", f"{row['aiohttp_loop_lag_p99_ms']:.1f}",
                      f"{row['raw_loop_lag_p99_ms']:.1f}", str(row["ours_peak_in_flight"]))
    console = Console(width=max(160, Console().width))  # full column names, not "ours/a…"
    console.print(table)
    paced = result["paced"]
    pace = Table(title=f"event-loop lag at an engine's pace: {paced['concurrency']} streams at "
                       f"{paced['engine_tokens_per_s_per_stream']} tokens/s each")
    for col in ("client", "lag p99 ms", "CPU share of a core", "events/s"):
        pace.add_column(col, justify="right")
    for kind, name in (("ours", "ours"), ("ours_unpaced", "ours, start pacer off"), ("aiohttp", "aiohttp"), ("raw", "raw")):
        pace.add_row(name, f"{paced[kind + '_loop_lag_p99_ms']:.1f}", f"{paced[kind + '_cpu_share']:.2f}",
                     str(paced[kind + "_events_per_s"]))
    console.print(pace)
    console.print(f"simulated engine: {result['sim_events_per_cpu_s']} SSE events per CPU second "
                  f"({result['sim_events_per_s_wall']} events/s wall at 256 streams)")
    console.print(f"memory: peak RSS {result['memory_peak_rss_mb']} MB for {mem[0]} conversations x {mem[1]} rounds "
                  f"({result['memory_peak_rss_mb_quarter_rounds']} MB at a quarter of the rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
