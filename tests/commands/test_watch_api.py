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
