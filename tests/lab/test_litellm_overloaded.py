"""An overloaded engine behind a real LiteLLM proxy (litellm[proxy], offline, 127.0.0.1): a harness on
the Messages API meets LiteLLM's translation of the engine's 503 "busy" answer; the verdict names
the engine, overloaded by its own words (LiteLLM quotes them, the engine's canary says them too),
never LiteLLM."""

from __future__ import annotations

import pytest

from repro.lab.stacks import LITELLM_MASTER_KEY
from repro.sim import SimConfig, start_sim_process
from tests.support.claims import unbacked_claims
from tests.support.gateways import litellm_gateway
from tests.support.runs import kinds, repro_run

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(240)]
KEY = {"ANTHROPIC_API_KEY": LITELLM_MASTER_KEY, "OPENAI_API_KEY": LITELLM_MASTER_KEY}


def test_an_overloaded_engine_behind_litellm_is_the_engines_overload(tmp_path):
    config = SimConfig(dialect="vllm", reply_tokens=8, fault="overloaded,after=2")
    with start_sim_process(config) as sim, litellm_gateway(sim.url, provider="hosted_vllm") as gateway:
        code, summary, err = repro_run("--api", "messages", "--rounds", "3", "--conversations", "1", "--model", "m",
                                       "--hop", f"name=litellm,url={gateway.url},role=router",
                                       "--hop", f"name=engine-0,url={sim.url},role=engine",
                                       "--out", str(tmp_path / "run"), env=KEY, timeout=150)
    assert code == 11, err[-3000:]
    assert kinds(summary) == {("server", "engine-0", "engine-overloaded")}, summary["verdicts"]
    verdict = summary["verdicts"][0]
    assert verdict["where"] != "litellm" and "saying it is overloaded" in verdict["summary"]
    assert not unbacked_claims(verdict)
    print(err[-4000:])  # the verdict as printed (shown with -s)
