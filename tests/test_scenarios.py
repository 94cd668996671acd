"""The whole scenario matrix must match, and no scenario may leave a process or a port behind.

The full matrix runs here (about two minutes on 2 cores): it is the proof that the verdicts are
right on stacks like the users', so CI runs all of it rather than a sample."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from repro.scenarios import MATRIX, run_scenario

pytestmark = pytest.mark.timeout(600)


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


def test_every_scenario_matches_within_budget_and_leaves_nothing_behind(tmp_path):
    before = child_pids()
    results = [run_scenario(s, tmp_path) for s in MATRIX]
    mismatches = [(r.scenario, r.expected, r.got, r.error) for r in results if not r.match]
    assert not mismatches
    late = [(r.scenario, r.time_to_verdict_s, r.verdict_budget_s) for r in results
            if r.time_to_verdict_s is not None and r.time_to_verdict_s > r.verdict_budget_s + 0.5]
    assert not late  # budget: stall trigger + two probe intervals (+0.5 s for a loaded CI machine)
    assert child_pids() <= before, "a scenario left a child process running"
    still_open = [url for r in results for url in r.urls if listening(url)]
    assert not still_open, f"ports still listening: {still_open}"
