"""`repro run --shard K/N` merged by `repro report` against one process driving everything: the
counts and verdicts of each, side by side (docs/kubernetes.md quotes them).

    python benchmarks/shards.py                          # healthy, 24 x 4, 3 shards; hang, 6 x 2, 3 shards
    python benchmarks/shards.py --conversations 48 --rounds 4 --shards 4 --fault none

Each arm gets a simulated engine of its own in its own process (a hang holds what it admitted):
one `repro run` drives all the conversations, then N `repro run --shard K/N` run at once against
the second engine; the merged counts come from repro.reporting.merged_runs, the verdicts and exit
status from `repro report --json` on the single run's folder and on the folder of the shards.
Wall times include each process's start (an interpreter and its imports each).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from repro.reporting.merged_runs import merged_log  # noqa: E402
from repro.reporting.rejudge import rejudge_log  # noqa: E402
from repro.sim import SimConfig, start_sim_process  # noqa: E402

COUNTS = ("rounds_total", "rounds_completed", "rounds_stalled", "rounds_failed", "rounds_skipped")
TIMEOUT_S = 300


def run_args(url: str, out: Path, conversations: int, rounds: int, *more: str) -> list[str]:
    return [sys.executable, "-m", "repro", "run", "--json", "--hop", f"name=engine-0,url={url},role=engine",
            "--conversations", str(conversations), "--rounds", str(rounds), "--stall-after", "1",
            "--canary-timeout", "1", "--probe-interval", "0.25", "--progress-every", "0", "--out", str(out), *more]


def report(folder: Path) -> tuple[int, dict[str, int]]:
    out = subprocess.run([sys.executable, "-m", "repro", "report", str(folder), "--json"], capture_output=True,
                         text=True, timeout=TIMEOUT_S)
    kinds = Counter(f"{v['side']}/{v['where']}/{v['kind']}" for v in json.loads(out.stdout)["verdicts"])
    return out.returncode, dict(kinds)


def measure(fault: str | None, conversations: int, rounds: int, shards: int, base: Path) -> dict:
    config = SimConfig(fault=fault)
    with start_sim_process(config) as engine:
        began = time.monotonic()
        out = subprocess.run(run_args(engine.url, base / "single", conversations, rounds), capture_output=True,
                             text=True, timeout=TIMEOUT_S)
        single_s = time.monotonic() - began
    single = json.loads(out.stdout)
    with start_sim_process(config) as engine:
        began = time.monotonic()
        procs = [subprocess.Popen(run_args(engine.url, base / "sharded", conversations, rounds, "--shard",
                                           f"{k}/{shards}"), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True) for k in range(shards)]
        parts = [json.loads(p.communicate(timeout=TIMEOUT_S)[0]) for p in procs]
        sharded_s = time.monotonic() - began
    merged = rejudge_log(merged_log([Path(part["run_dir"]) for part in parts])).summary or {}
    return {"fault": fault or "none", "conversations": conversations, "rounds": rounds, "shards": shards,
            "single": {k: single[k] for k in COUNTS}, "merged": {k: merged.get(k) for k in COUNTS},
            "per_shard_rounds": [part["rounds_total"] for part in parts],
            "single_report": report(base / "single"), "merged_report": report(base / "sharded"),
            "single_s": round(single_s, 1), "sharded_s": round(sharded_s, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--fault", choices=("none", "hang"), help="one arm only (default: both)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    arms = [("none", 24, 4), ("hang", 6, 2)]
    if args.fault:
        arms = [arm for arm in arms if arm[0] == args.fault]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for index, (fault, conversations, rounds) in enumerate(arms):
            results.append(measure(None if fault == "none" else fault, args.conversations or conversations,
                                   args.rounds or rounds, args.shards, Path(tmp) / str(index)))
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for r in results:
        print(f"fault {r['fault']}: {r['conversations']} conversations x {r['rounds']} rounds, "
              f"{r['shards']} shards ({'/'.join(map(str, r['per_shard_rounds']))} rounds)")
        for name in ("single", "merged"):
            counts = r[name]
            code, kinds = r[f"{name}_report"]
            print(f"  {name:<6} {counts['rounds_completed']}/{counts['rounds_total']} completed, "
                  f"{counts['rounds_stalled']} stalled, {counts['rounds_failed']} failed, "
                  f"{counts['rounds_skipped']} skipped; exit {code}; verdicts {kinds or 'none'}")
        print(f"  wall: single {r['single_s']} s, shards {r['sharded_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
