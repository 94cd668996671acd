"""Probe costs: parse+normalize of a large router page, and the CPU share of sampling 10 hops.

    .venv/bin/python benchmarks/bench_probes.py [--seconds 10] [--hops 10] [--interval 0.5]

Prints one JSON object:
- router_page: size of a synthetic sglang-router page with many histogram series (workers x
  outcomes, paths x buckets, models x endpoints x buckets), the median ms of parse_metrics on it,
  and, for comparison, of prometheus_client parsing the whole page (what the line filter saves);
- engine_page: the same for a realistic SGLang engine page (8 TP ranks, full histograms);
- sampling: the CPU share of this process while a Sampler scrapes N hops every interval (the
  pages are served by a separate process, so only the probe side is counted).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from probes import Sampler, parse_metrics  # noqa: E402
from repro.core.hop import Hop

BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300, 600, 1200, 2400]


def histogram(name: str, label_sets: list[str]) -> list[str]:
    lines = [f"# TYPE {name} histogram"]
    for labels in label_sets:
        sep = "," if labels else ""
        total = 0
        for bound in BUCKETS:
            total += 3
            lines.append(f'{name}_bucket{{{labels}{sep}le="{bound}"}} {total}')
        lines.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {total}')
        lines.append(f"{name}_sum{{{labels}}} {total * 0.1:.3f}")
        lines.append(f"{name}_count{{{labels}}} {total}")
    return lines


def router_page(workers: int = 64, models: int = 8) -> str:
    lines: list[str] = []
    urls = [f"http://10.0.{i // 250}.{i % 250}:30000" for i in range(workers)]
    paths = ["/v1/chat/completions", "/v1/completions", "/generate", "/health", "/v1/models", "/metrics",
             "/get_model_info", "/get_server_info", "/readiness", "/liveness", "/workers", "/get_loads"]
    lines += histogram("smg_http_request_duration_seconds", [f'method="POST",path="{p}"' for p in paths])
    route = [f'router_type="http",backend_type="regular",connection_mode="http",model="model-{m}",endpoint="{e}"'
             for m in range(models) for e in ("chat", "completion", "generate")]
    lines += histogram("smg_router_request_duration_seconds", route)
    lines += histogram("smg_router_ttft_seconds", route)
    lines += histogram("smg_router_tpot_seconds", route)
    lines.append("# TYPE smg_router_requests_total counter")
    lines += [f'smg_router_requests_total{{{r},streaming="true"}} 10' for r in route]
    for family, values in (("smg_worker_requests_active", "2"), ("smg_worker_health", "1"), ("smg_worker_cb_state", "0"),
                           ("smg_worker_cb_consecutive_failures", "0"), ("smg_worker_cb_consecutive_successes", "9")):
        lines.append(f"# TYPE {family} gauge")
        lines += [f'{family}{{worker="{u}"}} {values}' for u in urls]
    lines.append("# TYPE smg_worker_cb_outcomes_total counter")
    lines += [f'smg_worker_cb_outcomes_total{{worker="{u}",outcome="{o}"}} 5' for u in urls for o in ("success", "failure")]
    lines += histogram("smg_worker_retry_backoff_seconds", [f'worker="{u}"' for u in urls])
    return "\n".join(lines) + "\n"


def engine_page(tp: int = 8) -> str:
    lines: list[str] = []
    sched = [f'engine_type="unified",model_name="m",pp_rank="0",tp_rank="{r}"' for r in range(tp)]
    for gauge in ("num_running_reqs", "num_queue_reqs", "num_used_tokens", "token_usage", "gen_throughput",
                  "cache_hit_rate", "num_grammar_queue_reqs", "spec_accept_length", "utilization",
                  "max_total_num_tokens", "new_token_ratio", "num_retracted_reqs", "num_paused_reqs"):
        lines.append(f"# HELP sglang:{gauge} x\n# TYPE sglang:{gauge} gauge")
        lines += [f"sglang:{gauge}{{{s}}} 3.0" for s in sched]
    for counter in ("prompt_tokens", "generation_tokens", "cached_tokens", "num_requests", "num_aborted_requests"):
        lines += [f"# TYPE sglang:{counter} counter", f'sglang:{counter}_total{{model_name="m"}} 100.0',
                  f'sglang:{counter}_created{{model_name="m"}} 1.7e9']
    for hist in ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds"):
        lines += histogram(f"sglang:{hist}", ['model_name="m"'])
    lines += histogram("sglang:queue_time_seconds", sched)
    lines += histogram("sglang:per_stage_req_latency_seconds", [f'{s},stage="{st}"' for s in sched[:1]
                                                               for st in ("prefill", "decode", "tokenize", "detokenize")])
    lines += [f"python_gc_objects_collected_total{{generation=\"{g}\"}} 1.0" for g in range(3)]
    return "\n".join(lines) + "\n"


def time_ms(fn, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(runs), 3)


def page_costs(text: str, repeat: int) -> dict:
    [snapshot] = parse_metrics(text)
    assert snapshot.ok, snapshot.error
    return {
        "bytes": len(text.encode()),
        "lines": text.count("\n"),
        "parse_and_normalize_ms": time_ms(lambda: parse_metrics(text), repeat),
        "full_prometheus_client_parse_ms": time_ms(
            lambda: [s for f in text_string_to_metric_families(text) for s in f.samples], max(3, repeat // 5)),
        "dialect": snapshot.dialect,
    }


SERVER = r"""
import asyncio, sys
page = open(sys.argv[1], 'rb').read()
head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: %d\r\n\r\n" % len(page)
async def handle(reader, writer):
    try:
        while True:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(head + page)
            await writer.drain()
    except Exception:
        writer.close()
async def main():
    servers = [await asyncio.start_server(handle, "127.0.0.1", 0) for _ in range(int(sys.argv[2]))]
    print(" ".join(str(s.sockets[0].getsockname()[1]) for s in servers), flush=True)
    await asyncio.sleep(float(sys.argv[3]))
asyncio.run(main())
"""


def sampling_share(page: str, hops: int, interval: float, seconds: float, tmp: Path) -> dict:
    page_file = tmp / "bench_probes_page.txt"
    page_file.write_text(page)
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(page_file), str(hops), str(seconds + 30)],
                              stdout=subprocess.PIPE, text=True)
    try:
        ports = server.stdout.readline().split()
        samples: list = []
        hop_list = [Hop(f"engine-{i}", f"http://127.0.0.1:{p}") for i, p in enumerate(ports)]

        async def run() -> tuple[float, float]:
            sampler = Sampler(hop_list, interval=interval, emit=samples.append, origin=time.monotonic())
            cpu0, wall0 = time.process_time(), time.monotonic()
            with anyio.move_on_after(seconds):
                await sampler.run()
            return time.process_time() - cpu0, time.monotonic() - wall0

        cpu, wall = anyio.run(run)
    finally:
        server.kill()
        server.wait(5)
        page_file.unlink(missing_ok=True)
    ok = sum(1 for s in samples if s.snapshot.ok)
    return {
        "hops": hops, "interval_s": interval, "seconds": round(wall, 2), "samples": len(samples), "ok": ok,
        "page_bytes": len(page.encode()), "cpu_s": round(cpu, 3), "cpu_share_pct": round(100 * cpu / wall, 2),
        "cpu_ms_per_sample": round(1000 * cpu / max(1, len(samples)), 3),
        "scrape_s_median_ms": round(1000 * statistics.median(s.snapshot.scrape_s for s in samples), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--hops", type=int, default=10)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    import tempfile

    router, engine = router_page(), engine_page()
    result = {
        "python": sys.version.split()[0],
        "router_page": page_costs(router, args.repeat),
        "engine_page": page_costs(engine, args.repeat),
        "sampling": sampling_share(engine, args.hops, args.interval, args.seconds, Path(tempfile.gettempdir())),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
