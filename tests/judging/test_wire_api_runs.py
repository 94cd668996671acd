"""`repro run --api messages|responses` end to end on the embedded default: multi-round tool
loops in each API's shape, and the wedge and the engine hang judged as under chat."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.runs import kinds, repro_run

pytestmark = [pytest.mark.network, pytest.mark.timeout(90)]


@pytest.mark.parametrize("api", ["messages", "responses"])
def test_a_healthy_tool_loop_completes_every_round(tmp_path, api):
    code, summary, err = repro_run("--api", api, "--rounds", "4", "--conversations", "2", "--tools", "3",
                                   "--out", str(tmp_path / "run"))
    assert code == 0, err[-2000:]
    assert summary["rounds_completed"] == 8 and not summary["verdicts"]
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    done = [e for e in events if e["type"] == "round_done"]
    assert any(e["tool_calls"] for e in done), "no round called a tool"
    # The history grows round after round, tool results included, in the API's own shape.
    started = [e["prompt_chars"] for e in events if e["type"] == "round_started" and e["conv"] == 0]
    assert started == sorted(started) and started[-1] > started[0]
    config = next(e for e in events if e["type"] == "run_started")["config"]
    assert config["api"] == api


@pytest.mark.parametrize("api", ["messages", "responses"])
def test_a_wedged_proxy_is_judged_as_under_chat(tmp_path, api):
    code, summary, err = repro_run("--api", api, "--rounds", "6", "--conversations", "1", "--stall-after", "2",
                                   "--inject", "wedge-after=3", "--out", str(tmp_path / "run"))
    assert code == 10, err[-2000:]
    first = summary["verdicts"][0]
    assert (first["side"], first["where"], first["kind"], first["round"]) == ("client", "proxy", "connection-wedged", 4)


@pytest.mark.parametrize("api", ["messages", "responses"])
def test_an_engine_hang_is_judged_as_under_chat(tmp_path, api):
    code, summary, err = repro_run("--api", api, "--rounds", "6", "--conversations", "1", "--stall-after", "2",
                                   "--sim-fault", "hang,after=3", "--out", str(tmp_path / "run"))
    assert code == 11, err[-2000:]
    assert kinds(summary) == {("server", "engine-0", "engine-hung")}
    canaries = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()
                if '"type":"canary"' in line]
    assert canaries and all(c["outcome"]["api"] == api for c in canaries)


def test_an_sdk_client_that_speaks_only_chat_is_a_usage_error():
    out = subprocess.run([sys.executable, "-m", "repro", "run", "--api", "messages", "--client", "openai-async"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--client openai-async speaks chat completions only" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
