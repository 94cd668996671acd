"""`repro harness` on the real opencode (npm `opencode-ai`, pinned in tests/support/npm_harness.py)
over three faults: healthy, a wedged reused connection, a persistent 429. Each outcome checked
against opencode's own JSON events (kept per run by a tee wrapper) and its exit.

opencode runs offline: its config (an @ai-sdk/openai-compatible provider whose baseURL is the
proxy's) rendered into each run's folder from --config-template; a HOME kept in the harness cache
holds the provider package it installed on first use; no model catalogue fetch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.harness_process import ROOT
from tests.support.npm_harness import cache_dir, installed, offline_env

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(240)]

CONFIG = """{"provider": {"local": {"npm": "@ai-sdk/openai-compatible", "name": "local",
  "options": {"baseURL": "{proxy_url}/v1", "apiKey": "sk-local"},
  "models": {"sim-model": {"name": "sim-model"}}}},
 "model": "local/sim-model", "autoupdate": false, "share": "disabled"}
"""
KEEP = 'set -o pipefail; "$@" 2>&1 | tee "$KEEP_DIR/$(basename "$PWD").log"'
LIMIT_S = 25


def events(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[dict, Path]:
    opencode = str(installed("opencode"))
    top = tmp_path_factory.mktemp("opencode-sweep")
    template = top / "opencode.json.template"
    template.write_text(CONFIG)
    keep = top / "output"
    keep.mkdir()
    env = {**offline_env(cache_dir() / "home-opencode"), "KEEP_DIR": str(keep), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "repro", "harness", "--json", "--faults", "healthy,wedge-reused,429-retry-after",
            "--limit", str(LIMIT_S), "--config-template", str(template), "--",
            "bash", "-c", KEEP, "keep", opencode, "run", "--format", "json", "-m", "local/sim-model", "read notes.txt"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=230, cwd=ROOT, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout), keep


def tool_reads(lines: list[dict]) -> list[dict]:
    return [line["part"] for line in lines if line.get("type") == "tool_use" and line["part"].get("tool") == "read"]


def test_healthy_opencode_runs_three_reads_and_answers(sweep):
    result, keep = sweep
    lines = events(keep / "00-healthy.log")
    run = result["runs"][0]
    reads = tool_reads(lines)
    assert len(reads) == 3 and all(r["state"]["status"] == "completed" for r in reads)
    assert any(line.get("type") == "text" and line["part"]["text"].strip() for line in lines)
    assert run["exit_code"] == 0 and run["outcome"] == "finished"


def test_a_wedged_connection_leaves_opencode_waiting_without_an_error(sweep):
    result, keep = sweep
    lines = events(keep / "01-wedge-reused.log")
    run = result["runs"][1]
    # no final answer and no error printed within the limit (its fetch waits 300 s)
    assert not any(line.get("type") in ("text", "error") for line in lines)
    assert run["outcome"] == "hung" and run["exit_code"] is None and run["fault_at_s"] is not None


def test_a_persistent_429_as_opencode_shows_it(sweep):
    result, keep = sweep
    lines = events(keep / "02-429-retry-after.log")
    run = result["runs"][2]
    errors = [line for line in lines if line.get("type") == "error"]
    answered = any(line.get("type") == "text" for line in lines)
    assert not answered
    if run["exit_code"] is None:  # it keeps retrying past the limit
        assert run["outcome"] == "hung" and run["requests_after_fault"] >= 1
    else:
        assert run["exit_code"] != 0 and errors and run["outcome"] == "failed clearly"
