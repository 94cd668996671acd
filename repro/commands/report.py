"""`repro report RUN_DIR`: re-judge a recorded run and write report.html beside its log."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="re-judge a recorded run; write a self-contained HTML report",
                              description="Re-judge a recorded run offline with the same classifier and write "
                              "RUN_DIR/report.html (a timeline plot, the verdicts, the round table).")
    p.add_argument("run_dir", type=Path, help="a run folder written by `repro run` (holds events.jsonl)")
    p.add_argument("--html", type=Path, help="where to write the HTML (default RUN_DIR/report.html)")
    p.add_argument("--json", action="store_true", help="print the re-judged verdicts as JSON on stdout")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from repro.commands.options import exit_code
    from repro.reporting.run_report import ROUNDS_CSV, write_report
    from repro.reporting.terminal import group_by_cause, rounds_named, tally_line, verdict_tally

    path, data = write_report(args.run_dir, args.html)  # a RunLogError says which log and why
    console = Console(stderr=True)
    for note in data.notes:
        console.print(f"[yellow]note:[/] {note}")
    verdicts = [v.to_dict() for v in data.verdicts]
    tally = {(t["side"], t["where"], t["kind"]): t for t in verdict_tally(verdicts)}
    for group in group_by_cause(data.verdicts):
        v = group[0]
        console.print(f"{tally_line(tally[(v.side, v.where, v.kind)])} ({v.confidence}): {v.summary}; "
                      f"{rounds_named(group)}", highlight=False)
    if args.json:
        sys.stdout.write(json.dumps({"verdicts": verdicts, "report": str(path), "notes": data.notes}, indent=2) + "\n")
    console.print(f"report: {path}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"rounds as CSV: {path.parent / ROUNDS_CSV}", markup=False, highlight=False, soft_wrap=True)
    summary = dict(data.summary or {"rounds_stalled": len(verdicts)})
    summary["verdicts"] = verdicts
    summary["interrupted"] = False
    summary.setdefault("rounds_stalled", 0)
    return exit_code(summary)
