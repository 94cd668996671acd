"""`repro diff RUN_A RUN_B`: what changed in the deployment between two runs, beside their
verdicts, and which changes a verdict can implicate."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.text import Text

PER_HOP_SHOWN = 20  # a hop present in one run only brings every setting it has; --json lists them all


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "diff", help="what changed in each hop's deployment between two runs, and which verdicts it can explain",
        description="Compare the deployment record of two run folders (each hop's version and settings, read "
                    "when the run started) and list the deltas beside each run's verdicts, saying for each "
                    "delta whether a verdict's own evidence lets it explain that verdict: an engine setting "
                    "cannot explain a stall judged client-side while that engine sat idle.",
    )
    p.add_argument("run_a", type=Path, help="the first run folder (e.g. the healthy one), written by `repro run --out`")
    p.add_argument("run_b", type=Path, help="the second run folder (e.g. the broken one)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON on stdout")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from repro.reporting.deployment_diff import compare, delta_line, implication_line, load_run
    from repro.reporting.terminal import verdict_label

    a, b = load_run(args.run_a, "A"), load_run(args.run_b, "B")  # a one-line error names the folder and the fix
    result = compare(a, b)
    for delta in result["deltas"]:
        for imp in delta["implications"]:
            imp["text"] = implication_line(delta, imp)
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
        return 0
    console = Console(highlight=False)
    for label, run in result["runs"].items():
        causes = "; ".join(f"{g['count']} x {verdict_label(g['side'], g['where'], g['kind'])}"
                           for g in run["verdicts"]) or "none"
        rounds = f"{run['rounds']}; " if run["rounds"] else ""
        say(console, f"run {label}: {run['folder']} ({rounds}verdicts: {causes})", bold=len(f"run {label}"))
    deltas = result["deltas"]
    if not deltas:
        say(console, "no deployment deltas: every hop read the same in both runs (see `read` in --json for "
                     "what each hop exposed)")
        return 0
    head = f"{len(deltas)} deployment delta(s), run A -> run B"
    say(console, f"{head} (what each hop reported when its run started):", bold=len(head))
    shown: dict[str, int] = {}
    for delta in deltas:
        shown[delta["hop"]] = shown.get(delta["hop"], 0) + 1
        if shown[delta["hop"]] > PER_HOP_SHOWN:
            continue
        say(console, delta_line(delta), indent="  ")
        for imp in delta["implications"]:
            line = imp["text"].removeprefix(delta_line(delta) + ": ")
            say(console, f"-> {line}", indent="    ", style={False: "green", True: "red"}.get(imp["can_explain"], "yellow"))
    for hop, count in shown.items():
        if count > PER_HOP_SHOWN:
            say(console, f"... {hop}: {count - PER_HOP_SHOWN} more delta(s) (--json lists them all)", indent="  ")
    if not any(run["verdicts"] for run in result["runs"].values()):
        say(console, "neither run has a verdict: no stall or failure for a delta to explain")
    return 0


def say(console: Console, text: str, *, indent: str = "", style: str | None = None, bold: int = 0) -> None:
    """One entry within the terminal's width, continued 4 columns further in; its first `bold`
    characters bold. Text, not markup: a setting's value may hold brackets."""
    from repro.reporting.wrap import wrap

    width = max(console.width, 40)
    first = wrap(text, width - len(indent))[0]
    rest = wrap(text[len(first):].strip(), width - len(indent) - 4) if text[len(first):].strip() else []
    for number, line in enumerate([first, *rest]):
        shown = Text(indent + ("    " if number else "") + line, style=style or "")
        if number == 0 and bold:
            shown.stylize("bold", len(indent), len(indent) + bold)
        console.print(shown, soft_wrap=True)
