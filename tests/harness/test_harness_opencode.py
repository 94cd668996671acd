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
from tests.support.npm_harness import cache_dir, installed, json_lines, offline_env

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(240)]

CONFIG = """{"provider": {"local": {"npm": "@ai-sdk/openai-compatible", "name": "local",
  "options": {"baseURL": "{proxy_url}/v1", "apiKey": "sk-local"},
  "models": {"sim-model": {"name": "sim-model"}}}},
 "model": "local/sim-model", "autoupdate": false, "share": "disabled"}
"""
KEEP = 'set -o pipefail; "$@" 2>&1 | tee "$KEEP_DIR/$(basename "$PWD").log"'


def repro_harness(top: Path, faults: str, limit: float) -> tuple[dict, Path]:
    """`repro harness` on opencode over `faults`: (its JSON, the folder of opencode's output per run)."""
    opencode = str(installed("opencode"))
    template = top / "opencode.json.template"
    template.write_text(CONFIG)
    keep = top / f"output-{faults}"
    keep.mkdir()
    env = {**offline_env(cache_dir() / "home-opencode"), "KEEP_DIR": str(keep), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "repro", "harness", "--json", "--faults", faults, "--limit", str(limit),
            "--config-template", str(template), "--",
            "bash", "-c", KEEP, "keep", opencode, "run", "--format", "json", "-m", "local/sim-model", "read notes.txt"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=200, cwd=ROOT, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout), keep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[dict, Path]:
    # opencode retries a 429 five times, honouring Retry-After: 2, then exits: ~30 s under load
    return repro_harness(tmp_path_factory.mktemp("opencode"), "healthy,429-retry-after", 60)


@pytest.fixture(scope="module")
def wedged(tmp_path_factory) -> tuple[dict, Path]:
    # its fetch waits 300 s on a silent connection: 24 s show it waiting, judged at 17 s (its cold
    # start under load can take 10 s to reach the wedge)
    return repro_harness(tmp_path_factory.mktemp("opencode"), "wedge-reused", 24)


def tool_reads(lines: list[dict]) -> list[dict]:
    return [line["part"] for line in lines if line.get("type") == "tool_use" and line["part"].get("tool") == "read"]


def test_healthy_opencode_runs_three_reads_and_answers(sweep):
    result, keep = sweep
    lines = json_lines(keep / "00-healthy.log")
    run = result["runs"][0]
    reads = tool_reads(lines)
    assert len(reads) == 3 and all(r["state"]["status"] == "completed" for r in reads)
    assert any(line.get("type") == "text" and line["part"]["text"].strip() for line in lines)
    assert run["exit_code"] == 0 and run["outcome"] == "finished"


def test_a_wedged_connection_leaves_opencode_waiting_without_an_error(wedged):
    result, keep = wedged
    lines = json_lines(keep / "00-wedge-reused.log")
    run = result["runs"][0]
    # its loop began (a step started; whether round 1's read printed before the wedge depends on
    # the order of its title request and round 1); then no final answer, no error, no exit
    assert any(line.get("type") == "step_start" for line in lines)
    assert not any(line.get("type") in ("text", "error") for line in lines)
    assert run["outcome"] == "hung" and run["exit_code"] is None and run["fault_at_s"] is not None
    assert run["requests_after_fault"] == 0 and run["noticed_after_s"] is None
    # judged before the limit with its family's sockets: the proxy holds its request, a fresh one passes
    assert run["fault_at_s"] < run["judged_at_s"], "the wedge met it after its judgement: a longer limit is needed"
    assert [(v["side"], v["where"], v["kind"]) for v in run["verdicts"]] == [("client", "proxy", "connection-wedged")]


def test_a_persistent_429_fails_opencode_clearly_after_its_retries(sweep):
    result, keep = sweep
    lines = json_lines(keep / "01-429-retry-after.log")
    run = result["runs"][1]
    errors = [line["error"] for line in lines if line.get("type") == "error"]
    assert errors and errors[-1]["data"]["statusCode"] == 429
    assert not any(line.get("type") == "text" for line in lines)
    assert run["outcome"] == "failed clearly" and run["exit_code"] not in (0, None)
    assert run["went_on"] == "same connection" and run["requests_after_fault"] >= 1
    assert run["noticed_after_s"] >= 1.9  # it waited the Retry-After before its first retry
