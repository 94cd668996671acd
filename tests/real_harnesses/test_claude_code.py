"""The real Claude Code (npm, pinned) against the simulated engine's /v1/messages: a multi-round
tool loop it accepts (Read on a file that exists), and the 404 an engine without that API gives."""

from __future__ import annotations

import json
import subprocess

import httpx
import pytest

from repro.lab.stacks import LITELLM_MASTER_KEY
from repro.sim import SimConfig, start_sim_process
from tests.support.gateways import litellm_gateway
from tests.support.npm_harness import installed, offline_env

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def claude() -> str:
    return str(installed("claude"))


def run_claude(claude: str, base_url: str, folder, timeout: float = 120,
               key: str = "sk-any") -> tuple[int, list[dict], str]:
    env = {**offline_env(folder / "home"), "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": key}
    out = subprocess.run([claude, "-p", "read notes.txt", "--output-format", "stream-json", "--verbose",
                          "--allowedTools", "Read"], cwd=folder, env=env, capture_output=True, text=True,
                         timeout=timeout, stdin=subprocess.DEVNULL)
    lines = []
    for line in out.stdout.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue
    return out.returncode, lines, out.stderr


def blocks(lines: list[dict], role: str, kind: str) -> list[dict]:
    return [b for line in lines if line.get("type") == role for b in (line.get("message") or {}).get("content") or ()
            if isinstance(b, dict) and b.get("type") == kind]


def test_claude_code_runs_a_tool_loop_on_the_sims_messages_api(claude, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("the notes of this test\n")
    config = SimConfig(reply_tokens=20, tool_rounds=3, tool_name="Read", tool_path=str(notes))
    with start_sim_process(config) as sim:
        code, lines, stderr = run_claude(claude, sim.url, tmp_path)
        state = httpx.get(sim.url + "/sim/state", timeout=5).json()
    assert code == 0, stderr[-2000:]
    calls = blocks(lines, "assistant", "tool_use")
    assert [c["name"] for c in calls] == ["Read"] * 3 and all(c["input"]["file_path"] == str(notes) for c in calls)
    results = blocks(lines, "user", "tool_result")
    assert len(results) == 3 and all("the notes of this test" in str(r["content"]) for r in results)
    final = lines[-1]
    assert final["type"] == "result" and final["subtype"] == "success" and final["result"].strip()
    assert state["requests_finished"] >= 4  # 3 tool rounds and the text answer


def test_an_engine_without_the_messages_api_fails_claude_code(claude, tmp_path):
    with start_sim_process(SimConfig(quirks=frozenset({"no-messages-api"}))) as sim:
        code, lines, stderr = run_claude(claude, sim.url, tmp_path, timeout=90)
    assert code != 0
    assert not blocks(lines, "assistant", "tool_use")


def test_claude_code_through_litellm_runs_its_tool_loop_on_chat_completions(claude, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("the notes of this test\n")
    config = SimConfig(reply_tokens=20, tool_rounds=2, tool_name="Read", tool_path=str(notes))
    with start_sim_process(config) as sim, litellm_gateway(sim.url, provider="hosted_vllm") as gateway:
        code, lines, stderr = run_claude(claude, gateway.url, tmp_path, key=LITELLM_MASTER_KEY)
        page = httpx.get(sim.url + "/metrics", timeout=5).text
    assert code == 0, stderr[-2000:]
    assert [c["name"] for c in blocks(lines, "assistant", "tool_use")] == ["Read"] * 2
    assert lines[-1]["type"] == "result" and lines[-1]["subtype"] == "success"
    assert 'endpoint="/v1/chat/completions"' in page and 'endpoint="/v1/messages"' not in page
