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
    assert out.returncode == 2 and "--client openai-async speaks chat completions and responses" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_the_anthropic_sdk_client_runs_a_tool_loop_and_its_wedge_is_judged(tmp_path):
    code, summary, err = repro_run("--api", "messages", "--client", "anthropic-async", "--rounds", "3",
                                   "--conversations", "2", "--tools", "2", "--out", str(tmp_path / "healthy"))
    assert code == 0 and summary["rounds_completed"] == 6, err[-2000:]
    code, summary, err = repro_run("--api", "messages", "--client", "anthropic-async", "--rounds", "5",
                                   "--conversations", "1", "--stall-after", "2", "--inject", "wedge-after=3",
                                   "--out", str(tmp_path / "wedged"))
    assert code == 10, err[-2000:]
    first = summary["verdicts"][0]
    assert (first["side"], first["where"], first["kind"], first["round"]) == ("client", "proxy", "connection-wedged", 4)


def test_an_sdk_of_another_api_is_a_usage_error():
    out = subprocess.run([sys.executable, "-m", "repro", "run", "--api", "chat", "--client", "anthropic-async"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "speaks the Messages API only" in out.stderr
