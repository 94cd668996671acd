"""Every subcommand's --help shows each option's default and two examples, and each example parses."""

from __future__ import annotations

import argparse
import contextlib
import io
import shlex

import pytest

from repro.cli import COMMANDS, build_parser
from repro.commands.help import EXAMPLES


def subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def help_text(name: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args([name, "--help"])
    return out.getvalue()


@pytest.mark.parametrize("name", COMMANDS)
def test_two_examples_close_the_help_and_each_parses(name):
    text = help_text(name)
    # As typed at a shell: a long example continues over lines ending in a backslash, a comment too
    # long to share its command's line stands above it.
    shell = text.split("examples:\n", 1)[1].replace("\\\n", " ")
    shown = [shlex.split(line, comments=True) for line in shell.splitlines() if line.strip()]
    shown = [argv for argv in shown if argv]
    assert len(EXAMPLES[name]) == 2 and shown == [shlex.split(e, comments=True) for e in EXAMPLES[name]]
    for example in EXAMPLES[name]:
        argv = shlex.split(example, comments=True)
        assert argv[:2] == ["repro", name]
        args = build_parser().parse_args(argv[1:])  # a usage error would exit here
        assert args.command == name


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_with_a_default_says_it(name):
    parser = subparser(name)
    text = " ".join(help_text(name).split())
    for action in parser._actions:
        if not action.option_strings or action.default in (None, False, argparse.SUPPRESS, []):
            continue
        help_of = " ".join((action.help or "").split())
        assert "default" in help_of.lower() or f"(default: {action.default})" in text, \
            f"{name} {action.option_strings[0]}: default {action.default!r} not shown"


def test_an_option_that_says_its_default_itself_is_not_told_twice():
    text = help_text("sim")
    assert "(default 1.13)" in text and "(default 1.13) (default" not in text
