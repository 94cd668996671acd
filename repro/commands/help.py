"""How every subcommand's --help reads: each option's default shown, two examples at the end.

One place, not one per command module: a default is shown the same way everywhere ("(default: X)",
unless the option's own help already says what its default is), and the examples of all commands
are kept together, where a test checks that every command has two and that each parses.
"""

from __future__ import annotations

import argparse

# Two examples a command, as typed at a shell. Each must parse (tests/commands/test_help.py).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "run": (
        "repro run --rounds 6 --conversations 4     # the embedded simulated engine",
        "repro run --target http://127.0.0.1:8080/v1 --hop name=nginx,url=http://127.0.0.1:8080,role=proxy "
        "--hop name=engine-0,url=http://127.0.0.1:30000,role=engine --rounds 20",
    ),
    "bench": (
        "repro bench --target http://127.0.0.1:30001/v1 --concurrency 16,32,64",
        "repro bench --target http://127.0.0.1:30001/v1 --target-b http://127.0.0.1:30002/v1 "
        "--concurrency 48,64,80 --repeat 4",
    ),
    "compare": (
        "repro compare runs/bench-before runs/bench-after",
        "repro compare runs/bench-before runs/bench-after --noise-band 2 --json",
    ),
    "report": (
        "repro report runs/20261205-064403-3530          # re-judge a recorded run, write report.html",
        "repro report runs/watch --since -1h --json      # the last hour of a watch's rotating log",
    ),
    "triage": (
        "repro triage --hop name=nginx,url=http://127.0.0.1:8080,role=proxy "
        "--hop name=engine-0,url=http://127.0.0.1:30000,role=engine",
        "repro triage --pid 4242 --topology stack.toml   # and the stuck harness's own sockets",
    ),
    "probe": (
        "repro probe http://127.0.0.1:30000 http://127.0.0.1:29000/metrics",
        "repro probe --prometheus http://127.0.0.1:9090 --selector 'job=\"sglang\"'",
    ),
    "proxy": (
        "repro proxy --upstream http://127.0.0.1:30000 --fault wedge-after=3   # each connection's 4th request held",
        "repro proxy --upstream http://127.0.0.1:30000 --fault hold-eom --port 8080",
    ),
    "sim": (
        "repro sim --port 30000 --dialect vllm",
        "repro sim --port 30000 --fault hang,after=5     # the engine's 6th request on, across all connections",
    ),
    "scenarios": (
        "repro scenarios --list",
        "repro scenarios --only proxy --json",
    ),
    "audit": (
        "repro audit --hop name=engine-0,url=http://127.0.0.1:30000,role=engine",
        "repro audit --topology stack.toml --upstream-keepalive nginx=60 --json",
    ),
    "watch": (
        "repro watch --hop name=nginx,url=http://127.0.0.1:8080,role=proxy "
        "--hop name=engine-0,url=http://127.0.0.1:30000,role=engine",
        "repro watch --prometheus http://127.0.0.1:9090 --selector 'job=\"sglang\"' --listen 127.0.0.1:9464",
    ),
    "diff": (
        "repro diff runs/healthy runs/broken",
        "repro diff runs/healthy runs/broken --json",
    ),
}


class DefaultsAndExamples(argparse.HelpFormatter):
    """Mixed into a command's own formatter: "(default: X)" on an option whose default its help
    leaves unsaid, and the examples' lines kept as written (argparse would refill them)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (default is None or default is False or default == argparse.SUPPRESS or "default" in text.lower()
                or not action.option_strings or default == []):
            return action.help
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        head, marker, examples = text.partition("examples:\n")
        if not marker:
            return super()._fill_text(text, width, indent)
        filled = super()._fill_text(head, width, indent) + "\n\n" if head.strip() else ""
        return filled + "".join(indent + line + "\n" for line in (marker + examples).splitlines()).rstrip("\n")


def examples_epilog(command: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES.get(command, ()))


class CommandParser(argparse.ArgumentParser):
    """The parser of one subcommand: its defaults shown, its examples after its own epilog."""

    def __init__(self, *args, **kwargs) -> None:
        own = kwargs.get("formatter_class", argparse.HelpFormatter)
        kwargs["formatter_class"] = type(f"{own.__name__}WithDefaults", (DefaultsAndExamples, own), {})
        super().__init__(*args, **kwargs)
        command = self.prog.split()[-1]
        if command in EXAMPLES:
            self.epilog = f"{self.epilog.rstrip()}\n\n{examples_epilog(command)}" if self.epilog else examples_epilog(command)

    def add_argument(self, *args, **kwargs):
        # argparse prints nothing for an option without help, not even its default: give it one.
        if "help" not in kwargs and kwargs.get("default") not in (None, False, argparse.SUPPRESS):
            kwargs["help"] = "(default: %(default)s)"
        return super().add_argument(*args, **kwargs)
