"""The scenario matrix, one test per scenario (`-k proxy-wedge`): each must match its expected
verdict within the verdict budget and leave no process or port behind.

The full matrix runs here (about two minutes on 2 cores): it is the proof that the verdicts are
right on stacks like the users', so CI runs all of it rather than a sample."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from repro.scenarios import MATRIX, run_scenario

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def child_pids() -> set[int]:
    me = str(os.getpid())
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me and fields[0] != "Z":
                pids.add(int(entry.name))
    return pids


def listening(url: str) -> bool:
    parts = urlsplit(url)
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((parts.hostname, parts.port)) == 0


@pytest.mark.parametrize("scenario", MATRIX, ids=[s.name.replace("/", "-") for s in MATRIX])
def test_scenario_matches_within_budget_and_leaves_nothing_behind(scenario, tmp_path):
    before = child_pids()
    result = run_scenario(scenario, tmp_path)
    assert result.match, (result.expected, result.got, result.error, result.verdict)
    if result.time_to_verdict_s is not None:
        # budget: stall trigger + two probe intervals (+0.5 s for a loaded CI machine)
        assert result.time_to_verdict_s <= result.verdict_budget_s + 0.5, (result.time_to_verdict_s,
                                                                           result.verdict_budget_s)
    assert child_pids() <= before, "the scenario left a child process running"
    still_open = [url for url in result.urls if listening(url)]
    assert not still_open, f"ports still listening: {still_open}"
