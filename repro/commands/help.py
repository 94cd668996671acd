"""How every subcommand's --help reads: each option's default shown, two examples at the end.

One place, not one per command module: a default is shown the same way everywhere ("(default: X)",
unless the option's own help already says what its default is), and the examples of all commands
are kept together, where a test checks that every command has two and that each parses.
"""

from __future__ import annotations

import argparse
import re

from repro.reporting.wrap import wrap

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
    "harness": (
        "repro harness --faults healthy,wedge-reused,429-retry-after -- python agent.py --base-url {proxy_url}/v1",
        "repro harness --config-template opencode.json.template --limit 120 --html harness.html -- "
        "opencode run --format json -m local/sim-model \"read notes.txt\"",
    ),
    "wrap": (
        "repro wrap --hop name=engine-0,url=http://127.0.0.1:30000 -- python agent.py",
        "repro wrap --hop name=engine-0,url=http://127.0.0.1:30000 --inject wedge-after=2 "
        "--config-template opencode.json.template -- opencode run -m local/m 'read notes.txt'",
    ),
    "diff": (
        "repro diff runs/healthy runs/broken",
        "repro diff runs/healthy runs/broken --json",
    ),
}


class DefaultsAndExamples(argparse.HelpFormatter):
    """Every command's formatter: "(default: X)" on an option whose default its help leaves unsaid,
    and every text laid out within the terminal by `layout` (no word broken at a hyphen, no number
    parted from its unit), whatever formatter the command asked for."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (default is None or default is False or default == argparse.SUPPRESS or "default" in text.lower()
                or not action.option_strings or default == []):
            return action.help
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"

    def _split_lines(self, text: str, width: int) -> list[str]:
        return wrap(" ".join(text.split()), width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return layout(text, width, indent)


def layout(text: str, width: int, indent: str = "") -> str:
    """A description or epilog within `width`: paragraphs (blank-line separated) of prose are
    refilled; "NAME<tab>TEXT" lines become two columns; an indented line (a table row, an example)
    keeps its start and continues under its own text column, or, in the examples, as a shell
    continuation line (a comment that does not fit goes on its own line above its command)."""
    out: list[str] = []
    examples = False
    for paragraph in re.split(r"\n[ \t]*\n", text.strip("\n")):
        lines = paragraph.splitlines()
        examples = examples or lines[0] == "examples:"
        rows = [line.split("\t", 1) for line in lines if "\t" in line]
        column = max((len(name) for name, _ in rows), default=0) + 4
        block: list[str] = []
        prose: list[str] = []
        for line in [*lines, ""]:
            if line and not line[0].isspace() and "\t" not in line:
                prose.append(line)
                continue
            if prose:
                block += [indent + part for part in wrap(" ".join(" ".join(prose).split()), width - len(indent))]
                prose = []
            if "\t" in line:
                name, row_text = line.split("\t", 1)
                block += _hanging(f"  {name:<{column - 2}}{row_text}", width, indent, column)
            elif line and examples:
                block += _example(line, width, indent)
            elif line:
                found = re.match(r"\s*\S+\s{2,}", line)
                block += _hanging(line, width, indent, found.end() if found else len(line) - len(line.lstrip()))
        out.append("\n".join(block))
    return "\n\n".join(out)


def _hanging(line: str, width: int, indent: str, column: int) -> list[str]:
    """A table row: its first line as written, the rest wrapped under its text column."""
    lead = len(line) - len(line[column:].lstrip()) if len(line) > column else len(line)
    head, rest = line[:lead], line[lead:]
    parts = wrap(rest, max(width - len(indent) - lead, 10))
    return [indent + head + parts[0]] + [indent + " " * lead + part for part in parts[1:]]


def _example(line: str, width: int, indent: str) -> list[str]:
    """An example as typed at a shell, within `width`: its comment above it when the two do not
    fit together, its arguments continued with a backslash."""
    lead = line[:len(line) - len(line.lstrip())]
    command, mark, comment = line.strip().partition("  # ")
    command = command.rstrip()
    room = width - len(indent) - len(lead)
    if mark and len(line) > width - len(indent):
        squeezed = f"{command}  # {comment}"
        if len(squeezed) <= room:
            return [indent + lead + squeezed]
        return [indent + lead + part for part in wrap(f"# {comment}", room)] + _example(lead + command, width, indent)
    if mark or len(line) <= width - len(indent):
        return [indent + line]
    # Each option with its value is one unit: a line breaks between options, not inside one.
    units: list[str] = []
    for token in command.split():
        if units and units[-1].startswith("-") and " " not in units[-1] and not token.startswith("-"):
            units[-1] += " " + token
        else:
            units.append(token)
    lines = [units[0]]
    for unit in units[1:]:
        limit = room - 2 - (4 if len(lines) > 1 else 0)  # room for " \\"; continuations 4 further in
        if len(lines[-1]) + 1 + len(unit) <= limit:
            lines[-1] += " " + unit
        else:
            lines.append(unit)
    return ([indent + lead + lines[0] + (" \\" if len(lines) > 1 else "")]
            + [indent + lead + "    " + line + " \\" for line in lines[1:-1]]
            + ([indent + lead + "    " + lines[-1]] if len(lines) > 1 else []))


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
