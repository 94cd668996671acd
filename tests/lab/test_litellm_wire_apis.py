"""A real LiteLLM proxy (litellm[proxy], offline, 127.0.0.1) in front of the simulated engine,
its /v1/messages translated to the engine's chat completions (hosted_vllm/) or to its
/v1/responses (openai/): the harness's API through a gateway, judged by `repro run --api`.

The case from the field: with the openai/ provider and an engine without /v1/responses, every
Messages round fails while chat through the same LiteLLM works; the verdict must name LiteLLM's
translation, not the engine, and say so from LiteLLM's own answer."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from repro.lab.stacks import LITELLM_MASTER_KEY
from repro.sim import SimConfig, start_sim_process
from tests.support.claims import unbacked_claims
from tests.support.gateways import litellm_gateway
from tests.support.runs import kinds, repro_run

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(240)]
KEY = {"ANTHROPIC_API_KEY": LITELLM_MASTER_KEY, "OPENAI_API_KEY": LITELLM_MASTER_KEY}


@contextlib.contextmanager
def stack(provider: str, config: SimConfig) -> Iterator[tuple[str, str]]:
    with start_sim_process(config) as sim, litellm_gateway(sim.url, provider=provider) as gateway:
        yield gateway.url, sim.url


def hops(gateway: str, engine: str) -> list[str]:
    return ["--hop", f"name=litellm,url={gateway},role=router", "--hop", f"name=engine-0,url={engine},role=engine"]


@pytest.fixture(scope="module")
def responses_off() -> Iterator[tuple[str, str]]:
    # One LiteLLM for the module's tests: it takes seconds to start.
    with stack("openai", SimConfig(quirks=frozenset({"no-responses-api"}), reply_tokens=8)) as urls:
        yield urls


def test_messages_through_litellm_openai_provider_to_an_engine_without_responses(responses_off, tmp_path):
    gateway, engine = responses_off
    code, summary, err = repro_run("--api", "messages", "--rounds", "2", "--conversations", "1", "--model", "m",
                                   *hops(gateway, engine), "--out", str(tmp_path / "run"), env=KEY, timeout=120)
    assert code == 10, err[-2000:]
    assert kinds(summary) == {("client", "litellm", "request-rejected")}
    verdict = summary["verdicts"][0]
    assert "quoting its upstream (OpenAI provider)" in verdict["summary"]
    assert "hosted_vllm/" in verdict["next_action"]["do"]
    assert any(e["hop"] == "litellm" and e["signal"] == "answered by" and "LiteLLM" in e["value"]
               for e in verdict["evidence"])


def test_chat_through_the_same_litellm_works(responses_off, tmp_path):
    gateway, engine = responses_off
    code, summary, err = repro_run("--api", "chat", "--rounds", "2", "--conversations", "1", "--model", "m",
                                   *hops(gateway, engine), "--out", str(tmp_path / "run"), env=KEY, timeout=120)
    assert code == 0 and summary["rounds_completed"] == 2, err[-2000:]


def test_messages_through_litellm_hosted_vllm_provider_complete(tmp_path):
    with stack("hosted_vllm", SimConfig(reply_tokens=8, tool_call_share=1.0)) as (gateway, engine):
        code, summary, err = repro_run("--api", "messages", "--rounds", "3", "--conversations", "1",
                                       "--model", "m", "--tools", "2", *hops(gateway, engine),
                                       "--out", str(tmp_path / "run"), env=KEY, timeout=120)
        # What LiteLLM sent the engine: chat completions, not /v1/responses.
        page = httpx.get(engine + "/metrics", timeout=5).text
    assert code == 0 and summary["rounds_completed"] == 3, err[-2000:]
    assert 'endpoint="/v1/chat/completions"' in page


def test_triage_canaries_every_api_on_every_hop_and_judges_each(responses_off):
    gateway, engine = responses_off
    out = subprocess.run([sys.executable, "-m", "repro", "triage", "--api", "chat,messages,responses", "--window", "2",
                          "--json", *hops(gateway, engine)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **KEY})
    assert out.returncode == 10, out.stderr[-2000:]
    result = json.loads(out.stdout)
    by_api = result["by_api"]
    ok = {api: {hop: c["ok"] for hop, c in judged["canaries"].items()} for api, judged in by_api.items()}
    assert ok == {"chat": {"litellm": True, "engine-0": True}, "messages": {"litellm": False, "engine-0": True},
                  "responses": {"litellm": False, "engine-0": False}}
    assert by_api["chat"]["verdicts"] == []
    messages = by_api["messages"]["verdicts"][0]
    assert (messages["side"], messages["where"], messages["kind"]) == ("client", "litellm", "hop-error")
    assert "withholds" not in messages["summary"]  # it answered: nothing was withheld
    responses = by_api["responses"]["verdicts"][0]
    assert (responses["side"], responses["where"], responses["kind"]) == ("client", "engine-0", "request-rejected")
    for verdict in (messages, responses):
        assert not unbacked_claims(verdict), unbacked_claims(verdict)
    assert "fresh canaries by wire API" in out.stderr
