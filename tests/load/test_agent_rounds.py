"""Agentic rounds through the driver: tool definitions sent, tool calls answered with results and
continued without a user turn, recorded transcripts replayed, and the bench's open-ended slots."""

from __future__ import annotations

import json

import anyio
import pytest

from repro.core import events as ev
from repro.load.driver import Driver, DriverConfig
from repro.load.prompts import PromptSource, load_prompt_file
from repro.load.tools import tool_definitions
from repro.sim import SimConfig, start_sim_process

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def sim():
    handle = start_sim_process(SimConfig(tool_call_share=0.5))
    yield handle
    handle.stop()


def drive(url: str, prompts: PromptSource, **options) -> list[ev.Event]:
    events: list[ev.Event] = []
    config = DriverConfig(base_url=url, model="sim-model", max_tokens=24, stall_after=5.0, **options)
    anyio.run(Driver(config, prompts, events.append).run)
    return events


def test_tool_rounds_continue_from_their_results_without_a_user_turn(sim):
    prompts = PromptSource(prompt_chars=60)
    prompts.tools = tool_definitions(3)
    events = drive(sim.url, prompts, rounds=8, conversations=3)
    done = {(e.conv, e.round): e for e in events if isinstance(e, ev.RoundDone)}
    started = {(e.conv, e.round): e for e in events if isinstance(e, ev.RoundStarted)}
    assert len(done) == 24, "every round completes"
    tool_rounds = [d for d in done.values() if d.finish_reason == "tool_calls"]
    assert tool_rounds and len(tool_rounds) < 24, "the sim answers a share of tool rounds with calls"
    assert all(d.tool_calls >= 1 for d in tool_rounds)
    for (conv, round_index), d in done.items():
        if round_index == 8:
            continue
        grew = started[(conv, round_index + 1)].messages - started[(conv, round_index)].messages
        # An agent appends the assistant message and one tool result per call, and asks the model
        # again with no new user turn; a plain reply is followed by the next user turn.
        assert grew == (1 + d.tool_calls if d.finish_reason == "tool_calls" else 2), (conv, round_index, d)


def test_without_tools_no_round_calls_a_tool(sim):
    events = drive(sim.url, PromptSource(prompt_chars=60), rounds=3, conversations=2)
    done = [e for e in events if isinstance(e, ev.RoundDone)]
    assert len(done) == 6 and not any(d.tool_calls or d.finish_reason == "tool_calls" for d in done)


def test_a_recorded_transcript_is_sent_as_recorded_one_round_per_model_call(sim, tmp_path):
    transcript = [
        {"role": "user", "content": "Why does the router hang?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "read_logs", "arguments": '{"service": "router"}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "pending = queue.get(timeout=30)"},
        {"role": "assistant", "content": "The router waits on an empty queue."},
        {"role": "user", "content": "Fix it."},
    ]
    path = tmp_path / "agent.jsonl"
    path.write_text(json.dumps({"messages": transcript, "tools": tool_definitions(2)}) + "\n")
    events = drive(sim.url, load_prompt_file(path), rounds=4, conversations=1)
    sent = [e.messages for e in events if isinstance(e, ev.RoundStarted)]
    # Model calls: after the question (1 message), after the tool result (3), after "Fix it." (5),
    # then the transcript starts over; the live replies do not replace the recorded ones.
    assert sent == [1, 3, 5, 1]
    assert sum(isinstance(e, ev.RoundDone) for e in events) == 4


def test_an_open_ended_slot_starts_fresh_conversations_until_stopped(sim):
    events: list[ev.Event] = []
    config = DriverConfig(base_url=sim.url, model="sim-model", max_tokens=4, rounds=3, conversations=2,
                          conversation_ids=(10, 11), until_stopped=True, stall_after=5.0)
    driver = Driver(config, PromptSource(prompt_chars=40), events.append)

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(driver.run)
            with anyio.fail_after(20):
                while sum(isinstance(e, ev.RoundDone) for e in events) < 14:
                    await anyio.sleep(0.05)
            driver.stop_requested = True

    anyio.run(main)
    started = [e for e in events if isinstance(e, ev.RoundStarted)]
    assert {e.conv for e in started} == {10, 11}
    by_conv = {conv: [e for e in started if e.conv == conv] for conv in (10, 11)}
    for rounds in by_conv.values():
        assert [e.round for e in rounds] == list(range(1, len(rounds) + 1)), "rounds number on across conversations"
        # Every `rounds` rounds a fresh history: round 4 sends one message again, as round 1 did.
        assert [e.messages for e in rounds[:5]] == [1, 3, 5, 1, 3]
    assert not driver.in_flight
    assert not any(o.status == "skipped" for o in driver.outcomes), "an open-ended driver plans no rounds to skip"
    connected = [e for e in events if isinstance(e, ev.RoundConnected) and e.conv == 10]
    assert connected[3].reused is False, "a fresh conversation opens a fresh connection"


def test_an_engine_without_a_tool_parser_refusing_tools_is_named_in_the_verdict(tmp_path):
    from tests.support.runs import repro_run

    with start_sim_process(SimConfig(dialect="vllm", quirks=frozenset({"no-tool-parser"}))) as engine:
        code, summary, err = repro_run("--hop", f"name=engine-0,url={engine.url},role=engine", "--model", "sim-model",
                                       "--tools", "2", "--rounds", "2", "--conversations", "1", "--stall-after", "2",
                                       "--out", str(tmp_path / "run"))
    assert code == 10, err[-2000:]
    [verdict] = {(v["side"], v["where"], v["kind"]): v for v in summary["verdicts"]}.values()
    assert (verdict["side"], verdict["kind"]) == ("client", "request-rejected")
    assert "carried tool definitions" in verdict["summary"] and "drop --tools" in verdict["summary"]
    assert any("the request carried tool definitions" in str(e["value"]) for e in verdict["evidence"])
