"""`--hop` without its url, on every command that takes --hop: one line naming the input and the
fix, exit 2 (issue 31: it printed `url None`). The commands are found from the parser itself, so a
command that starts taking --hop is held to it too."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from repro.cli import build_parser

pytestmark = [pytest.mark.network, pytest.mark.timeout(120)]  # child processes count as network here


def commands_taking_hop() -> list[str]:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(name for name, sub in subparsers.choices.items()
                  if any("--hop" in action.option_strings for action in sub._actions))


def test_the_commands_taking_hop_are_found():
    assert {"run", "triage", "watch", "audit"} <= set(commands_taking_hop())


@pytest.mark.parametrize("command", commands_taking_hop())
def test_a_hop_without_url_is_one_line_naming_it_and_the_fix(command):
    proc = subprocess.run([sys.executable, "-m", "repro", command, "--hop", "name=x"],
                          capture_output=True, text=True, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(lines) == 1, lines
    assert "--hop 'name=x'" in lines[0] and "missing url; add url=http://127.0.0.1:30000" in lines[0], lines
    assert "None" not in lines[0], lines
    assert len(lines[0]) <= 80, lines
