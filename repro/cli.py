"""The `repro` command line: one subcommand per module, each registering its own parser.

Exit status (the contract in DESIGN.md): 0 no stall; 10 stall judged client-side;
11 server-side; 12 stall, side unknown; 2 usage error; 1 the tool itself failed.
"""

from __future__ import annotations

import argparse
import importlib
import sys

EXIT_OK = 0
EXIT_TOOL_FAILED = 1
EXIT_USAGE = 2
EXIT_CLIENT_SIDE = 10
EXIT_SERVER_SIDE = 11
EXIT_SIDE_UNKNOWN = 12

# Each module exposes `register(subparsers)`; its parser sets `handler(args) -> int`.
COMMAND_MODULES = [
    "repro.run_command",
    "repro.report_command",
    "repro.sim.command",
    "repro.triage_command",
    "repro.scenarios_command",
    "probes.command",
    "proxies.command",
]


class UsageError(Exception):
    """Bad input: the message is one line that names the input and the fix."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="repro",
        description="Find where a multi-round LLM serving hang lives: client, proxy, router or engine.",
    )
    from repro import __version__

    parser.add_argument("--version", action="version", version=f"repro {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return args.handler(args)
    except UsageError as exc:
        print(f"repro {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
