"""The `repro` command line: one subcommand per module of repro.commands.

Exit status: see repro.core.exits (and docs/commands.md#exit-status).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from repro import __version__
from repro.commands.help import CommandParser
from repro.core.errors import ReproError
from repro.core.exits import EXIT_INTERRUPTED, EXIT_USAGE

# Each module exposes `register(subparsers)`, whose parser sets `handler=handle`.
COMMANDS = ("run", "bench", "compare", "report", "triage", "probe", "proxy", "sim", "scenarios", "diff", "audit", "watch",
            "wrap", "harness")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="repro",
        description="Find where a multi-round LLM serving hang lives: client, proxy, router or engine.",
    )
    parser.add_argument("--version", action="version", version=f"repro {__version__}")
    # Every subcommand's parser shows its defaults and two examples (repro/commands/help.py).
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    for name in COMMANDS:
        # Imported by name, in order: the modules register their parsers; `repro --help` lists them so.
        importlib.import_module(f"repro.commands.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return args.handler(args)
    except ReproError as exc:
        print(f"repro {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
