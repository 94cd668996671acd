"""Everything `repro watch` prints fits 80 columns, in a wider terminal too (issue 31, defect 8):
its banner, its warnings and notes, its verdict panels, its last lines; its own lines never part
a number from its unit or cut a word."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len

from repro.sim import SimConfig, serve_in_thread

pytestmark = [pytest.mark.network, pytest.mark.timeout(120)]

PANEL = ("╭", "│", "╰")
# Run from tmp_path (a path longer than a line can only stay whole on a line of its own): the
# repository's code all the same.
REPO = os.environ.get("PYTHONPATH") or str(Path(__file__).resolve().parents[2])


def test_every_line_fits_80_columns_in_a_200_column_terminal(tmp_path):
    with serve_in_thread(SimConfig()) as sim:
        hop = f"name=engine-with-a-rather-long-name-0,url={sim.url},role=engine"
        # --think not below --keepalive-expiry: the warning; a hang after 3 requests: stalls, panels, notes.
        out = subprocess.run(
            [sys.executable, "-m", "repro", "watch", "--hop", hop, "--listen", "127.0.0.1:0",
             "--out", "a-watch-folder-with-a-long-name", "--duration", "10",
             "--think", "0.2", "--keepalive-expiry", "0.2", "--rounds", "3", "--stall-after", "2",
             "--canary-every", "1", "--canary-timeout", "1", "--max-tokens", "1000"],
            capture_output=True, text=True, timeout=90, cwd=tmp_path,
            env={**os.environ, "COLUMNS": "200", "PYTHONPATH": REPO},
            # the engine hangs once it admitted 3 requests
            input=None) if _armed(sim.url) else None
    assert out is not None and out.returncode == 0, out and out.stderr[-2000:]
    lines = out.stderr.splitlines()
    assert any(line.startswith("cost:") for line in lines) and any(line.startswith("╭") for line in lines), lines
    assert any(line.startswith("warning: --think") for line in lines), lines
    wide = [line for line in lines if cell_len(line) > 80]
    assert not wide, wide
    own = [line for line in lines if not line.startswith(PANEL)]
    for line, after in zip(own, own[1:], strict=False):
        if after.startswith(" "):  # a wrapped line goes on: its end is not a number whose unit went on
            assert not re.search(r"(^|\s)[~(]?\d[\d.,]*$", line), (line, after)
    said = " ".join(out.stderr.split())
    assert "600 chat requests/min" in said and "watch ended" in said


def _armed(url: str) -> bool:
    import httpx

    response = httpx.post(f"{url}/sim/fault", json={"spec": "hang,after=3"}, timeout=5, trust_env=False)
    return response.status_code == 200
