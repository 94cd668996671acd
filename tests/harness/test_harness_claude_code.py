"""`repro harness` on the real Claude Code (npm `@anthropic-ai/claude-code`, pinned in
tests/support/npm_harness.py; the Messages API, `--api messages`) over three faults chosen for
what they tell per second: healthy, a wedged reused connection, a persistent 529. Each outcome
checked against Claude Code's own stream-json lines (kept per run by a tee wrapper) and its exit.

Claude Code runs offline: pointed at the fault proxy by ANTHROPIC_BASE_URL, a key it never
checks, a HOME of the test's own, telemetry and updates off (offline_env); `-p` with
`--allowedTools Read`, so the engine's scripted Read calls on notes.txt run without a prompt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.harness_process import ROOT
from tests.support.npm_harness import installed, json_lines, offline_env

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(150)]

KEEP = 'set -o pipefail; "$@" 2>&1 | tee "$KEEP_DIR/$(basename "$PWD").log"'
FAULTS = "healthy,wedge-reused,529-overloaded"
LIMIT_S = 12  # the wedge is met about 1 s in (later under load) and judged at 6 s; a 529 ends it within 4 s


def tool_uses(lines: list[dict]) -> list[dict]:
    return [part for line in lines if line.get("type") == "assistant"
            for part in line["message"].get("content", []) if part.get("type") == "tool_use"]


def results(lines: list[dict]) -> list[dict]:
    return [line for line in lines if line.get("type") == "result"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[dict, Path]:
    """One `repro harness` over the three faults: (its JSON, the folder of Claude Code's output per run)."""
    top = tmp_path_factory.mktemp("claude-code")
    claude = str(installed("claude"))
    keep = top / "output"
    keep.mkdir()
    (top / "home").mkdir()
    env = {**offline_env(top / "home"), "ANTHROPIC_API_KEY": "sk-any", "KEEP_DIR": str(keep), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "repro", "harness", "--json", "--api", "messages", "--faults", FAULTS,
            "--limit", str(LIMIT_S), "--", "bash", "-c", KEEP, "keep",
            claude, "-p", "read notes.txt", "--output-format", "stream-json", "--verbose", "--allowedTools", "Read"]
    # Only this environment, not the test's: Claude Code's own variables change what it does (with
    # IS_SANDBOX=yes it retries a 529 ten times instead of giving up after two).
    out = subprocess.run(argv, capture_output=True, text=True, timeout=130, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout), keep


def test_healthy_claude_code_reads_three_times_and_ends_on_the_engines_answer(sweep):
    result, keep = sweep
    lines = json_lines(keep / "00-healthy.log")
    run = result["runs"][0]
    reads = tool_uses(lines)
    assert [use["name"] for use in reads] == ["Read"] * 3
    assert all(use["input"]["file_path"].endswith("notes.txt") for use in reads)
    [final] = results(lines)
    assert final["subtype"] == "success" and final["is_error"] is False and final["result"].strip()
    texts = [part["text"] for line in lines if line.get("type") == "assistant"
             for part in line["message"].get("content", []) if part.get("type") == "text"]
    assert texts and final["result"].strip() == texts[-1].strip()  # the engine's last text, as it printed it
    assert run["outcome"] == "finished" and run["exit_code"] == 0 and run["verdicts"] == []


def test_a_wedged_connection_leaves_claude_code_waiting_and_repro_says_the_proxy_holds_it(sweep):
    result, keep = sweep
    lines = json_lines(keep / "01-wedge-reused.log")
    run = result["runs"][1]
    # its loop began over the reused connection (a Read ran), then its next request was held: no
    # result, no error, still running at the limit
    assert tool_uses(lines) and any(line.get("type") == "user" for line in lines)
    assert results(lines) == []
    assert run["outcome"] == "hung" and run["exit_code"] is None and run["fault_at_s"] is not None
    assert run["fault_at_s"] < run["judged_at_s"], "the wedge met it after its judgement: a longer limit is needed"
    assert [(v["side"], v["where"], v["kind"]) for v in run["verdicts"]] == [("client", "proxy", "connection-wedged")]


def test_a_persistent_529_fails_claude_code_clearly(sweep):
    result, keep = sweep
    lines = json_lines(keep / "02-529-overloaded.log")
    run = result["runs"][2]
    [final] = results(lines)
    assert final["is_error"] is True and "529" in final["result"]
    assert run["outcome"] == "failed clearly" and run["exit_code"] == 1 and run["verdicts"] == []
    assert "529" in run["last_line"] and run["requests_after_fault"] >= 1  # it retried before giving up
