"""The SDK clients on the other wire APIs, end to end against the simulated engine: the anthropic
SDK's sync client (`--client anthropic --api messages`) and the openai SDK's Responses stream
(`--client openai|openai-async --api responses`), each a multi-round tool loop that completes, and
a stall or an engine's refusal judged as with the byte-reading clients."""

from __future__ import annotations

import json

import pytest

from tests.support.runs import kinds, repro_run

pytestmark = [pytest.mark.network, pytest.mark.timeout(90)]

SDK_CLIENTS = [("messages", "anthropic"), ("responses", "openai-async"), ("responses", "openai")]


def events_of(run) -> list[dict]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("api, client", SDK_CLIENTS)
def test_a_tool_loop_completes_every_round_through_the_sdk(tmp_path, api, client):
    code, summary, err = repro_run("--api", api, "--client", client, "--rounds", "4", "--conversations", "2",
                                   "--tools", "3", "--out", str(tmp_path / "run"))
    assert code == 0 and summary["rounds_completed"] == 8 and not summary["verdicts"], err[-2000:]
    events = events_of(tmp_path / "run")
    done = [e for e in events if e["type"] == "round_done"]
    assert any(e.get("tool_calls") for e in done), "no round called a tool"
    started = [e["prompt_chars"] for e in events if e["type"] == "round_started" and e["conv"] == 1]
    assert started == sorted(started) and started[-1] > started[0]  # tool results carried round to round
    # Every round's events were read (the SDK's typed events, one read each) and its connection seen.
    assert all(e["events"] >= 2 for e in done)
    assert {e["type"] for e in events} >= {"sse", "round_connected"}
    assert next(e for e in events if e["type"] == "run_started")["config"]["client"] == client


@pytest.mark.parametrize("api, client", [("messages", "anthropic"), ("responses", "openai")])  # the thread clients
def test_an_engine_hang_under_the_sdk_is_judged_the_engines(tmp_path, api, client):
    code, summary, err = repro_run("--api", api, "--client", client, "--rounds", "5", "--conversations", "1",
                                   "--stall-after", "2", "--sim-fault", "hang,after=2", "--out", str(tmp_path / "run"))
    assert code == 11, err[-2000:]
    assert kinds(summary) == {("server", "engine-0", "engine-hung")}


@pytest.mark.parametrize("api, client, status", [("messages", "anthropic", 529), ("responses", "openai-async", 503)])
def test_an_overloaded_engine_under_the_sdk_is_judged_by_its_answer(tmp_path, api, client, status):
    code, summary, err = repro_run("--api", api, "--client", client, "--rounds", "3", "--conversations", "1",
                                   "--sim-fault", "overloaded,after=2", "--out", str(tmp_path / "run"))
    assert code == 11, err[-2000:]
    assert kinds(summary) == {("server", "engine-0", "engine-overloaded")}
    failed = [e for e in events_of(tmp_path / "run") if e["type"] == "round_failed"]
    assert [e["status"] for e in failed] == [status] and failed[0]["answer"]["body"]


@pytest.mark.parametrize("api, client", [("messages", "anthropic"), ("responses", "openai")])
def test_a_sync_sdk_reports_every_round_connection_and_its_wedge_is_judged(tmp_path, api, client):
    """The sync SDKs keep a Messages or Responses stream's connection (no [DONE] to stop at):
    every round says which connection it got, reused ones too, so a wedged reuse is placed."""
    code, summary, err = repro_run("--api", api, "--client", client, "--rounds", "5", "--conversations", "1",
                                   "--stall-after", "2", "--inject", "wedge-after=3", "--out", str(tmp_path / "run"))
    assert code == 10, err[-2000:]
    first = summary["verdicts"][0]
    assert (first["side"], first["where"], first["kind"], first["round"]) == ("client", "proxy", "connection-wedged", 4)
    connected = [e for e in events_of(tmp_path / "run") if e["type"] == "round_connected"]
    assert [e["round"] for e in connected] == [1, 2, 3, 4, 5]
    # Round 5 follows the wedged round, whose connection was given up: a new one.
    assert [e["reused"] for e in connected] == [False, True, True, True, False]


def test_the_anthropic_sdks_own_retries_of_an_overloaded_engine_are_logged(tmp_path):
    """--client-timeouts native: the SDK retries a 529 twice (its default) and each back-off is the
    client's own wait, logged; the round fails after its third attempt, judged the engine's."""
    code, summary, err = repro_run("--api", "messages", "--client", "anthropic", "--client-timeouts", "native",
                                   "--rounds", "2", "--conversations", "1", "--sim-fault", "overloaded,after=1",
                                   "--out", str(tmp_path / "run"))
    assert code == 11, err[-2000:]
    assert kinds(summary) == {("server", "engine-0", "engine-overloaded")}
    events = events_of(tmp_path / "run")
    retries = [e for e in events if e["type"] == "client_retry"]
    assert [(e["round"], e["attempt"], e["status"]) for e in retries] == [(2, 1, 529), (2, 2, 529)]
    (failed,) = [e for e in events if e["type"] == "round_failed"]
    assert failed["status"] == 529 and "after 3 attempts" in failed["error"]
