"""A 429, 503 or 529 passed on by the hop that answered the client is placed on the hop that wrote it:
nginx passes the engine's body through (the body names the engine), LiteLLM writes its own JSON
quoting its upstream's error (`OpenAIException - ...`: the hop behind it wrote it). A served fresh
canary to the engine does not make the gateway the limiter (an engine's limit by rate or by sender
lets a later request through); where the evidence cannot tell which hop wrote a 429, the verdict
says so, side unknown, and blames no hop."""

from __future__ import annotations

import msgspec

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.classify import classify
from repro.core.error_shapes import ErrorAnswer
from repro.core.evidence import Evidence, HopEvidence
from repro.core.next_actions import next_action
from repro.core.snapshot import Snapshot
from tests.support import error_bodies as bodies
from tests.support.claims import unbacked_claims

STALL = ev.RoundStalled(conv=0, round=3, phase="before-first-byte", t=20.0, stalled_for_s=0.1, started_t=19.9,
                        last_progress_t=19.9)


def hop(name: str, role: str, status: int = 200, cause: str | None = None, dialect: str | None = None) -> HopEvidence:
    """A hop whose fresh canary got `status`; an engine's metrics page read since the round began (idle)."""
    samples = (ev.ProbeSample(t=20.05, hop=name, snapshot=Snapshot(hop=name, ok=True, dialect=dialect or "vllm",
                                                                   running=0, queued=0)),) if role == "engine" else ()
    ok = status == 200
    outcome = CanaryOutcome(hop=name, url="http://127.0.0.1:1", ok=ok, status=status, total_s=0.05, health_status=200,
                            events=1 if ok else 0, done=ok, failure=None if ok else "http",
                            error=None if ok else f"http {status}", cause=cause)
    return HopEvidence(name, role, samples, ev.CanaryResult(t=20.1, hop=name, outcome=outcome))


def judge(status: int, body: str, server: str | None, *hops: HopEvidence, **headers: str):
    failure = ev.RoundFailed(t=20.0, conv=0, round=3, phase="before-first-byte", error=f"HTTP {status}",
                             status=status, duration_s=0.01, failure="http", server=server,
                             answer=ErrorAnswer(body=body, headers=headers))
    verdict = classify(Evidence(stall=STALL, hops=hops, stall_after=5.0, loop_lag_p99_ms=2.0, failure=failure))
    assert unbacked_claims(verdict.to_dict()) == [], verdict
    return verdict


def entry(verdict, hop: str, signal: str) -> str:
    return next(e["value"] for e in verdict.evidence if (e["hop"], e["signal"]) == (hop, signal))


def litellm() -> HopEvidence:
    return hop("litellm", "router")


def test_litellm_quoting_its_engines_429_is_the_engines_not_litellms_though_the_engine_serves_a_fresh_one():
    v = judge(429, bodies.LITELLM_RELAYED_429, "uvicorn", litellm(), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind, v.confidence) == ("server", "engine-0", "engine-saturated", "medium")
    assert "passed on by litellm quoting it" in v.summary and "a fresh request is served" in v.summary
    assert "quoting its OpenAI provider's error: engine-0" in entry(v, "litellm", "passed on")


def test_litellm_quoting_its_engines_busy_503_is_the_engines_overload():
    v = judge(503, bodies.LITELLM_RELAYED_BUSY, "uvicorn", litellm(), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind, v.confidence) == ("server", "engine-0", "engine-overloaded", "medium")
    assert "saying it is overloaded" in v.summary and "passed on by litellm" in v.summary


def test_litellms_own_rate_limit_quotes_no_upstream_and_stays_litellms():
    v = judge(429, bodies.LITELLM_RATE, "uvicorn", litellm(), hop("engine-0", "engine"), **{"retry-after": "60"})
    assert (v.side, v.where, v.kind) == ("client", "litellm", "rate-limited")


def test_a_quoted_429_with_a_proxy_behind_the_gateway_names_no_hop():
    """nginx behind LiteLLM may have limited the rate itself or passed the engine's 429 on."""
    v = judge(429, bodies.LITELLM_RELAYED_429, "uvicorn", litellm(), hop("nginx", "proxy"), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind, v.confidence) == ("unknown", None, "rate-limited", "low")
    assert "which of nginx, engine-0 wrote it is not shown" in v.summary
    assert "raise the limiting hop's rate limit" in next_action(v).do
    ruled = [line.split(":")[0] for line in v.ruled_out]
    assert "nginx" not in ruled and "engine-0" not in ruled and "litellm" in ruled  # litellm only passed it on


def test_a_quoted_429_with_two_engines_and_no_canary_to_tell_names_no_hop():
    v = judge(429, bodies.LITELLM_RELAYED_429, "uvicorn", litellm(), hop("engine-0", "engine"),
              hop("engine-1", "engine"))
    assert (v.side, v.where, v.kind) == ("unknown", None, "rate-limited")


def test_a_quoted_503_with_a_proxy_behind_the_gateway_names_no_hop():
    v = judge(503, bodies.LITELLM_RELAYED_BUSY, "uvicorn", litellm(), hop("nginx", "proxy"), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind) == ("unknown", None, "hop-error")
    assert "litellm quoted its upstream's answer (OpenAI provider)" in v.summary


def test_nginx_passing_on_the_engines_429_is_the_engines_though_the_header_says_nginx():
    v = judge(429, bodies.VLLM_RATE, "nginx/1.22.1", hop("nginx", "proxy"), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind, v.confidence) == ("server", "engine-0", "engine-saturated", "medium")
    assert "passed on" not in v.summary  # nginx quotes nothing: the engine's own body came through


def test_a_429_no_body_or_canary_places_is_not_blamed_on_the_hop_that_answered():
    """Before: rate-limited at nginx, medium, on nothing but its being the first hop."""
    v = judge(429, "Too Many Requests", "nginx/1.22.1", hop("nginx", "proxy"), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind, v.confidence) == ("unknown", None, "rate-limited", "low")
    assert "nginx's own limit, or one behind it whose answer nginx passed on" in v.summary
    assert [line.split(":")[0] for line in v.ruled_out] == ["client"]  # neither nginx nor engine-0 is ruled out


def test_a_429_whose_hop_in_front_gets_the_same_on_a_fresh_request_is_that_hops():
    v = judge(429, "Too Many Requests", "nginx/1.22.1", hop("nginx", "proxy", 429), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind) == ("client", "nginx", "rate-limited")


def canaried(*hops: HopEvidence):
    """Triage's evidence: no round of its own, each hop's fresh canary."""
    verdict = classify(Evidence(stall=STALL, hops=hops, stall_after=5.0, loop_lag_p99_ms=2.0, round_watched=False))
    assert unbacked_claims(verdict.to_dict()) == [], verdict
    return verdict


def relaying(name: str, status: int, cause: str | None = None) -> HopEvidence:
    """A gateway whose fresh canary was answered `status` quoting its upstream's error."""
    gateway = hop(name, "router", status, cause)
    outcome = msgspec.structs.replace(gateway.canary.outcome, relayed="OpenAI")
    return HopEvidence(name, "router", (), ev.CanaryResult(t=20.1, hop=name, outcome=outcome))


def test_triage_a_gateways_canary_quoting_its_engines_429_is_the_engines_whose_own_canary_is_served():
    v = canaried(relaying("litellm", 429, "rate"), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind, v.confidence) == ("server", "engine-0", "engine-saturated", "medium")
    assert "while one straight to engine-0 is served" in v.summary and "litellm passes its answer on" in v.summary


def test_triage_a_gateways_canary_quoting_busy_words_is_the_engines_overload():
    v = canaried(relaying("litellm", 503, "busy"), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind) == ("server", "engine-0", "engine-overloaded")


def test_triage_a_quoted_429_with_a_proxy_behind_the_gateway_names_no_hop():
    v = canaried(relaying("litellm", 429, "rate"), hop("nginx", "proxy"), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind) == ("unknown", None, "hop-error")
    assert "which of nginx, engine-0 wrote it is not shown" in v.summary


def test_the_fault_proxys_own_429_is_the_proxys_though_its_body_is_shaped_like_an_engines():
    body = '{"error": {"message": "rate limit exceeded", "type": "rate_limit_error", "param": null, "code": 429}}'
    v = judge(429, body, None, hop("proxy", "proxy"), hop("engine-0", "engine"), **{"x-repro-fault": "status"})
    assert (v.side, v.where, v.kind) == ("client", "proxy", "rate-limited")
    without = judge(429, body, None, hop("proxy", "proxy"), hop("engine-0", "engine"))
    assert without.where == "engine-0"  # the body alone: vLLM's shape, placed on the engine


def test_litellm_behind_nginx_quoting_its_engines_429_is_the_engines():
    """nginx (TLS in front) -> LiteLLM -> engine: LiteLLM's JSON is the router's given, not nginx's."""
    v = judge(429, bodies.LITELLM_RELAYED_429, "nginx/1.22.1", hop("nginx", "proxy"), litellm(),
              hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind) == ("server", "engine-0", "engine-saturated")
    assert entry(v, "litellm", "answered by").endswith("litellm is the only router given")


def test_litellms_own_429_behind_nginx_is_litellms():
    v = judge(429, bodies.LITELLM_RATE, "nginx/1.22.1", hop("nginx", "proxy"), litellm(), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind, v.confidence) == ("client", "litellm", "rate-limited", "high")


def passing(name: str, status: int, cause: str | None = None) -> HopEvidence:
    """A proxy whose fresh canary was answered `status` in an engine's own error JSON (passed on unchanged)."""
    proxy = hop(name, "proxy", status, cause)
    outcome = msgspec.structs.replace(proxy.canary.outcome, answer_role="engine")
    return HopEvidence(name, "proxy", (), ev.CanaryResult(t=20.1, hop=name, outcome=outcome))


def test_triage_nginx_passing_on_its_engines_429_is_the_engines_whose_own_canary_is_served():
    """Before: CLIENT-SIDE at nginx, hop-error, high."""
    v = canaried(passing("nginx", 429, "rate"), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind, v.confidence) == ("server", "engine-0", "engine-saturated", "medium")
    assert "in an engine's own error JSON" in v.summary


def test_triage_an_engines_429_through_two_proxies_is_still_the_engines():
    v = canaried(passing("edge", 429, "rate"), hop("nginx", "proxy"), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind) == ("server", "engine-0", "engine-saturated")


def test_triage_an_engines_429_with_two_engines_behind_names_no_hop_and_rules_neither_out():
    v = canaried(passing("nginx", 429, "rate"), hop("engine-0", "engine"), hop("engine-1", "engine"))
    assert (v.side, v.where, v.kind) == ("unknown", None, "hop-error")
    assert not any(line.startswith(("engine-0", "engine-1")) for line in v.ruled_out)


def test_triage_a_proxys_own_429_page_is_still_the_proxys():
    v = canaried(hop("nginx", "proxy", 429, "rate"), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind) == ("client", "nginx", "hop-error")
