"""`repro run`'s console as a CI log sees it (stderr not a terminal, 80 columns): the start line,
plain progress lines at --progress-every, the condensed round table, where the report comes from;
and --json's stdout holding the summary alone."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.network, pytest.mark.timeout(120)]

PROGRESS = re.compile(r"^\[\d+ s\] (\d+)/40 done, \d+ stalled, \d+ failed, \d+ in flight, [\d.]+/s, TTFT p50 (\d+ ms|-)$")


def run_repro(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80", "PYTHONUNBUFFERED": "1"}
    env.pop("OPENAI_BASE_URL", None)
    return subprocess.run([sys.executable, "-m", "repro", "run", *args], capture_output=True, text=True,
                          timeout=100, env=env)


def test_a_long_run_says_where_it_writes_shows_progress_at_its_period_and_condenses_its_table(tmp_path):
    out = tmp_path / "run"
    proc = run_repro("--rounds", "20", "--conversations", "2", "--think-time", "0.1", "--progress-every", "0.5",
                     "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert lines[0] == "repro run: 2 conversations x 20 rounds against the embedded simulated engine"
    assert re.fullmatch(r"  hop engine-0  127\.0\.0\.1:\d+  embedded simulated engine", lines[1]), lines[1]
    assert lines[2] == f"  run folder: {out}"
    progress = [PROGRESS.match(line) for line in lines if line.startswith("[")]
    assert all(progress) and len(progress) >= 2, proc.stderr  # 20 rounds of 0.1 s think: over 2 s, a line each 0.5 s
    done = [int(m.group(1)) for m in progress]
    assert done == sorted(done) and done[-1] > 0
    assert "14 rounds without a problem left out (every round: --json, or the report)" in proc.stderr
    assert lines[-2:] == ["report: report.html (timeline, verdicts, rounds) and rounds.csv, made by:",
                          f"  repro report {out}"]
    assert all(len(line) <= 80 for line in lines if str(out) not in line), lines


def test_json_stdout_is_the_summary_alone_and_no_progress_with_0(tmp_path):
    proc = run_repro("--rounds", "2", "--conversations", "2", "--progress-every", "0", "--json",
                     "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["rounds_completed"] == 4 and len(summary["per_round"]) == 2
    assert not any(line.startswith("[") for line in proc.stderr.splitlines())
    assert f"run folder: {tmp_path / 'run'}" in proc.stderr


def test_a_negative_period_is_refused_in_one_line():
    proc = run_repro("--progress-every", "-1")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--progress-every must be >= 0" in proc.stderr
