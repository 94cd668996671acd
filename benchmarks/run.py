"""repro's benchmarks, side by side in one run so that ratios hold on a noisy machine.

    python benchmarks/run.py            # a table
    python benchmarks/run.py --json     # JSON (the keys issue #7 names)
    python benchmarks/run.py --quick    # under a minute

1. The simulated engine: SSE events/s it sustains and its CPU per 1000 events (one process, one core).
2. The driver against aiohttp (vLLM-benchmark style) and a raw asyncio-streams reader (the floor),
   at several concurrency levels, against simulated engines in other processes: events/s, CPU
   seconds per 1000 events, event-loop lag p99 (the driver's, and the same measure for the
   others), and the most rounds the driver had in flight at once (its ramp-up spreads the
   first rounds, so a short run may never hold all its streams open together).
3. Memory: peak RSS of the driver with many conversations and growing histories.
Each client runs in its own process; CPU is that process's own CPU time.
"""

from __future__ import annotations

import argparse
import json
import os
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


def client(kind: str, url: str, conversations: int, rounds: int, max_tokens: int, timeout: float = 600) -> dict:
    out = subprocess.run([sys.executable, str(HERE / "streaming_clients.py"), kind, url, str(conversations),
                          str(rounds), str(max_tokens)], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} client failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def per_1k(result: dict) -> float:
    return round(result["cpu_s"] / max(1, result["events"]) * 1000, 4)


def bench_driver(levels: list[int], rounds: int, max_tokens: int) -> list[dict]:
    rows = []
    config = SimConfig(ttft=0.005, itl=0.005, max_running=4096, max_tokens_default=max_tokens)
    with start_sim_process(config) as sim:
        for level in levels:
            results = {kind: client(kind, sim.url, level, rounds, max_tokens) for kind in ("raw", "aiohttp", "httpx_floor", "ours")}
            ours, aio, raw, floor = results["ours"], results["aiohttp"], results["raw"], results["httpx_floor"]
            rows.append({
                "concurrency": level,
                "ours_cpu_s_per_1k_events": per_1k(ours),
                "aiohttp_cpu_s_per_1k_events": per_1k(aio),
                "raw_cpu_s_per_1k_events": per_1k(raw),
                "httpx_floor_cpu_s_per_1k_events": per_1k(floor),
                "ours_over_aiohttp": round(per_1k(ours) / max(1e-9, per_1k(aio)), 3),
                "ours_over_raw": round(per_1k(ours) / max(1e-9, per_1k(raw)), 3),
                "ours_over_httpx_floor": round(per_1k(ours) / max(1e-9, per_1k(floor)), 3),
                "ours_events_per_s": round(ours["events"] / ours["wall_s"]),
                "aiohttp_events_per_s": round(aio["events"] / aio["wall_s"]),
                "raw_events_per_s": round(raw["events"] / raw["wall_s"]),
                "ours_loop_lag_p99_ms": round(ours["loop_lag_p99_ms"], 1),
                "aiohttp_loop_lag_p99_ms": round(aio.get("loop_lag_p99_ms", 0.0), 1),
                "raw_loop_lag_p99_ms": round(raw.get("loop_lag_p99_ms", 0.0), 1),
                "ours_peak_in_flight": ours.get("peak_in_flight"),
                "ours_rounds_completed": ours["rounds"],
                "rounds_expected": level * rounds,
            })
    return rows


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
    parser.add_argument("--quick", action="store_true", help="small sizes, under a minute")
    args = parser.parse_args()
    started = time.time()
    if args.quick:
        levels, rounds, tokens, mem = [64, 256], 2, 16, (200, 8)
    else:
        levels, rounds, tokens, mem = [64, 256, 1024], 3, 32, (1000, 20)
    result: dict = {"machine": f"{os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"), "quick": args.quick}
    result["driver"] = bench_driver(levels, rounds, tokens)
    result.update(bench_sim(256, rounds, tokens))
    result.update(bench_memory(*mem, max_tokens=tokens))
    result["elapsed_s"] = round(time.time() - started, 1)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"driver vs aiohttp vs raw floor ({result['machine']}, {result['date']})")
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
    console.print(f"simulated engine: {result['sim_events_per_cpu_s']} SSE events per CPU second "
                  f"({result['sim_events_per_s_wall']} events/s wall at 256 streams)")
    console.print(f"memory: peak RSS {result['memory_peak_rss_mb']} MB for {mem[0]} conversations x {mem[1]} rounds "
                  f"({result['memory_peak_rss_mb_quarter_rounds']} MB at a quarter of the rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
