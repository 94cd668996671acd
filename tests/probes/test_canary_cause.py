"""A canary refused for load keeps why its answer says it refused (busy, rate), read from the body
by the same reader the rounds use, so the judge tells an engine that says it is overloaded from
one whose refusal says nothing."""

from __future__ import annotations

import pytest

from probes.canary import run_canary
from repro.core.hop import Hop
from repro.sim import SimConfig, serve_in_thread
from tests.support.hostile import hostile_server, respond

pytestmark = [pytest.mark.network, pytest.mark.anyio, pytest.mark.timeout(30)]


@pytest.mark.parametrize("fault, api, status, cause", [
    ("overloaded", "messages", 529, "busy"), ("overloaded", "responses", 503, "busy"),
    ("overloaded", "chat", 503, "busy"), ("rate-limit", "messages", 429, "rate"), ("rate-limit", "chat", 429, "rate")])
async def test_the_sims_refusals_for_load_say_their_cause(fault, api, status, cause):
    with serve_in_thread(SimConfig(dialect="vllm", fault=fault)) as sim:
        outcome = await run_canary(Hop("engine-0", sim.url), model="m", timeout=3, api=api, api_key="sk-secret")
    assert (outcome.ok, outcome.failure, outcome.status, outcome.cause) == (False, "http", status, cause)
    assert "sk-secret" not in repr(outcome.to_dict())


async def test_a_bare_503_says_no_cause():
    with hostile_server(respond("503 Service Unavailable", b"", "text/plain")) as server:
        outcome = await run_canary(Hop("e", server.url), model="m", timeout=2)
    assert (outcome.failure, outcome.status, outcome.cause) == ("http", 503, None)
