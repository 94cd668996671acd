"""`repro watch --api messages`: the canary conversations and the fresh canaries speak the
harness's API, so an engine that serves chat but not /v1/messages is an incident, not a green
board."""

from __future__ import annotations

import json

import pytest

from repro.sim import SimConfig, serve_in_thread
from tests.support.waiting import wait_for
from tests.support.watching import FAST, engine_hop, open_incidents, repro_watch, rounds

pytestmark = [pytest.mark.network, pytest.mark.timeout(120)]


def test_messages_canary_conversations_complete_and_canary_messages(tmp_path):
    with serve_in_thread(SimConfig()) as sim, \
            repro_watch(tmp_path, "--api", "messages", "--hop", engine_hop(sim.url), *FAST) as watch:
        wait_for(lambda: rounds(watch, "completed") >= 3, timeout=30, what="completed messages rounds")
        wait_for(lambda: any('"type":"canary"' in line for f in (tmp_path / "watch").glob("*.jsonl")
                             for line in f.read_text().splitlines()), timeout=20, what="a canary")
        assert not open_incidents(watch)
        assert "messages requests/min" in watch.said  # the cost line names what the conversations send
    canaries = [json.loads(line) for f in (tmp_path / "watch").glob("*.jsonl") for line in f.read_text().splitlines()
                if '"type":"canary"' in line]
    assert canaries and all(c["outcome"]["api"] == "messages" for c in canaries)


def test_an_engine_without_the_messages_api_is_an_incident(tmp_path):
    with serve_in_thread(SimConfig(quirks=frozenset({"no-messages-api"}))) as sim, \
            repro_watch(tmp_path, "--api", "messages", "--hop", engine_hop(sim.url), *FAST,
                        "--model", "sim-model") as watch:
        wait_for(lambda: ("client", "engine-0", "request-rejected") in open_incidents(watch), timeout=40,
                 what="the request-rejected incident")
        assert rounds(watch, "completed") == 0


def test_chat_works_messages_does_not_an_incident_of_messages_with_the_hop_up(tmp_path):
    """--api chat,messages: the conversations speak chat and complete; every hop gets a messages
    canary too, and an engine without /v1/messages is a messages incident, said as such, while the
    hop stays up (it answers chat) and no chat round fails."""
    with serve_in_thread(SimConfig(quirks=frozenset({"no-messages-api"}))) as sim, \
            repro_watch(tmp_path, "--api", "chat,messages", "--hop", engine_hop(sim.url), *FAST,
                        "--model", "sim-model") as watch:
        wait_for(lambda: ("client", "engine-0", "request-rejected") in open_incidents(watch), timeout=40,
                 what="the messages incident")
        wait_for(lambda: rounds(watch, "completed") >= 3, timeout=30, what="completed chat rounds")
        assert watch.sample("repro_watch_hop_up", hop="engine-0") == 1
        assert rounds(watch, "failed") == rounds(watch, "stalled") == 0
        assert "with canaries (1 hop every 1 s, 2 APIs each" in watch.said
        incident = next(i for i in watch.status()["open_incidents"] if i["kind"] == "request-rejected")
        assert incident["api"] == "messages"
        assert incident["summary"].startswith("messages (/v1/messages) canaries fail (chat, /v1/chat/completions, "
                                              "answers at every hop in the same wave): ")
        assert "404" in incident["summary"]
    lines = [json.loads(line) for f in (tmp_path / "watch").glob("*.jsonl") for line in f.read_text().splitlines()]
    apis = {c["outcome"]["api"] for c in lines if c["type"] == "canary"}
    assert apis == {"chat", "messages"}
    assert {v.get("api") for v in lines if v["type"] == "verdict"} == {"messages"}


@pytest.mark.parametrize(("args", "says"), [
    (("--api", "chat,bogus"), "--api 'chat,bogus': use one or more of chat, responses, messages, comma-separated"),
    (("--api", ""), "--api '': use one or more of chat, responses, messages"),
    (("--api", "chat;messages"), "--api 'chat;messages': use one or more of"),
    (tuple(a for i in range(65) for a in ("--hop", f"name=engine-{i},url=http://127.0.0.1:{9000 + i}")),
     "65 hops given: a watch keeps at most 64"),
])
def test_a_bad_api_list_or_too_many_hops_is_one_line_and_exit_2(args, says, capsys, tmp_path):
    from repro.cli import main

    hop = () if "--hop" in args else ("--hop", "name=engine-0,url=http://127.0.0.1:9")
    assert main(["watch", *hop, *args, "--listen", "127.0.0.1:0", "--out", str(tmp_path / "watch")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("repro watch: error: ") and says in err[0], err
    assert not (tmp_path / "watch").exists()


# LiteLLM answers its first requests in seconds on a loaded machine: a stall trigger and canary
# deadline above that, so that its warming up is not judged.
LITELLM_PACE = ("--think", "0.2", "--rounds", "3", "--stall-after", "15", "--probe-interval", "0.5",
                "--canary-every", "1", "--canary-timeout", "6")


@pytest.mark.slow
def test_chat_works_through_litellm_and_messages_does_not(tmp_path, monkeypatch):
    """The case from the field, watched: LiteLLM (openai/ provider) translates /v1/messages into
    the engine's /v1/responses, which this engine does not serve. The chat conversations through
    LiteLLM complete; the messages canaries fail at LiteLLM and answer straight at the engine: a
    messages incident at litellm, said as messages', with LiteLLM up (it answers chat)."""
    from repro.lab.stacks import LITELLM_MASTER_KEY
    from repro.sim import start_sim_process
    from tests.support.gateways import litellm_gateway

    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.setenv(name, LITELLM_MASTER_KEY)
    with start_sim_process(SimConfig(quirks=frozenset({"no-responses-api"}), reply_tokens=8)) as sim, \
            litellm_gateway(sim.url, provider="openai") as gateway, \
            repro_watch(tmp_path, "--api", "chat,messages", "--model", "m", *LITELLM_PACE,
                        "--hop", f"name=litellm,url={gateway.url},role=router", "--hop", engine_hop(sim.url)) as watch:
        wait_for(lambda: ("client", "litellm", "hop-error") in open_incidents(watch), timeout=60,
                 what="the messages incident at litellm")
        wait_for(lambda: rounds(watch, "completed") >= 3, timeout=30, what="completed chat rounds through litellm")
        assert watch.sample("repro_watch_hop_up", hop="litellm") == 1
        assert rounds(watch, "failed") == rounds(watch, "stalled") == 0
        incident = next(i for i in watch.status()["open_incidents"] if i["where"] == "litellm")
        assert incident["api"] == "messages"
        assert incident["summary"].startswith("messages (/v1/messages) canaries fail (chat, /v1/chat/completions, "
                                              "answers at every hop in the same wave): ")
        assert open_incidents(watch) == {("client", "litellm", "hop-error")}
