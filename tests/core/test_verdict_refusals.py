"""A refused or failed round judged by who answered and why, on hand-built evidence of the real payload
types: the body decides the hop, never a proxy's Server header; the cause decides the kind and the
advice; the conversation's own records name the round that crossed a limit."""

from __future__ import annotations

import msgspec

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.classify import classify
from repro.core.error_shapes import ErrorAnswer
from repro.core.evidence import Evidence, HopEvidence
from repro.core.snapshot import Snapshot
from tests.support import error_bodies as bodies
from tests.support.claims import unbacked_claims

STALL = ev.RoundStalled(conv=0, round=5, phase="before-first-byte", t=20.0, stalled_for_s=0.1, started_t=19.9,
                        last_progress_t=19.9)


def hop(name: str, role: str, dialect: str | None = None, canary_status: int = 200,
        url: str = "http://127.0.0.1:1") -> HopEvidence:
    samples = () if dialect is None else (
        ev.ProbeSample(t=19.0, hop=name, snapshot=Snapshot(hop=name, ok=True, dialect=dialect, running=0, queued=0)),)
    ok = canary_status == 200
    outcome = CanaryOutcome(hop=name, url=url, ok=ok, status=canary_status, total_s=0.05, health_status=200,
                            events=1 if ok else 0, done=ok, failure=None if ok else "http",
                            error=None if ok else f"HTTP {canary_status}")
    return HopEvidence(name, role, samples, ev.CanaryResult(t=20.1, hop=name, outcome=outcome))


def failed(status: int, body: str | None, server: str | None = None, **headers: str) -> ev.RoundFailed:
    answer = None if body is None else ErrorAnswer(body=body, headers={k.replace("_", "-"): v for k, v in headers.items()})
    return ev.RoundFailed(t=20.0, conv=0, round=5, phase="before-first-byte", error=f"HTTP {status}", status=status,
                          duration_s=0.1, failure="http", server=server, answer=answer, request_bytes=9_400)


GROWTH = (ev.RoundStarted(t=10.0, conv=0, round=4, prompt_chars=6_800, messages=7),
          ev.RoundStarted(t=19.9, conv=0, round=5, prompt_chars=8_500, messages=9))


def judge(failure: ev.RoundFailed, *hops: HopEvidence, last_answered: int | None = 4):
    evidence = Evidence(stall=STALL, hops=hops, stall_after=5.0, loop_lag_p99_ms=2.0, failure=failure, sent=GROWTH,
                        last_answered=last_answered)
    verdict = classify(evidence)
    assert unbacked_claims(verdict.to_dict()) == [], verdict
    return verdict


def entry(verdict, signal: str) -> dict:
    return next(e for e in verdict.evidence if e["signal"] == signal)


def test_nginxs_413_page_is_request_too_large_at_nginx_with_the_round_that_crossed():
    v = judge(failed(413, bodies.NGINX_413, "nginx/1.22.1"), hop("nginx", "proxy", "nginx"), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind, v.confidence) == ("client", "nginx", "request-too-large", "high")
    assert "round 5 of conversation 0 sent 9,400 bytes (9 messages, 8,500 characters)" in v.summary
    assert "grew by 1,700 characters per round" in v.summary
    assert "round 4 was answered, so the conversation crossed the limit at round 5" in v.summary
    assert "client_max_body_size" in v.advice and "check the API key" not in v.said
    assert entry(v, "answered by")["value"].startswith("the body: nginx's error page")
    assert entry(v, "request body") == {"hop": "client", "signal": "request body", "value": "9,400 bytes", "at": 19.9}


def test_an_engines_context_error_behind_nginx_is_the_engines_though_the_header_says_nginx():
    v = judge(failed(400, bodies.VLLM_034, "nginx/1.22.1"), hop("nginx", "proxy", "nginx"), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind) == ("client", "engine-0", "context-exceeded")
    assert entry(v, "context")["value"] == "context 4096 tokens, prompt at least 4097 tokens"
    assert entry(v, "round failed")["hop"] == "engine-0"
    assert "longer context" in v.advice


def test_an_haproxy_denial_is_haproxys_and_its_own_page_names_it():
    v = judge(failed(413, bodies.HAPROXY_413), hop("lb", "proxy", "haproxy"), hop("engine-0", "engine"))
    assert (v.where, v.kind) == ("lb", "request-too-large")
    assert "req.body_size" in v.advice
    assert entry(v, "answered by")["value"].endswith("its own metrics page is haproxy's")


def test_with_two_proxies_the_page_goes_to_the_one_whose_metrics_say_what_it_is():
    v = judge(failed(413, bodies.NGINX_413, "nginx/1.22.1"), hop("edge", "proxy", "haproxy"),
              hop("inner", "proxy", "nginx"), hop("engine-0", "engine"))
    assert (v.where, v.kind, v.confidence) == ("inner", "request-too-large", "high")


def test_with_two_proxies_and_no_page_read_the_verdict_says_which_is_not_shown():
    v = judge(failed(413, bodies.NGINX_413, "nginx/1.22.1"), hop("edge", "proxy"), hop("inner", "proxy"),
              hop("engine-0", "engine"))
    assert (v.kind, v.confidence) == ("request-too-large", "medium")
    assert "is not shown" in entry(v, "answered by")["value"]


def test_smg_passing_on_a_workers_answer_names_that_worker():
    v = judge(failed(400, bodies.SGLANG_INPUT, "uvicorn", x_smg_routed_worker_id="http://127.0.0.1:18002"),
              hop("router", "router"), hop("engine-0", "engine", url="http://127.0.0.1:18001/v1"),
              hop("engine-1", "engine", url="http://127.0.0.1:18002/v1"))
    assert (v.where, v.kind, v.confidence) == ("engine-1", "context-exceeded", "high")


def test_litellm_quoting_its_engines_context_error_is_the_engines_context():
    v = judge(failed(400, bodies.LITELLM_CONTEXT, "uvicorn"), hop("litellm", "router", "litellm"),
              hop("engine-0", "engine"))
    assert (v.where, v.kind) == ("engine-0", "context-exceeded")
    assert entry(v, "answered by")["hop"] == "litellm"


def test_an_unknown_model_is_rejected_at_the_engine_with_model_advice():
    v = judge(failed(404, bodies.VLLM_MODEL, "nginx/1.22.1"), hop("nginx", "proxy", "nginx"), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind) == ("client", "engine-0", "request-rejected")
    assert "check the model name" in v.advice and "API key" not in v.said


def test_a_bad_key_is_rejected_with_key_advice():
    v = judge(failed(401, '{"error":"Unauthorized"}', "uvicorn"), hop("haproxy", "proxy"), hop("engine-0", "engine"))
    assert (v.where, v.kind) == ("engine-0", "request-rejected")
    assert "check the API key (" in v.advice


def test_a_gateways_429_is_rate_limited_at_the_gateway_with_its_retry_after():
    v = judge(failed(429, bodies.LITELLM_RATE, "uvicorn", retry_after="60"), hop("litellm", "router", "litellm"),
              hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind) == ("client", "litellm", "rate-limited")
    assert "(Retry-After: 60)" in v.summary


def test_a_429_while_the_engine_turns_fresh_requests_away_is_the_engines_saturation():
    v = judge(failed(429, "", None), hop("proxy", "proxy"), hop("engine-0", "engine", canary_status=429))
    assert (v.side, v.where, v.kind) == ("server", "engine-0", "engine-saturated")


def test_a_proxys_own_502_page_names_the_proxy_not_the_engine():
    v = judge(failed(502, bodies.NGINX_502_TOKENS_OFF, "nginx"), hop("nginx", "proxy", "nginx"),
              hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind) == ("client", "nginx", "hop-error")
    assert entry(v, "round failed")["hop"] == "nginx"


def test_an_engines_503_busy_json_passed_through_haproxy_is_the_engines():
    v = judge(failed(503, bodies.VLLM_BUSY, "uvicorn"), hop("haproxy", "proxy", "haproxy"), hop("engine-0", "engine"))
    # Overloaded by its own words ("currently busy"), not saturation inferred from gauges.
    assert (v.side, v.where, v.kind) == ("server", "engine-0", "engine-overloaded")


def test_the_first_round_over_the_limit_says_so():
    first = (ev.RoundStarted(t=19.9, conv=0, round=1, prompt_chars=2_000_000, messages=1),)
    failure = ev.RoundFailed(t=20.0, conv=0, round=1, phase="before-first-byte", error="HTTP 413", status=413,
                             duration_s=0.1, failure="http", answer=ErrorAnswer(body=bodies.NGINX_413),
                             request_bytes=2_000_100)
    evidence = Evidence(stall=STALL, hops=(hop("nginx", "proxy", "nginx"), hop("engine-0", "engine")), stall_after=5.0,
                        failure=failure, sent=first)
    v = classify(evidence)
    assert v.kind == "request-too-large" and "the very first request was over the limit" in v.summary
    assert unbacked_claims(v.to_dict()) == []


def haproxy_page(t: float, frontend_4xx: float, backend_4xx: float) -> ev.ProbeSample:
    series = {"haproxy_frontend_http_responses_total{code=4xx}": frontend_4xx,
              "haproxy_backend_http_responses_total{code=4xx}": backend_4xx}
    return ev.ProbeSample(t=t, hop="lb", snapshot=Snapshot(hop="lb", ok=True, dialect="haproxy", in_flight=0,
                                                           series=series))


def test_haproxys_counters_name_it_when_its_page_was_replaced_by_an_operators_own():
    """An errorfile of the operator's own (JSON of no known shape): the frontends counted a 4xx the
    backends did not, so HAProxy answered itself; with the backends' count moving too, it is not shown."""
    failure = ev.RoundFailed(t=20.0, conv=0, round=5, phase="before-first-byte", error="HTTP 413", status=413,
                             duration_s=0.1, failure="http", answer=ErrorAnswer(body='{"message": "too big"}'),
                             request_bytes=9_400)
    own = HopEvidence("lb", "proxy", (haproxy_page(19.0, 3, 1), haproxy_page(20.5, 4, 1)))
    front = hop("front", "proxy")
    v = judge(failure, front, own, hop("engine-0", "engine"))
    assert (v.where, v.kind, v.confidence) == ("lb", "request-too-large", "high")
    assert entry(v, "answered by")["value"].startswith("its frontends' 4xx count rose by 1 and its backends' did not")
    passed_on = HopEvidence("lb", "proxy", (haproxy_page(19.0, 3, 1), haproxy_page(20.5, 4, 2)))
    v = judge(failure, front, passed_on, hop("engine-0", "engine"))
    assert v.kind == "request-too-large" and v.where != "lb" and v.confidence == "medium"


def test_an_engines_500_behind_nginx_is_server_side_though_nginx_signs_the_header():
    """The wrong side the Server header used to give: nginx puts `Server: nginx` on the engine's own
    500 JSON, and the old rule blamed nginx (client side). The body says the engine."""
    internal = '{"error":{"message":"Internal server error","type":"InternalServerError","param":null,"code":500}}'
    v = judge(failed(500, internal, "nginx/1.22.1"), hop("nginx", "proxy", "nginx"), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind) == ("server", "engine-0", "engine-error")
    assert entry(v, "round failed")["hop"] == "engine-0"


def test_a_400_of_a_request_with_tools_says_so_from_the_count_not_the_words():
    """The driver counts the tool definitions it sent (`tool_definitions`); the words of `error` are not
    read. A failure of an older log, without the count, is not said to have carried tools."""
    tools = failed(400, bodies.VLLM_TOOLS, "uvicorn")
    counted = judge(msgspec.structs.replace(tools, tool_definitions=3), hop("engine-0", "engine", "vllm"))
    assert counted.kind == "request-rejected" and "(the request carried tool definitions)" in counted.summary
    for unknown in (None, 0):
        worded = msgspec.structs.replace(tools, tool_definitions=unknown,
                                         error="HTTP 400 (the request carried 3 tool definitions)")
        assert "(the request carried tool definitions)" not in judge(worded, hop("engine-0", "engine", "vllm")).summary
