"""An engine that turns some requests away (429, or 503 "busy") while its own fresh canary is served,
behind a real LiteLLM (openai/ provider) and a real nginx: the verdict places the answer on the engine
that wrote it, never on the hop that passed it on. LiteLLM writes its own JSON quoting its upstream's
error (`OpenAIException - ...`); nginx passes the engine's status and body through unchanged.
The sim's `times=N` turns away only the N requests after `after=N` (repro/sim/config.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from repro.lab.stacks import LITELLM_MASTER_KEY, nginx
from repro.sim import SimConfig, start_sim_process
from tests.support.claims import unbacked_claims
from tests.support.gateways import litellm_gateway
from tests.support.runs import kinds, repro_run
from tests.support.watching import arm

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(240)]
KEY = {"OPENAI_API_KEY": LITELLM_MASTER_KEY, "ANTHROPIC_API_KEY": LITELLM_MASTER_KEY}
# LiteLLM (num_retries 0, as the lab launches it) sends each request upstream once, measured: the
# engine turns away the round's one attempt and serves what comes after (the canaries).
ATTEMPTS = 1


@pytest.fixture(scope="module")
def engine() -> Iterator[str]:
    with start_sim_process(SimConfig(dialect="vllm", reply_tokens=8)) as sim:
        yield sim.url


@pytest.fixture(scope="module")
def gateway(engine) -> Iterator[str]:
    # One LiteLLM for the module: it takes seconds to start.
    with litellm_gateway(engine, provider="openai") as proxy:
        yield proxy.url


def run(tmp_path, front: str, role: str, url: str, engine: str, api: str = "chat") -> tuple[int, dict, str]:
    return repro_run("--api", api, "--rounds", "3", "--conversations", "1", "--model", "m",
                     "--hop", f"name={front},url={url},role={role}", "--hop", f"name=engine-0,url={engine},role=engine",
                     "--out", str(tmp_path / "run"), env=KEY, timeout=150)


def entry(verdict: dict, hop: str, signal: str) -> str:
    return next(e["value"] for e in verdict["evidence"] if (e["hop"], e["signal"]) == (hop, signal))


@pytest.mark.parametrize("api", ["chat", "messages"])  # messages: LiteLLM's Messages envelope, quoting the same
def test_an_engines_429_passed_on_by_litellm_is_the_engines_while_its_fresh_canary_is_served(engine, gateway, tmp_path,
                                                                                              api):
    arm(engine, f"rate-limit=1,after=2,times={ATTEMPTS}")
    code, summary, err = run(tmp_path, "litellm", "router", gateway, engine, api)
    assert kinds(summary) == {("server", "engine-0", "engine-saturated")}, summary["verdicts"]
    verdict = summary["verdicts"][0]
    assert verdict["status"] == 429 and "passed on by litellm quoting it" in verdict["summary"]
    assert entry(verdict, "litellm", "passed on").endswith("quoting its OpenAI provider's error: engine-0")
    assert entry(verdict, "engine-0", "canary").startswith("fresh canary 200")
    assert code == 11, err[-3000:]


@pytest.mark.parametrize("api", ["chat", "messages"])
def test_an_engines_busy_503_passed_on_by_litellm_is_the_engines_overload(engine, gateway, tmp_path, api):
    """Before: CLIENT-SIDE at litellm, hop-error, high."""
    arm(engine, f"overloaded,after=2,times={ATTEMPTS}")
    code, summary, err = run(tmp_path, "litellm", "router", gateway, engine, api)
    assert kinds(summary) == {("server", "engine-0", "engine-overloaded")}, summary["verdicts"]
    assert "saying it is overloaded" in summary["verdicts"][0]["summary"]
    assert code == 11, err[-3000:]


def test_litellms_429_while_the_engine_turns_every_request_away_is_the_engines_saturation(engine, gateway, tmp_path):
    arm(engine, "rate-limit=1,after=2")
    code, summary, err = run(tmp_path, "litellm", "router", gateway, engine)
    verdict = summary["verdicts"][0]
    assert (verdict["side"], verdict["where"], verdict["kind"], verdict["confidence"]) == (
        "server", "engine-0", "engine-saturated", "high"), summary["verdicts"]
    assert code == 11, err[-3000:]


def test_an_engines_429_passed_on_by_nginx_is_the_engines(engine, tmp_path):
    arm(engine, "rate-limit=1,after=2,times=1")
    with nginx(engine) as proxy:
        code, summary, err = run(tmp_path, "nginx", "proxy", proxy.url, engine)
    assert kinds(summary) == {("server", "engine-0", "engine-saturated")}, summary["verdicts"]
    verdict = summary["verdicts"][0]
    assert "Server: nginx" in verdict["summary"] and entry(verdict, "engine-0", "canary").startswith("fresh canary 200")
    assert entry(verdict, "engine-0", "answered by").startswith("the body: vLLM's error JSON")
    assert code == 11, err[-3000:]


def triage_front_turned_away(engine: str, front: str, role: str, url: str) -> dict:
    """`repro triage` while the engine turns away one request: the canaries go out together, so which
    one it turns away is up to arrival order (nginx's pooled upstream connection is often first, but
    not on a loaded machine; LiteLLM's own work makes its one later). The tries alternate between
    turning away the first and the second to arrive, so either steady order meets the case within
    two tries, until the one through the front hop was turned away and the engine's own was served,
    at most ten times; the other order is another rule's case (the engine's own canary turned away)."""
    specs = ("rate-limit=1,times=1", "rate-limit=1,after=1,times=1")
    for attempt in range(10):
        arm(engine, specs[attempt % 2] if front == "nginx" else specs[1 - attempt % 2])
        out = subprocess.run([sys.executable, "-m", "repro", "triage", "--window", "1", "--json", "--model", "m",
                              "--hop", f"name={front},url={url},role={role}",
                              "--hop", f"name=engine-0,url={engine},role=engine"],
                             capture_output=True, text=True, timeout=60, env={**os.environ, **KEY})
        found = json.loads(out.stdout)
        canaries = {h["name"]: h["canary"]["status"] for h in found["hops"]}
        if canaries == {front: 429, "engine-0": 200}:
            break
    assert canaries == {front: 429, "engine-0": 200}, canaries
    verdict = found["verdicts"][0]
    assert not unbacked_claims(verdict) and out.returncode == 11, out.stderr[-2000:]
    return verdict


def test_triage_a_429_litellm_passes_on_from_its_engine_is_the_engines(engine, gateway):
    verdict = triage_front_turned_away(engine, "litellm", "router", gateway)
    assert (verdict["side"], verdict["where"], verdict["kind"]) == ("server", "engine-0", "engine-saturated"), verdict
    assert "quoting its upstream's error (OpenAI provider)" in verdict["summary"]


def test_triage_a_429_nginx_passes_on_from_its_engine_is_the_engines(engine):
    """Before: CLIENT-SIDE at nginx, hop-error, high, for the engine's own JSON passed through."""
    with nginx(engine) as proxy:
        verdict = triage_front_turned_away(engine, "nginx", "proxy", proxy.url)
    assert (verdict["side"], verdict["where"], verdict["kind"]) == ("server", "engine-0", "engine-saturated"), verdict
    assert "in an engine's own error JSON" in verdict["summary"]


def test_an_engines_429_through_nginx_then_litellm_is_the_engines(engine, gateway, tmp_path):
    """nginx in front of LiteLLM (TLS, a public port): LiteLLM's JSON is the router's given, not nginx's."""
    arm(engine, "rate-limit=1,after=2,times=1")
    with nginx(gateway) as proxy:
        code, summary, err = repro_run("--api", "chat", "--rounds", "3", "--conversations", "1", "--model", "m",
                                       "--hop", f"name=nginx,url={proxy.url},role=proxy",
                                       "--hop", f"name=litellm,url={gateway},role=router",
                                       "--hop", f"name=engine-0,url={engine},role=engine",
                                       "--out", str(tmp_path / "run"), env=KEY, timeout=150)
    assert kinds(summary) == {("server", "engine-0", "engine-saturated")}, summary["verdicts"]
    assert entry(summary["verdicts"][0], "litellm", "answered by").endswith("litellm is the only router given")
    assert code == 11, err[-3000:]
