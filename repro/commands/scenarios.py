"""`repro scenarios`: run the fault x topology matrix on 127.0.0.1 and print how accurate the verdicts are."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from repro.core.errors import UsageError
from repro.core.exits import EXIT_OK, EXIT_TOOL_FAILED
from repro.reporting.fit import Col, column_widths, fits, fitted_table


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "scenarios", help="run the fault x topology matrix and report verdict accuracy",
        description="Each scenario starts its own stack on 127.0.0.1 (simulated engines, the real sglang-router, "
                    "the mitmproxy fault proxy, the TCP relay, real nginx, HAProxy, socat, Caddy and mitmdump "
                    "with faults from outside), runs a short multi-round load, checks the verdict against the "
                    "expected one, and tears everything down. A scenario whose proxy is not installed is skipped.",
    )
    p.add_argument("--only", metavar="PATTERN", help="run the scenarios whose name matches (substring or glob)")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--out", type=Path, help="folder for the run logs (default: a temporary folder)")
    p.add_argument("--json", action="store_true", help="print a JSON list on stdout")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from repro.lab.matrix import select
    from repro.lab.runner import run_scenario
    from repro.lab.topology import missing_parts

    scenarios = select(args.only)
    if not scenarios:
        raise UsageError(f"--only {args.only!r} matches no scenario; see `repro scenarios --list`")
    console = Console(stderr=True)
    if args.list:
        for s in scenarios:
            notes = [f"skipped here: {reason}" for reason in [missing_parts(s)] if reason]
            notes += [f"known issue: {s.known_issue}"] if s.known_issue else []
            console.print(f"{s.name:36} expects {s.expect.text()}" + (f"  ({'; '.join(notes)})" if notes else ""),
                          markup=False, highlight=False, soft_wrap=True)
        return EXIT_OK
    out = args.out or Path(tempfile.mkdtemp(prefix="repro-scenarios-"))
    results = []
    for scenario in scenarios:
        result = run_scenario(scenario, out)
        results.append(result)
        if result.skipped:
            console.print(f"[yellow]skipped[/] {scenario.name}: {result.skipped}")
            continue
        mark = ("[green]ok[/]" if result.match else "[yellow]known issue[/]" if result.known_issue
                else "[bold red]MISMATCH[/]")
        console.print(f"{mark} {scenario.name}: expected {result.expected}, got {result.got}"
                      + (f" ({result.error})" if result.error else "")
                      + (f" - {result.known_issue}" if result.known_issue and not result.match else ""))
    ran = [r for r in results if not r.skipped]
    skipped = len(results) - len(ran)
    table = scenario_table(ran, skipped=skipped, width=console.width)
    console.print(table)
    console.print(f"run logs in {out}")
    if args.json:
        sys.stdout.write(json.dumps([r.to_dict() for r in results], indent=2) + "\n")
    # A known issue (the expected verdict is right, the classifier is not yet) is reported, not failed.
    return EXIT_OK if all(r.match or r.known_issue for r in ran) else EXIT_TOOL_FAILED


def scenario_table(ran, *, skipped: int, width: int) -> Table | Group:
    """The matrix's results (repro.lab.runner.ScenarioResult) fitted to `width` columns."""
    title = f"scenario matrix: {sum(r.match for r in ran)}/{len(ran)} match" + (f", {skipped} skipped" if skipped else "")
    # The time to a verdict is a figure, never wrapped: its budget, when every scenario has the
    # same, is said once in the title; otherwise beside it ("1.79/2.50"), without a space to break at.
    budgets = {r.verdict_budget_s for r in ran if r.verdict_budget_s is not None}
    one_budget = budgets.pop() if len(budgets) == 1 else None
    if one_budget is not None:
        title += f"; verdict budget {one_budget:.2f} s"
    columns = [Col("scenario"), Col("expected", shrink=True), Col("got", shrink=True), Col("confidence"),
               Col("verdict s" if one_budget is not None or not budgets else "verdict/ budget s", "right")]

    def spaced(verdict: str) -> str:
        """'client/nginx/connection-wedged' as 'client / nginx / connection-wedged': it may then wrap
        between its parts in a narrow terminal, never inside one."""
        return escape(verdict.replace("/", " / "))

    def timing(r) -> str:
        took = f"{r.time_to_verdict_s:.2f}" if r.time_to_verdict_s is not None else "-"
        shown = r.verdict_budget_s is not None and one_budget is None
        return took + (f"/{r.verdict_budget_s:.2f}" if shown else "")

    # A verdict as expected is not written twice: the expected one is beside it.
    rows = [[escape(r.scenario), spaced(r.expected), "same" if r.match else f"[bold red]{spaced(r.got)}[/]",
             r.confidence or "-", timing(r)] for r in ran]
    if fits(column_widths(columns, rows, width), width):
        return fitted_table(columns, rows, width=width, title=title)
    # Too narrow for two verdicts side by side without folding a word: a verdict not as expected
    # is said under the table, on a line of its own.
    short = [[*row[:2], "same" if r.match else "[bold red]diff[/]", *row[3:]] for row, r in zip(rows, ran, strict=True)]
    under = [Text.from_markup(f"{escape(r.scenario)} got: [bold red]{spaced(r.got)}[/]") for r in ran if not r.match]
    return Group(fitted_table(columns, short, width=width, title=title), *under)
