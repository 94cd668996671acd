"""The watch's memory ceiling, held: a child process fills everything a watch of HOPS_WATCHED_MAX
hops keeps to its cap, then churns discovery (a hop renamed and judged every cycle) on a
compressed clock, and its peak RSS stays under the ceiling docs/watch-memory.md states."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from repro.core.evidence_book import MAX_SAMPLES_PER_HOP
from repro.core.watch_status import (
    CLEARED_INCIDENTS_KEPT,
    HOP_POINTS_KEPT,
    HOPS_WATCHED_MAX,
    OPEN_INCIDENTS_KEPT,
    VERDICT_SERIES_KEPT,
)
from repro.reporting.terminal import FEED_CAUSES_KEPT

# `network`: the conftest counts a child process with sockets (this one opens none).
pytestmark = [pytest.mark.network, pytest.mark.timeout(170)]
ROOT = Path(__file__).resolve().parents[2]
CEILING_LINE = re.compile(r"Ceiling: (\d+) MiB fixed \+ ([\d.]+) MiB a hop x (\d+) hops = (\d+) MiB")


def stated_ceiling() -> tuple[float, float, int, float]:
    """(fixed, per hop, hops, total) in MiB, as the doc says them."""
    found = CEILING_LINE.search((ROOT / "docs" / "watch-memory.md").read_text())
    assert found, "docs/watch-memory.md states no `Ceiling: F MiB fixed + P MiB a hop x N hops = T MiB` line"
    fixed, per_hop, hops, total = float(found[1]), float(found[2]), int(found[3]), float(found[4])
    assert total == pytest.approx(fixed + per_hop * hops, abs=1), "the ceiling's sum is wrong"
    return fixed, per_hop, hops, total


def test_a_watch_of_the_most_hops_stays_under_the_stated_ceiling_with_every_cap_full():
    fixed, per_hop, hops, total = stated_ceiling()
    assert hops == HOPS_WATCHED_MAX
    # 4200 cycles fill every per-hop cap (history 3600 points, loop lag 4096); 6000 of churn are
    # ~23x the caps they fill (256 open incidents, series, causes): past them, nothing grows.
    out = subprocess.run([sys.executable, "-m", "tests.support.watch_memory_drive", "--hops", str(hops),
                          "--fill", "4200", "--churn", "6000"], cwd=ROOT, capture_output=True, text=True,
                         timeout=160, check=True)
    measured = json.loads(out.stdout.splitlines()[-1])
    kept = measured["kept"]
    assert kept["samples_per_hop"] == MAX_SAMPLES_PER_HOP
    assert kept["history_per_hop"] == HOP_POINTS_KEPT
    assert kept["verdict_series"] == VERDICT_SERIES_KEPT
    assert kept["feed_causes"] == FEED_CAUSES_KEPT
    assert kept["incidents"] <= OPEN_INCIDENTS_KEPT + CLEARED_INCIDENTS_KEPT
    assert kept["canary_lists"] == 1 and kept["conversations"] == 0
    # What the caps hold (the peak past the child's own fixed part) within the per-hop part, and
    # the whole under the line: the child's fixed part is the imports alone, a real watch's more.
    assert measured["fixed_kib"] / 1024 < fixed, measured
    assert (measured["peak_kib"] - measured["fixed_kib"]) / 1024 < per_hop * hops, measured
    assert measured["peak_kib"] / 1024 < total, measured
