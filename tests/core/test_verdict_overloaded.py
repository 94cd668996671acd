"""An engine that says it is overloaded (the Messages API's 529 overloaded_error, vLLM's 503 "currently
busy", SGLang's 503 "queue is full") is judged overloaded by that cause, at the engine, whoever passed
the answer on; a bare 429 or 503 stays saturation (inferred), and a proxy's own 503 page is never
the engine's."""

from __future__ import annotations

import pytest

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
NGINX_503 = ("<html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n<body>\r\n<center><h1>503 "
             "Service Temporarily Unavailable</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>")
LITELLM_503 = ('{"error":{"message":"litellm.ServiceUnavailableError: Hosted_vllmException - The engine is currently '
               'busy and cannot accept new requests.","type":null,"param":null,"code":"503"}}')


def hop(name: str, role: str, status: int = 200, cause: str | None = None) -> HopEvidence:
    """A hop whose metrics page was read since the round began (idle) and whose fresh canary got `status`."""
    samples = (ev.ProbeSample(t=20.05, hop=name, snapshot=Snapshot(hop=name, ok=True, dialect="vllm", running=0,
                                                                   queued=0)),) if role == "engine" else ()
    ok = status == 200
    outcome = CanaryOutcome(hop=name, url="http://127.0.0.1:1", ok=ok, status=status, total_s=0.05, health_status=200,
                            events=1 if ok else 0, done=ok, failure=None if ok else "http",
                            error=None if ok else f"http {status}", cause=cause)
    return HopEvidence(name, role, samples, ev.CanaryResult(t=20.1, hop=name, outcome=outcome))


def judge(status: int, body: str, server: str | None, *hops: HopEvidence):
    failure = ev.RoundFailed(t=20.0, conv=0, round=3, phase="before-first-byte", error=f"HTTP {status}",
                             status=status, duration_s=0.01, failure="http", server=server,
                             answer=ErrorAnswer(body=body))
    verdict = classify(Evidence(stall=STALL, hops=hops, stall_after=5.0, loop_lag_p99_ms=2.0, failure=failure))
    assert unbacked_claims(verdict.to_dict()) == [], verdict
    return verdict


@pytest.mark.parametrize("status, body", [(529, bodies.ANTHROPIC_OVERLOADED), (503, bodies.VLLM_BUSY),
                                          (503, bodies.SGLANG_QUEUE)])
def test_an_engine_that_says_it_is_overloaded_to_round_and_canary_is_overloaded_high(status, body):
    v = judge(status, body, "uvicorn", hop("engine-0", "engine", status, "busy"))
    assert (v.side, v.where, v.kind, v.confidence) == ("server", "engine-0", "engine-overloaded", "high")
    assert "saying it is overloaded" in v.summary
    assert "engine-0" in next_action(v).do and "overloaded" in next_action(v).do


def test_an_overloaded_answer_whose_canary_is_served_is_the_engines_medium():
    """The overload passed (a fresh request is served): the round's own answer still names who and why."""
    v = judge(503, bodies.VLLM_BUSY, "uvicorn", hop("proxy", "proxy"), hop("engine-0", "engine"))
    assert (v.side, v.where, v.kind, v.confidence) == ("server", "engine-0", "engine-overloaded", "medium")
    assert "currently busy" in v.summary and "a fresh request is served" in v.summary


def test_litellm_relaying_an_overloaded_engine_names_the_engine_not_litellm():
    v = judge(503, LITELLM_503, "uvicorn", hop("litellm", "router", 503), hop("engine-0", "engine", 503, "busy"))
    assert (v.side, v.where, v.kind) == ("server", "engine-0", "engine-overloaded")


@pytest.mark.parametrize("status, cause", [(503, None), (429, "rate")])
def test_a_bare_refusal_for_load_stays_saturation(status, cause):
    v = judge(status, "", "uvicorn", hop("engine-0", "engine", status, cause))
    assert (v.side, v.where, v.kind) == ("server", "engine-0", "engine-saturated")


def test_a_proxys_own_503_page_is_never_the_engines_overload():
    v = judge(503, NGINX_503, "nginx/1.22.1", hop("nginx", "proxy", 503), hop("engine-0", "engine"))
    assert (v.side, v.where) == ("client", "nginx") and v.kind != "engine-overloaded"
