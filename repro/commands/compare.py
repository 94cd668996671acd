"""`repro compare RUN_A RUN_B`: two bench runs (before and after a change), level by level, with significance."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from repro.commands.options import positive


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "compare", help="compare two bench runs level by level: the difference, its CI, and whether it is noise",
        description="Compare deployment A of two `repro bench` folders (e.g. before and after a restart with a "
        "setting flipped): per concurrency level both measured, RUN_B's output tokens/s against RUN_A's with a "
        "95% bootstrap CI and a word (significant, or flat within noise). Runs made apart in time share no "
        "interleaving: a drift of the machine between them shows up as a difference. Runs whose load-shaping "
        "settings differ (max_tokens, prompts, client, levels, ...) are not like for like: each difference is "
        "printed and no level is called significant. Below the table, what deployment A's hops reported running "
        "in each run, where it differs (`repro diff` sets it beside the verdicts).",
    )
    p.add_argument("run_a", type=Path, help="the baseline bench folder (holds bench.json)")
    p.add_argument("run_b", type=Path, help="the bench folder to compare against it")
    p.add_argument("--noise-band", type=float, default=1.0, metavar="PCT",
                   help="a difference is significant only when its 95%% CI lies wholly beyond +-PCT %% (default 1; "
                        "0: when the CI excludes 0)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON on stdout")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from repro.reporting.bench_html import comparison_table
    from repro.reporting.bench_results import (
        deployment_deltas_between_runs,
        levels_between_runs,
        read_bench,
        settings_differ,
        warnings_of,
    )
    from repro.reporting.deployment_diff import delta_line

    data_a, data_b = read_bench(args.run_a), read_bench(args.run_b)
    positive("--noise-band", args.noise_band, allow_zero=True)
    differ = settings_differ(data_a.get("settings", {}), data_b.get("settings", {}))
    rows = levels_between_runs(data_a, data_b, str(args.run_a), str(args.run_b), args.noise_band, differ)
    changed = deployment_deltas_between_runs(data_a, data_b)
    warnings = [f"{name}: {line}" for name, data in ((args.run_a, data_a), (args.run_b, data_b))
                for line in warnings_of(data)]
    if args.json:
        sys.stdout.write(json.dumps({"run_a": str(args.run_a), "run_b": str(args.run_b), "levels": rows,
                                     "like_for_like": not differ, "settings_differ": differ, "warnings": warnings,
                                     "deployment_deltas": changed}, indent=2, default=str) + "\n")
    console = Console(stderr=True)
    console.print(comparison_table(rows, a=str(args.run_a), b=str(args.run_b)))
    for key, (value_a, value_b) in differ.items():
        console.print(f"[yellow]warning:[/] the bench settings differ: {key} {_shown(value_a)} in {args.run_a}, "
                      f"{_shown(value_b)} in {args.run_b}", highlight=False)
    if differ:
        console.print("[yellow]not like for like:[/] the two runs loaded the deployment differently, so their "
                      "difference is not the deployment's; bench both with the same settings", highlight=False)
    for line in warnings:
        console.print(f"[yellow]warning:[/] {escape(line)}", highlight=False)
    if changed is None:
        console.print("deployment: not recorded in both runs (bench them again with this repro to compare what "
                      "each ran)", highlight=False)
    elif not changed:
        console.print("deployment: every hop of A reported the same in both runs", highlight=False)
    else:
        console.print(f"deployment A, {args.run_a} -> {args.run_b}:", highlight=False)
        for delta in changed:
            console.print(f"  {delta_line(delta)}", highlight=False, markup=False)
    return 0


def _shown(value) -> str:
    return "not recorded" if value is None else str(value)
