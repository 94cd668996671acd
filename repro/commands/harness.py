"""`repro harness [--faults LIST] [--api ...] -- CMD ARGS...`: what a harness does under each fault
(repro.session.harness_sweep), tabulated (repro.reporting.harness_table)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from repro.core.errors import UsageError
from repro.core.exits import EXIT_INTERRUPTED, EXIT_OK
from repro.core.harness_faults import DEFAULT_FAULTS, pick_faults
from repro.reporting.harness_table import heading_lines, sweep_html, sweep_json, table_lines
from repro.session.harness_sweep import API_PATHS, TOOL_NAMES, SweepPlan, run_sweep

FAULT_LIST = "\n".join(f"{fault.name}\t{fault.what}" for fault in DEFAULT_FAULTS)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "harness",
        help="run a harness once per fault and tabulate what it does",
        description="Run the harness command once per fault against the simulated engine (a scripted "
        "agent loop: tool calls on notes.txt in the harness's working folder, then a final answer) "
        "through the fault proxy, and tabulate per fault: recovered, failed clearly, or hung, with the "
        "time it took to notice. A harness still running shortly before the limit is judged once, as "
        "`repro wrap` judges a stall (the proxy and the engine, the harness's sockets and threads): "
        "repro's verdict goes under the hung row. The harness is pointed at the proxy by OPENAI_BASE_URL, "
        "OPENAI_API_BASE, ANTHROPIC_BASE_URL, a {proxy_url} in its arguments, and --config-template. "
        "The total bound is printed before the first fault; every process is stopped by its pid. "
        "Faults:\n" + FAULT_LIST,
    )
    p.add_argument("--faults", metavar="LIST", help="comma-separated fault names (default: all, in order)")
    p.add_argument("--api", choices=tuple(API_PATHS), default="chat",
                   help="the wire API the harness speaks: the proxy counts only its path's requests")
    p.add_argument("--limit", type=float, metavar="S",
                   help="seconds each fault may take before the harness is called hung (default: each fault's own)")
    p.add_argument("--config-template", type=Path, metavar="FILE",
                   help="a config file with {proxy_url}, rendered into each run's working folder")
    p.add_argument("--tools", default=TOOL_NAMES, metavar="NAMES",
                   help="the tool the engine calls: the first of these the harness offers")
    p.add_argument("--json", action="store_true", help="print the runs as JSON instead of the table")
    p.add_argument("--html", type=Path, metavar="FILE", help="also write the table as an HTML page")
    # Not `command`: repro.cli names the subcommand so (its errors say `repro harness: ...`).
    p.add_argument("harness_argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="the harness command, run in a fresh working folder per fault: give paths absolute")
    p.set_defaults(handler=handle)


def plan_from_args(args: argparse.Namespace) -> SweepPlan:
    argv = list(args.harness_argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("no harness command given: put it after `--`, e.g. "
                         "`repro harness -- opencode run --format json \"read notes.txt\"`")
    if "/" in argv[0] and not Path(argv[0]).is_absolute():
        argv[0] = str(Path(argv[0]).absolute())  # it runs in another folder: keep the one meant here
    if shutil.which(argv[0]) is None:  # before any engine or proxy starts
        raise UsageError(f"harness command {argv[0]!r} not found or not executable: give its path or put it on PATH")
    names = [name.strip() for name in args.faults.split(",") if name.strip()] if args.faults else None
    if args.limit is not None and not args.limit > 0:
        raise UsageError(f"--limit {args.limit:g}: give a positive number of seconds, e.g. --limit 60")
    try:
        faults = pick_faults(names, args.limit)
    except KeyError as exc:
        known = ", ".join(fault.name for fault in DEFAULT_FAULTS)
        raise UsageError(f"--faults: unknown fault {exc.args[0]!r}; use some of: {known}") from None
    if args.config_template is not None and not args.config_template.is_file():
        raise UsageError(f"--config-template {args.config_template}: no such file; give the harness's config "
                         "file with {proxy_url} where its base URL goes")
    if args.html is not None and not args.html.parent.is_dir():
        raise UsageError(f"--html {args.html}: folder {args.html.parent} does not exist; give a path in an "
                         "existing folder")
    return SweepPlan(tuple(argv), faults, api=args.api, config_template=args.config_template,
                     tool_names=args.tools)


def handle(args: argparse.Namespace) -> int:
    plan = plan_from_args(args)
    # The bound goes to stderr under --json, so stdout stays one JSON document.
    heading = sys.stderr if args.json else sys.stdout
    for line in heading_lines(plan.argv, len(plan.faults), plan.bound_s):
        print(line, file=heading, flush=True)
    lines_shown = 0

    def show(run) -> None:
        nonlocal lines_shown
        if args.json:
            return
        lines = table_lines([run.to_json()])
        print("\n".join(lines if lines_shown == 0 else lines[1:]), flush=True)
        lines_shown += 1

    sweep = run_sweep(plan, show)
    if args.json:
        print(json.dumps(sweep_json(plan.argv, sweep.runs, api=plan.api, bound_s=plan.bound_s,
                                    interrupted=sweep.interrupted), indent=2))
    if args.html is not None:
        args.html.write_text(sweep_html(plan.argv, [run.to_json() for run in sweep.runs]))
    return EXIT_INTERRUPTED if sweep.interrupted else EXIT_OK
