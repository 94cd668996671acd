"""A short soak (benchmarks/soak.py): 400 rounds x 20 conversations through the fault proxy cycling
faults (held responses long enough to stall, cuts, drops, keep-alive races, delays): every round
has an outcome, and fds, threads, tasks, proxy flows and memory come back to where they were."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from soak import soak  # noqa: E402

pytestmark = [pytest.mark.network, pytest.mark.timeout(110), pytest.mark.slow]

SHORT_MIX = [
    ("hold-response,path=/v1/chat", 1.5),  # past the 1 s stall trigger: stalls, the judge, canaries
    ("truncate-reset=2", 0.2),
    ("drop", 0.15),
    ("keepalive-race", 0.3),
    ("delay=20", 0.3),
]


def test_short_soak_leaks_nothing_and_loses_no_round(tmp_path):
    result = soak(400, 20, out=tmp_path / "run", fault_mix=SHORT_MIX, pass_window=0.2, rss_budget_mb=25,
                  run_timeout=90)
    failed = [name for name, ok in result["checks"].items() if not ok]
    assert not failed, (failed, {k: v for k, v in result.items() if k != "rss_mb"})
    assert result["rounds_total"] == 400 and sum(result["outcomes"].values()) == 400
    # the mix really bit: some rounds were cut, some stalled and were judged
    assert result["outcomes"].get("failed", 0) > 0, result["outcomes"]
    assert result["verdicts"] > 0, (result["outcomes"], result["top_errors"])
    assert result["faults_armed"].get("hold-response,path=/v1/chat", 0) >= 1
