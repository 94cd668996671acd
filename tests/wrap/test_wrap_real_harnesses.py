"""`repro wrap` on the real harnesses from npm (pinned in tests/support/npm_harness.py), behind a
proxy that holds each connection's third request (`--inject wedge-after=2`):

- opencode, a Bun program that reads its engine's URL from opencode.json: `--config-template`
  renders it with the fault proxy's URL, and the project's folder must be left as it was;
- Claude Code (Node), pointed by ANTHROPIC_BASE_URL, on the Messages API (`--api messages`).

The simulated engine answers with tool calls reading a file of the project, so each harness runs a
real multi-round agent loop over its pooled connection. The verdict must name the proxy, client side."""

from __future__ import annotations

import json

import pytest

from repro.sim import SimConfig, serve_in_thread
from tests.support.npm_harness import installed, offline_env
from tests.support.wrapping import opencode_project, run_wrap

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(240)]


def opencode_events(lines: list[dict]) -> list[str]:
    return [line.get("type") for line in lines]


def test_opencode_behind_a_wedging_proxy_is_judged_client_side_at_the_proxy(tmp_path):
    project = opencode_project(tmp_path, "sim-model")
    config = SimConfig(reply_tokens=10, tool_rounds=4, tool_name="read", tool_path=str(project.notes))
    with serve_in_thread(config) as sim:
        out = run_wrap("--hop", f"name=engine-0,url={sim.url}", "--inject", "wedge-after=2",
                       "--config-template", str(project.template), "--cwd", str(project.folder),
                       "--stall-after", "2", "--window", "1.5", "--canary-timeout", "2", "--stop-on-verdict",
                       "--out", str(tmp_path / "run"), "--json", "--", *project.command, env=project.env, timeout=150)
    events = opencode_events(out.harness_lines)
    # opencode ran its loop through the proxy (a tool call read the file) before the held request.
    assert "tool_use" in events, out.stderr[-3000:]
    assert out.verdicts == [("client", "proxy", "connection-wedged")], out.stderr[-3000:]
    assert out.code == 10
    judged = [s for s in out.result["stalls"] if s["verdicts"]]
    assert len(judged) == 1
    stall = judged[0]
    assert stall["hop"] == "proxy" and stall["phase"] == "before-first-byte"
    # opencode may think for longer than --stall-after between rounds (its first ones, on a cold
    # start) with its answer read and the connection kept: no hop holds it, so no verdict for it.
    assert all(s["phase"] == "mid-stream" for s in out.result["stalls"] if not s["verdicts"])
    # The rendered opencode.json was removed again (there was none before): the folder as it was.
    assert sorted(p.name for p in project.folder.iterdir()) == [".git", "notes.txt"]
    assert json.loads(project.template.read_text())["provider"]["local"]["options"]["baseURL"] == "{proxy_url}/v1"


def test_claude_code_behind_a_wedging_proxy_is_judged_client_side_at_the_proxy(tmp_path):
    claude = str(installed("claude"))
    (tmp_path / "home").mkdir()
    notes = tmp_path / "notes.txt"
    notes.write_text("the notes of this test\n")
    env = {**offline_env(tmp_path / "home"), "ANTHROPIC_API_KEY": "sk-any"}
    config = SimConfig(reply_tokens=10, tool_rounds=4, tool_name="Read", tool_path=str(notes))
    with serve_in_thread(config) as sim:
        out = run_wrap("--hop", f"name=engine-0,url={sim.url}", "--inject", "wedge-after=2", "--api", "messages",
                       "--cwd", str(tmp_path), "--stall-after", "2", "--window", "1.5", "--canary-timeout", "2",
                       "--stop-on-verdict", "--out", str(tmp_path / "run"), "--json", "--",
                       claude, "-p", "read notes.txt", "--output-format", "stream-json", "--verbose",
                       "--allowedTools", "Read", env=env, timeout=150)
    # Claude Code read the file through the proxy (a tool result) before the held request.
    assert any(line.get("type") == "user" for line in out.harness_lines), out.stderr[-3000:]
    assert out.verdicts == [("client", "proxy", "connection-wedged")], out.stderr[-3000:]
    assert out.code == 10
    stall = next(s for s in out.result["stalls"] if s["verdicts"])
    # Its rounds come about 0.1 s apart: two within one 0.25 s poll are counted as one (docs/wrap.md),
    # so the held request is not told by its number here, only by where it is held.
    assert stall["hop"] == "proxy" and stall["phase"] == "before-first-byte"
