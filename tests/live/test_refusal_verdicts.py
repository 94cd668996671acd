"""Refusals judged by who answered and why, on real parts: conversations that grow round after round
until a hop refuses them. nginx's own 413 past a small client_max_body_size is `request-too-large` at
nginx, the round named; the simulated engine's context limit, answered in vLLM's and in SGLang's own
words behind nginx (which puts `Server: nginx` on the engine's answer) and behind HAProxy, is
`context-exceeded` at the engine, never at the proxy. Both are the client's to fix."""

from __future__ import annotations

import pytest

from repro.lab.router_launcher import router_available, start_router
from repro.sim import SimConfig, start_sim_process
from tests.support.claims import unbacked_claims
from tests.support.runs import repro_run
from tests.support.stacks import caddy, haproxy, nginx, started

pytestmark = [pytest.mark.network, pytest.mark.timeout(120), pytest.mark.slow]

# Each round adds a 1500-character user turn and a reply of up to 32 tokens: about 1.7 KB a round.
GROWING = ("--prompt-chars", "1500", "--max-tokens", "32", "--rounds", "12", "--conversations", "1",
           "--on-failure", "retire", "--stall-after", "3", "--model", "sim-model")


def only_verdict(summary: dict) -> dict:
    verdicts = summary["verdicts"]
    assert len(verdicts) == 1, verdicts
    return verdicts[0]


def entry(verdict: dict, signal: str) -> dict:
    return next(e for e in verdict["evidence"] if e["signal"] == signal)


# A proxy's own refusal of a body past its limit: how the test sets the limit, the limit in bytes,
# the words its answer is recognised by, and the setting the verdict names as the knob.
BODY_LIMITS = {
    "nginx": (nginx, {"client_max_body_size": "8k"}, 8 * 1024, "nginx's error page", "client_max_body_size"),
    # HAProxy's own 413 page has no Server header; its metrics page says it is HAProxy.
    "haproxy": (haproxy, {"max_body_bytes": 6000}, 6000,
                "HAProxy's error page (<html><body><h1>413 Payload Too Large</h1>, no Server header)", "req.body_size"),
    # Caddy's own errors have no body, only `Server: Caddy` (proxied answers lose it since 2.10).
    "caddy": (caddy, {"max_body_bytes": 6000}, 6000, "Caddy's empty error answer (Server: Caddy, no body)",
              "request_body max_size"),
}
# Every client of ours behind nginx (each keeps the answer's body and headers: the verdict is the
# same whichever drove), and the default client behind each other proxy.
BODY_LIMIT_CASES = [("nginx", client) for client in ("aiohttp", "httpx", "openai", "openai-async")] + [
    ("haproxy", "aiohttp"), ("caddy", "aiohttp")]


@pytest.fixture(scope="module")
def plain_sim():
    """One default engine for every body-limit case: a refused round never reaches it, and each
    case's conversation is its own."""
    with start_sim_process(SimConfig()) as sim:
        yield sim


@pytest.mark.parametrize(("proxy_name", "client"), BODY_LIMIT_CASES, ids=[f"{p}-{c}" for p, c in BODY_LIMIT_CASES])
def test_a_conversation_outgrowing_a_proxys_body_limit_is_request_too_large_at_that_proxy(
        tmp_path, plain_sim, proxy_name, client):
    launcher, limit_setting, limit_bytes, answer_words, knob = BODY_LIMITS[proxy_name]
    with started(launcher, plain_sim.url, tmp_path, **limit_setting) as proxy:
        code, summary, err = repro_run(
            "--hop", f"name={proxy_name},url={proxy.url}/v1,role=proxy,metrics={proxy.metrics_url}",
            "--hop", f"name=engine-0,url={plain_sim.url},role=engine", *GROWING, "--client", client,
            "--out", str(tmp_path / "run"))
    assert code == 10, err[-3000:]
    verdict = only_verdict(summary)
    assert (verdict["side"], verdict["where"], verdict["kind"], verdict["outcome"], verdict["status"]) == (
        "client", proxy_name, "request-too-large", "failed", 413), verdict
    refused = verdict["round"]
    assert refused >= 3, verdict  # the first rounds fit: the history grew past the limit
    sent = int(entry(verdict, "request body")["value"].split()[0].replace(",", ""))
    assert sent > limit_bytes, verdict
    assert entry(verdict, "last answered round")["value"] == str(refused - 1)
    assert f"crossed the limit at round {refused}" in verdict["summary"], verdict["summary"]
    assert "characters per round" in verdict["summary"] and knob in verdict["summary"], verdict["summary"]
    answered = entry(verdict, "answered by")
    assert answered["hop"] == proxy_name and answer_words in answered["value"], answered
    assert verdict["confidence"] == "high"
    assert summary["rounds_completed"] == refused - 1, summary
    assert unbacked_claims(verdict) == [], verdict


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
@pytest.mark.parametrize("launcher", [nginx, haproxy, caddy], ids=["nginx", "haproxy", "caddy"])
def test_an_engine_past_its_context_behind_a_proxy_is_context_exceeded_at_the_engine(tmp_path, dialect, launcher):
    """Behind nginx the engine's 400 carries `Server: nginx`; behind HAProxy, `server: uvicorn`; behind
    Caddy 2.6, both `Server: uvicorn` and `Server: Caddy`: the body is what names the engine each way."""
    limit = 1600
    with start_sim_process(SimConfig(dialect=dialect, context_length=limit)) as sim, \
            started(launcher, sim.url, tmp_path) as proxy:
        name = launcher.__name__
        code, summary, err = repro_run(
            "--hop", f"name={name},url={proxy.url}/v1,role=proxy,metrics={proxy.metrics_url}",
            "--hop", f"name=engine-0,url={sim.url},role=engine", *GROWING, "--out", str(tmp_path / "run"))
    assert code == 10, err[-3000:]
    verdict = only_verdict(summary)
    assert (verdict["side"], verdict["where"], verdict["kind"], verdict["outcome"], verdict["status"]) == (
        "client", "engine-0", "context-exceeded", "failed", 400), verdict
    assert verdict["round"] >= 3, verdict
    context = entry(verdict, "context")
    assert context["hop"] == "engine-0" and context["value"].startswith(f"context {limit} tokens"), context
    # SGLang says one of two texts: the prompt alone reached the context, or the prompt plus max_tokens did.
    words = {"vllm": ("This model's maximum context length is 1600 tokens. However, your prompt contains at least 1601",),
             "sglang": ("is longer than the model's context length (1600 tokens)",
                        "exceeds the model's maximum context length of 1600 tokens")}[dialect]
    assert any(said in verdict["summary"] for said in words), verdict["summary"]
    answered = entry(verdict, "answered by")
    shape = {"vllm": "vLLM's error JSON", "sglang": "SGLang's error JSON"}[dialect]
    assert answered["hop"] == "engine-0" and shape in answered["value"], answered
    failed = entry(verdict, "round failed")
    assert failed["hop"] == "engine-0", failed
    if launcher is nginx:
        assert "(Server: nginx" in failed["value"], failed  # the header said nginx; the body said the engine
    assert "longer context" in verdict["summary"] and "check the API key" not in verdict["summary"]
    assert unbacked_claims(verdict) == [], verdict


def test_nginx_limiting_the_request_rate_is_rate_limited_at_nginx(tmp_path):
    """limit_req at 1 request a second, no burst: of four conversations starting together, nginx
    answers the others with its own 429 page while the engine serves fresh requests."""
    with start_sim_process(SimConfig()) as sim, started(nginx, sim.url, tmp_path, requests_per_second=1) as proxy:
        code, summary, err = repro_run(
            "--hop", f"name=nginx,url={proxy.url}/v1,role=proxy,metrics={proxy.metrics_url}",
            "--hop", f"name=engine-0,url={sim.url},role=engine", "--model", "sim-model", "--rounds", "2",
            "--conversations", "4", "--on-failure", "retire", "--stall-after", "3", "--out", str(tmp_path / "run"))
    assert code == 10, err[-3000:]
    verdicts = summary["verdicts"]
    assert verdicts and {(v["side"], v["where"], v["kind"], v["status"]) for v in verdicts} == {
        ("client", "nginx", "rate-limited", 429)}, verdicts
    for verdict in verdicts:
        assert "nginx limits the request rate: HTTP 429" in verdict["summary"], verdict["summary"]
        assert "send fewer requests at once" in verdict["summary"]
        assert "nginx's error page" in entry(verdict, "answered by")["value"]


def test_haproxy_answering_with_an_operators_own_json_is_named_by_its_counters(tmp_path):
    """An answer of no known shape (the operator's own JSON instead of HAProxy's page): HAProxy's
    frontends counted a 4xx its backends did not, so it answered itself."""
    with start_sim_process(SimConfig()) as sim, started(haproxy, sim.url, tmp_path, max_body_bytes=6000,
                                                        body_limit_json='{"message":"request too big"}') as proxy:
        code, summary, err = repro_run(
            "--hop", f"name=haproxy,url={proxy.url}/v1,role=proxy,metrics={proxy.metrics_url}",
            "--hop", f"name=engine-0,url={sim.url},role=engine", *GROWING, "--probe-interval", "0.2",
            "--out", str(tmp_path / "run"))
    assert code == 10, err[-3000:]
    verdict = only_verdict(summary)
    assert (verdict["where"], verdict["kind"], verdict["confidence"]) == ("haproxy", "request-too-large", "high"), verdict
    answered = entry(verdict, "answered by")
    assert answered["value"].startswith("its frontends' 4xx count rose by 1 and its backends' did not"), answered


@pytest.mark.skipif(not router_available("smg"), reason="smg not installed (pip install smg)")
def test_behind_smg_the_engine_that_answered_is_the_one_smg_routed_to(tmp_path):
    """Two engines with different contexts behind the real smg gateway, which passes an engine's 400
    on verbatim and names the worker in x-smg-routed-worker-id: each refusal is placed on the engine
    whose own stated context it quotes."""
    limits = {"engine-0": 1600, "engine-1": 2400}
    with start_sim_process(SimConfig(dialect="sglang", context_length=limits["engine-0"])) as first, \
            start_sim_process(SimConfig(dialect="sglang", context_length=limits["engine-1"])) as second, \
            start_router([first.url, second.url], kind="smg", policy="round_robin") as router:
        code, summary, err = repro_run(
            "--hop", f"name=smg,url={router.url}/v1,role=router,metrics={router.metrics_url}",
            "--hop", f"name=engine-0,url={first.url},role=engine", "--hop", f"name=engine-1,url={second.url},role=engine",
            "--prompt-chars", "1500", "--max-tokens", "32", "--rounds", "12", "--conversations", "4",
            "--on-failure", "retire", "--stall-after", "3", "--model", "sim-model", "--out", str(tmp_path / "run"))
    assert code == 10, err[-3000:]
    verdicts = summary["verdicts"]
    assert verdicts, summary
    for verdict in verdicts:
        assert (verdict["side"], verdict["kind"], verdict["confidence"]) == ("client", "context-exceeded", "high"), verdict
        stated = entry(verdict, "context")["value"]
        assert stated.startswith(f"context {limits[verdict['where']]} tokens"), (verdict["where"], stated)
        assert "x-smg-routed-worker-id" in entry(verdict, "answered by")["value"], verdict["evidence"]
