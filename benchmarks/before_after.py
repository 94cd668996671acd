"""The driver before and after a change, side by side in one run: is it faster, or was the machine?

    python benchmarks/before_after.py REV            # REV (e.g. a40e877) against the working tree
    python benchmarks/before_after.py REV --repeat 5

REV is checked out into a temporary git worktree (removed afterwards). Each tree's own `ours`
client (benchmarks/streaming_clients.py, which counts events the way that tree's run log records
them) runs against the same simulated engine, alternately, `--repeat` times; medians are printed.
Four loads: a flood at 64, 256 and 1024 streams, and 1024 streams at an engine's pace (20
tokens/s each). On a noisy machine only a ratio measured like this means anything.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from repro.sim import SimConfig, start_sim_process  # noqa: E402

sys.path.insert(0, str(HERE))
from run import client, per_1k  # noqa: E402  (benchmarks/run.py: the same client runner)

LOADS = (("flood", 0.005, 64, 12), ("flood", 0.005, 256, 3), ("flood", 0.005, 1024, 3), ("pace", 0.05, 1024, 3))


def run_client(tree: Path, url: str, streams: int, rounds: int, max_tokens: int = 32) -> dict:
    result = client("ours", url, streams, rounds, max_tokens, tree=tree)
    return {"cpu_per_1k": per_1k(result), "lag_p99_ms": result["loop_lag_p99_ms"],
            "events_per_s": result["events"] / result["wall_s"]}


def compare(trees: dict[str, Path], repeat: int) -> list[dict]:
    rows = []
    for load, itl, streams, rounds in LOADS:
        runs: dict[str, list[dict]] = {name: [] for name in trees}
        with start_sim_process(SimConfig(ttft=itl, itl=itl, max_running=4096, max_tokens_default=32)) as sim:
            for _ in range(repeat):
                for name, tree in trees.items():
                    runs[name].append(run_client(tree, sim.url, streams, rounds))
        row: dict = {"load": load, "streams": streams}
        for name, results in runs.items():
            for figure in ("cpu_per_1k", "lag_p99_ms", "events_per_s"):
                row[f"{name}_{figure}"] = round(statistics.median(r[figure] for r in results), 4)
        row["cpu_after_over_before"] = round(row["after_cpu_per_1k"] / max(1e-9, row["before_cpu_per_1k"]), 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the git revision to compare the working tree against")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tree per load (default 3)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be >= 1, got {args.repeat}")
    with tempfile.TemporaryDirectory(prefix="repro-before-") as tmp:
        before = Path(tmp) / "tree"
        made = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(before), args.rev],
                              capture_output=True, text=True)
        if made.returncode != 0:
            parser.error(f"cannot check out {args.rev!r}: {made.stderr.strip()}")
        try:
            compare({"before": before, "after": ROOT}, args.repeat)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)], capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
