"""Soak `repro watch`: it never dies and never grows, while its stack restarts and faults come and go.

    .venv/bin/python benchmarks/watch_soak.py                        # 20 min, think 0.2 s: hours of default rounds
    .venv/bin/python benchmarks/watch_soak.py --duration 3600 --json-out soak.json

A real `repro watch` subprocess (as users run it) watches the fault proxy (mitmdump's addon, its
own process) in front of a simulated engine (its own process), with a short think time so that
the rounds of hours of the default cadence go by in minutes. Meanwhile, on a schedule:
- every --restart-every seconds the engine is stopped and started again on the same port (a hop
  that restarts, refuses connections for a moment, and comes back);
- every --fault-every seconds a fault is armed for --fault-window seconds, alternately the proxy
  wedging reused connections and the engine hanging, then lifted.

Every --sample-every seconds the watch process is read from the outside: resident memory, open
file descriptors and threads (/proc/PID), and its /metrics (how long the scrape took, rounds by
outcome, incidents open). At the end: SIGTERM, and the exit status and time to exit.

Checked (exit 1 when one fails): the watch is alive and serving at every sample; it exits 0 within
15 s of SIGTERM; after the warm-up (the first --warmup seconds) resident memory grows by less than
--max-rss-growth-mib, open file descriptors by at most 8 and threads by at most 2; every fault
window opened an incident of the fault's side and hop, and the last incident cleared after the
last fault was lifted. Prints one JSON object (and writes it to --json-out).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proxies.runner import start_proxy  # noqa: E402
from repro.sim import SimConfig  # noqa: E402
from repro.sim.server import start_sim_process  # noqa: E402

DEFAULT_THINK_S = 3.0  # `repro watch`'s default think time: what "an hour's worth of rounds" is measured in


def proc_status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            fields[key] = int(value.split()[0])
    return {"rss_kib": fields.get("VmRSS", 0), "threads": fields.get("Threads", 0),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def scrape(address: str) -> tuple[float, dict[tuple[str, tuple], float]]:
    started = time.monotonic()
    response = httpx.get(f"http://{address}/metrics", timeout=5.0, trust_env=False)
    elapsed = time.monotonic() - started
    response.raise_for_status()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(response.text) for s in family.samples}
    return elapsed, samples


def rounds_by_outcome(samples: dict) -> dict[str, float]:
    return {dict(labels)["outcome"]: value for (name, labels), value in samples.items()
            if name == "repro_watch_rounds_total"}


def open_incidents(samples: dict) -> set[tuple[str, str, str]]:
    return {(dict(labels)["side"], dict(labels)["where"], dict(labels)["kind"])
            for (name, labels), value in samples.items() if name == "repro_watch_incident" and value == 1}


def start_watch(work: Path, proxy, sim, args: argparse.Namespace) -> tuple[subprocess.Popen, str, Path]:
    stderr_path = work / "watch.stderr"
    process = subprocess.Popen(
        [sys.executable, "-m", "repro", "watch", "--listen", "127.0.0.1:0", "--out", str(work / "watch"),
         "--hop", f"name=proxy,url={proxy.url},metrics={proxy.metrics_url},role=proxy",
         "--hop", f"name=engine-0,url={sim.url},role=engine",
         "--think", str(args.think), "--rounds", str(args.rounds), "--stall-after", str(args.stall_after),
         "--canary-every", "2", "--canary-timeout", "1", "--probe-interval", "0.5", "--max-tokens", "8",
         "--log-segment-mib", "4", "--log-keep-mib", "64"],
        stdout=subprocess.DEVNULL, stderr=open(stderr_path, "wb"), cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = stderr_path.read_text(errors="replace")
        marker = "metrics: http://"
        if marker in text:
            address = text.split(marker, 1)[1].split("/", 1)[0]
            return process, address, stderr_path
        if process.poll() is not None:
            raise SystemExit(f"repro watch exited {process.returncode}: {text[-2000:]}")
        time.sleep(0.2)
    process.kill()
    raise SystemExit("repro watch did not start serving within 30 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=1200.0, help="seconds to soak (default 1200)")
    parser.add_argument("--think", type=float, default=0.2, help="the watch's think time (default 0.2 s)")
    parser.add_argument("--rounds", type=int, default=8, help="rounds per canary conversation (default 8)")
    parser.add_argument("--stall-after", type=float, default=2.0)
    parser.add_argument("--restart-every", type=float, default=180.0, help="seconds between engine restarts")
    parser.add_argument("--fault-every", type=float, default=120.0, help="seconds between faults")
    parser.add_argument("--fault-window", type=float, default=20.0, help="seconds a fault stays armed")
    parser.add_argument("--sample-every", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=120.0)
    parser.add_argument("--max-rss-growth-mib", type=float, default=24.0)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="watch-soak-"))
    sim_config = SimConfig(dialect="sglang", itl=0.005)
    sim = start_sim_process(sim_config)
    port = int(sim.url.rsplit(":", 1)[1])
    proxy = start_proxy(sim.url, None, flow_log=work / "proxy-flows.jsonl")
    process, address, stderr_path = start_watch(work, proxy, sim, args)
    samples: list[dict] = []
    faults: list[dict] = []
    failures: list[str] = []
    restarts = 0
    started = time.monotonic()
    next_sample = next_restart = next_fault = 0.0
    next_restart, next_fault = args.restart_every, args.fault_every / 2
    fault_index = 0
    armed: dict | None = None
    try:
        while (elapsed := time.monotonic() - started) < args.duration:
            if process.poll() is not None:
                failures.append(f"the watch exited {process.returncode} at {elapsed:.0f} s")
                break
            if armed is not None and elapsed >= armed["at_s"] + args.fault_window:
                if armed["fault"] == "wedge":
                    proxy.disarm()
                    proxy.release()
                else:
                    httpx.delete(f"{sim.url}/sim/fault", timeout=5, trust_env=False)
                armed["lifted_s"] = round(elapsed, 1)
                armed = None
            elif armed is None and elapsed >= next_fault:
                fault = ("wedge", "engine")[fault_index % 2]
                fault_index += 1
                if fault == "wedge":
                    proxy.arm("wedge-after=2")
                    expected = ["client", "proxy", "connection-wedged"]
                else:
                    httpx.post(f"{sim.url}/sim/fault", json={"spec": "hang"}, timeout=5, trust_env=False)
                    expected = ["server", "engine-0", "engine-hung"]
                armed = {"fault": fault, "at_s": round(elapsed, 1), "expected": expected, "seen": []}
                faults.append(armed)
                next_fault = elapsed + args.fault_every
            if armed is None and elapsed >= next_restart:
                sim.stop()
                sim = start_sim_process(SimConfig(dialect="sglang", itl=0.005, port=port))
                restarts += 1
                next_restart = elapsed + args.restart_every
            if elapsed >= next_sample:
                try:
                    scrape_s, metrics = scrape(address)
                except (httpx.HTTPError, OSError) as exc:
                    failures.append(f"/metrics did not answer at {elapsed:.0f} s: {exc}")
                    metrics, scrape_s = {}, None
                incidents = open_incidents(metrics)
                if armed is not None:
                    armed["seen"].extend(list(i) for i in sorted(incidents - set(map(tuple, armed["seen"]))))
                samples.append({"t_s": round(elapsed, 1), **proc_status(process.pid), "scrape_s": scrape_s,
                                "rounds": rounds_by_outcome(metrics), "open_incidents": sorted(incidents)})
                next_sample = elapsed + args.sample_every
            time.sleep(0.25)
        # let the last incident clear: one conversation after the last fault was lifted
        if armed is not None:
            proxy.disarm()
            proxy.release()
            httpx.delete(f"{sim.url}/sim/fault", timeout=5, trust_env=False)
        clear_deadline = time.monotonic() + 60
        last_incidents: set = {("?",)}
        while time.monotonic() < clear_deadline and last_incidents:
            with contextlib.suppress(httpx.HTTPError, OSError):
                last_incidents = open_incidents(scrape(address)[1])
            time.sleep(1)
        if last_incidents:
            failures.append(f"incidents still open 60 s after the last fault was lifted: {sorted(last_incidents)}")
        stop_started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            exit_code = process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            exit_code = None
            failures.append("the watch did not exit within 15 s of SIGTERM")
        stop_s = time.monotonic() - stop_started
    finally:
        if process.poll() is None:
            process.kill()
        proxy.stop()
        sim.stop()

    if exit_code not in (0, None):
        failures.append(f"the watch exited {exit_code} on SIGTERM")
    for fault in faults:
        if "lifted_s" in fault and fault["expected"] not in [list(s) for s in fault["seen"]]:
            failures.append(f"fault {fault['fault']} at {fault['at_s']} s: no incident {fault['expected']} "
                            f"(seen {fault['seen']})")
    warm = [s for s in samples if s["t_s"] >= args.warmup] or samples
    growth = {key: warm[-1][key] - warm[0][key] for key in ("rss_kib", "fds", "threads")} if warm else {}
    if growth:
        if growth["rss_kib"] / 1024 > args.max_rss_growth_mib:
            failures.append(f"resident memory grew {growth['rss_kib'] / 1024:.1f} MiB after the warm-up")
        if growth["fds"] > 8:
            failures.append(f"open file descriptors grew by {growth['fds']}")
        if growth["threads"] > 2:
            failures.append(f"threads grew by {growth['threads']}")
    last_rounds = samples[-1]["rounds"] if samples else {}
    total_rounds = sum(last_rounds.values())
    # One conversation of the default cadence ends a round about every think time (plus the round's
    # own fraction of a second): what the soak's rounds would have taken at the defaults.
    default_hours = total_rounds * (DEFAULT_THINK_S + 0.1) / 2 / 3600  # two canary conversations
    scrapes = [s["scrape_s"] for s in samples if s["scrape_s"] is not None]
    result = {
        "duration_s": round(time.monotonic() - started, 1), "think_s": args.think, "rounds": last_rounds,
        "rounds_total": total_rounds, "default_cadence_hours": round(default_hours, 2),
        "engine_restarts": restarts, "faults": faults,
        "rss_mib": {"first": round(samples[0]["rss_kib"] / 1024, 1), "after_warmup": round(warm[0]["rss_kib"] / 1024, 1),
                    "last": round(samples[-1]["rss_kib"] / 1024, 1),
                    "max": round(max(s["rss_kib"] for s in samples) / 1024, 1)} if samples else {},
        # the curve, not only its ends: bounded buffers (probe samples per hop, an hour of hop history)
        # fill for their first hour, then it must stay flat
        "rss_mib_every_5min": [round(s["rss_kib"] / 1024, 1) for s in samples
                               if int(s["t_s"] // 300) != int((s["t_s"] - args.sample_every) // 300)],
        "fds": {"after_warmup": warm[0]["fds"], "last": warm[-1]["fds"], "max": max(s["fds"] for s in samples)}
        if samples else {},
        "threads": {"after_warmup": warm[0]["threads"], "last": warm[-1]["threads"],
                    "max": max(s["threads"] for s in samples)} if samples else {},
        "scrape_ms": {"median": round(statistics.median(scrapes) * 1000, 1), "max": round(max(scrapes) * 1000, 1)}
        if scrapes else {},
        "segments": len(list((work / "watch").glob("events-*.jsonl"))),
        "sigterm_exit": exit_code, "sigterm_s": round(stop_s, 2), "failures": failures, "work_dir": str(work),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
