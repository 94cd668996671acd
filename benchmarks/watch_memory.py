"""What `repro watch` keeps, measured as RSS: the fixed part, the cost per hop at every cap, and the
growth over many compressed cycles once the caps are reached (docs/watch-memory.md quotes it).

    python benchmarks/watch_memory.py                      # 1, 16 and 64 hops, 10^5 churn cycles
    python benchmarks/watch_memory.py --hops 64 --churn 20000 --json

Each row is a child process of its own (tests/support/watch_memory_drive.py: the watch's status,
books, feed and exposition fed a watch's events on a compressed clock, one second per cycle):
RSS after the imports (fixed), after `--fill` cycles of every hop sampled and canaried (every
per-hop buffer at its cap), and after `--churn` cycles of discovery renaming a hop per cycle with a
verdict at each (incidents, verdict series, feed causes at their caps); peak is VmHWM. The growth
per 10^4 churn cycles is the slope between half-way and the end of the churn, measured by a
second child with half the churn: flat caps give ~0.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB_KIB = 1024


def drive(hops: int, fill: int, churn: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "tests.support.watch_memory_drive", "--hops", str(hops),
                          "--fill", str(fill), "--churn", str(churn)],
                         cwd=ROOT, capture_output=True, text=True, timeout=1800, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hops", type=int, action="append", help="hops watched (repeatable; default 1, 16, 64)")
    parser.add_argument("--fill", type=int, default=4200, help="cycles that fill every per-hop cap (default 4200)")
    parser.add_argument("--churn", type=int, default=100_000, help="cycles of hops renamed (default 10^5)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for hops in args.hops or [1, 16, 64]:
        whole = drive(hops, args.fill, args.churn)
        half = drive(hops, args.fill, args.churn // 2)
        per_hop = (whole["filled_kib"] - whole["fixed_kib"]) / hops / MIB_KIB
        slope = (whole["churned_kib"] - half["churned_kib"]) / (args.churn / 2) * 10_000 / MIB_KIB
        rows.append({**whole, "per_hop_mib": round(per_hop, 2), "growth_mib_per_10k_cycles": round(slope, 3)})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'hops':>4} {'fixed':>7} {'filled':>7} {'churned':>8} {'peak':>7} {'per hop':>8} "
          f"{'growth/10^4':>11}  (MiB; {args.fill} fill, {args.churn} churn cycles)")
    for r in rows:
        print(f"{r['hops']:>4} {r['fixed_kib'] / MIB_KIB:>7.1f} {r['filled_kib'] / MIB_KIB:>7.1f} "
              f"{r['churned_kib'] / MIB_KIB:>8.1f} {r['peak_kib'] / MIB_KIB:>7.1f} {r['per_hop_mib']:>8.2f} "
              f"{r['growth_mib_per_10k_cycles']:>11.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
