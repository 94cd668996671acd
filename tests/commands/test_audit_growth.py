"""`repro audit --prompts FILE`: the growth per round of the fastest-growing conversation of the
file `repro run --prompts` takes (user turns with repro run's 32-token replies between them, or a
recorded transcript's own model calls), projected onto the engine's context."""

from __future__ import annotations

import json

import pytest

from probes.hop_measurements import chat_body
from repro.cli import main
from repro.session.audit_growth import MESSAGE_JSON_BYTES, growth_of_prompts
from repro.sim import SimConfig, start_sim_process
from tests.support.audits import run_audit

# a user turn, its JSON, and a 32-token reply (128 characters) with its JSON
REPLY = 32 * 4 + MESSAGE_JSON_BYTES


def write(path, *lines) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_user_turns_grow_by_the_turn_and_the_reply(tmp_path):
    write(tmp_path / "p.jsonl", {"turns": ["a" * 1000, "b" * 2000]}, {"turns": ["c" * 100]})
    growth = growth_of_prompts(tmp_path / "p.jsonl", "m")
    assert growth.per_round_bytes == 1500 + MESSAGE_JSON_BYTES + REPLY
    assert growth.first_bytes == len(chat_body("m", 1000 + MESSAGE_JSON_BYTES))
    assert growth.how == "--prompts p.jsonl: the fastest-growing of 2 conversation(s), replies of 32 tokens between " \
                         "user turns"


def test_a_transcript_grows_by_its_own_model_calls(tmp_path):
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    messages = [{"role": "user", "content": "u" * 100},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "t" * 3000},
                {"role": "assistant", "content": "done"}]
    write(tmp_path / "t.jsonl", {"messages": messages})
    growth = growth_of_prompts(tmp_path / "t.jsonl", "m")
    # the two model calls send 1 then 3 messages: 100 characters, then 100 + 4 + 2 + 3000
    assert growth.per_round_bytes == (4 + 2 + 3000) + 2 * MESSAGE_JSON_BYTES
    assert growth.first_bytes == len(chat_body("m", 100 + MESSAGE_JSON_BYTES))


@pytest.mark.parametrize(("flags", "said"), [
    (["--prompts", "missing.jsonl"], "cannot read prompts file missing.jsonl"),
    (["--prompts", "p.jsonl", "--growth-per-round", "10"], "--growth-per-round and --prompts both say"),
])
def test_bad_prompts_flags_are_one_line(capsys, flags, said):
    code = main(["audit", "--hop", "name=engine,url=http://127.0.0.1:9,role=engine", "--model", "m", *flags])
    err = capsys.readouterr().err
    assert code == 2 and said in err and err.count("\n") == 1, err


@pytest.mark.network
@pytest.mark.timeout(120)
def test_the_projection_uses_the_prompts_files_growth(tmp_path, capsys):
    write(tmp_path / "p.jsonl", {"turns": ["x" * 4000]})
    with start_sim_process(SimConfig(context_length=8192)) as sim:
        code, result, _ = run_audit(capsys, "--hop", f"name=engine-0,url={sim.url},role=engine", "--no-race",
                                    "--no-cancel", "--no-idle-stream", "--keepalive-limit", "1", "--client", "httpx",
                                    "--prompts", str(tmp_path / "p.jsonl"))
    assert result["growth"]["per_round_bytes"] == 4000 + MESSAGE_JSON_BYTES + REPLY
    (finding,) = result["findings"]
    # 8192 tokens at 4 characters: 32768 bytes, from about 4 KiB at 4208 B a round: round 8
    assert (finding["side"], finding["where"], finding["kind"]) == ("client", "engine-0", "context-limit-ahead")
    assert "at round 8," in finding["evidence"][1], finding["evidence"]
    assert code == 10
