"""`repro wrap` on the real opencode (npm `opencode-ai`, pinned in tests/support/npm_harness.py), a
Bun program that reads its engine's URL from opencode.json: `--config-template` renders it with the
fault proxy's URL. The simulated engine answers with `read` tool calls of a file in the project, so
opencode runs a real multi-round agent loop over one pooled connection; the proxy holds that
connection's third request. The verdict must name the proxy, client side, and the project's
folder must be left as it was."""

from __future__ import annotations

import json

import pytest

from repro.sim import SimConfig, serve_in_thread
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
    # The connection's third request is the one held (wedge-after=2: per connection).
    assert stall["round"] == 3
    # The rendered opencode.json was removed again (there was none before): the folder as it was.
    assert sorted(p.name for p in project.folder.iterdir()) == [".git", "notes.txt"]
    assert json.loads(project.template.read_text())["provider"]["local"]["options"]["baseURL"] == "{proxy_url}/v1"
