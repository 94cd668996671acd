"""The order of classify's decisions, read from its table (repro.core.classify.RULES): the rules'
names in order, each saying what it needs and concludes, and, on evidence built from the real
payload types, a rule earlier in the table winning over a later one where both apply."""

from __future__ import annotations

import msgspec
import pytest

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.classify import RULES, classify
from repro.core.error_shapes import ErrorAnswer
from repro.core.evidence import Evidence, HopEvidence
from repro.core.rules.case import Case
from repro.core.snapshot import Snapshot
from tests.support import error_bodies as bodies

ORDER = [
    # the client's own health, and a request refused for what it sent
    "driver_lagged", "driver_unread", "tls_refused", "too_large", "past_context", "upstream_path_refused",
    "request_refused", "client_held", "judge_lagged",
    # the engines
    "engine_at_fault", "deadline_while_receiving", "engine_took_no_connection",
    # a failed round, every engine serving
    "round_could_not_connect", "hop_took_no_connection", "rate_limited", "rate_limit_not_placed",
    "engine_says_overloaded",
    "engine_answered_status",
    "gateway_status_of_only_hop", "status_not_placed", "hop_answered_status", "fresh_request_fails_too",
    "keepalive_race", "engine_stream_error", "connection_broke",
    # the first hop in front that fails a fresh request
    "hop_answers_nothing", "engine_refuses_through_hop", "hop_passes_on_refusal_for_load",
    "hop_answers_error", "hop_cuts_connection", "hop_withholds",
    # every fresh path answers
    "engine_refuses_fresh_requests", "harness_idle", "answer_stopped_or_idle", "no_canary_answered",
    "nothing_read", "hop_buffers_response", "connection_wedged", "response_stopped",
]

STALL = ev.RoundStalled(conv=1, round=3, phase="before-first-byte", t=20.0, stalled_for_s=5.0, started_t=15.0,
                        last_progress_t=15.0, local="127.0.0.1:50000", reused=True)


def sample(t: float, hop: str, ok: bool = True, **fields) -> ev.ProbeSample:
    return ev.ProbeSample(t=t, hop=hop, snapshot=Snapshot(hop=hop, ok=ok, **fields))


def canary(hop: str, status: int | None = 200, failure: str | None = None) -> ev.CanaryResult:
    ok = failure is None
    outcome = CanaryOutcome(hop=hop, url="http://127.0.0.1:1", ok=ok, status=status, total_s=0.05, health_status=200,
                            events=1 if ok else 0, done=ok, failure=failure,
                            error=None if ok else f"HTTP {status}" if status else "no first byte within 2 s")
    return ev.CanaryResult(t=20.1, hop=hop, outcome=outcome)


def relayed_canary(hop: str, status: int) -> ev.CanaryResult:
    """A canary answered `status` by a gateway quoting its upstream's error (LiteLLM's openai/ provider)."""
    result = canary(hop, status, "http")
    return ev.CanaryResult(t=result.t, hop=hop, outcome=msgspec.structs.replace(result.outcome, relayed="OpenAI"))


def engine(name: str = "engine-0", *, running: int = 0, answers: ev.CanaryResult | None = None,
           samples: bool = True) -> HopEvidence:
    """An engine read before and after the stall, no token moving, with the fresh canary given."""
    pages = tuple(sample(14.0 + 3 * i, name, running=running, queued=0, itl_count=100) for i in range(3))
    return HopEvidence(name, "engine", pages if samples else (), answers)


def hung() -> HopEvidence:
    return engine(running=4, answers=canary("engine-0", None, "timeout"))


def idle() -> HopEvidence:
    return engine(answers=canary("engine-0"))


def proxy(*, held: int = 0, answers: ev.CanaryResult | None = None, silent: bool = False) -> HopEvidence:
    """A proxy whose own page answered before the stall and, unless silent, after it."""
    pages = (sample(14.0, "proxy", in_flight=held, held=held),
             sample(20.0, "proxy", ok=not silent, **({} if silent else {"in_flight": held, "held": held})))
    return HopEvidence("proxy", "proxy", pages, answers or canary("proxy"))


def evidence(*hops: HopEvidence, stall: ev.RoundStalled = STALL, **fields) -> Evidence:
    return Evidence(stall=stall, hops=hops, stall_after=5.0, **{"loop_lag_p99_ms": 5.0, **fields})


def http_failure(status: int, body: str) -> ev.RoundFailed:
    return ev.RoundFailed(t=20.0, conv=1, round=3, phase="before-first-byte", error=f"HTTP {status}", status=status,
                          duration_s=0.1, failure="http", answer=ErrorAnswer(body=body, headers={}))


def applying(case_evidence: Evidence) -> list[str]:
    """Every rule that would conclude on this evidence, in the table's order."""
    case = Case(case_evidence)
    return [rule.name for rule in RULES if rule.decide(case) is not None]


def test_the_table_lists_the_rules_in_this_order():
    assert [rule.name for rule in RULES] == ORDER


def test_every_rule_says_what_it_needs_and_what_it_concludes():
    for rule in RULES:
        doc = " ".join((rule.decide.__doc__ or "").split())
        assert doc.startswith("Needs: ") and " Concludes " in doc, rule.name


def test_the_last_rule_always_concludes():
    assert applying(evidence())[-1] == "response_stopped"


TRIAGE = msgspec.structs.replace(STALL, reused=False, local=None)

# (earlier rule, later rule, evidence where both apply, the verdict's (where, kind))
EARLIER_WINS = {
    "a lagging driver before a hung engine": (
        "driver_lagged", "engine_at_fault", evidence(proxy(), hung(), loop_lag_p99_ms=4000.0),
        ("client", "client-overloaded")),
    "a refusal for what was sent before a hung engine": (
        "too_large", "engine_at_fault",
        evidence(proxy(), hung(), failure=http_failure(413, bodies.NGINX_413)), ("proxy", "request-too-large")),
    "a gateway quoting its upstream's 404 before any other refusal": (
        "upstream_path_refused", "request_refused",
        evidence(HopEvidence("litellm", "proxy", (), canary("litellm")), idle(),
                 failure=http_failure(404, '{"error":{"message":"litellm.NotFoundError: NotFoundError: '
                                           'OpenAIException - {\\"detail\\":\\"Not Found\\"}","type":null,'
                                           '"param":null,"code":"404"}}')),
        ("litellm", "request-rejected")),
    "an engine saying it is busy before the status alone": (
        "engine_says_overloaded", "engine_answered_status",
        evidence(idle(), failure=http_failure(503, bodies.VLLM_BUSY)), ("engine-0", "engine-overloaded")),
    "a hung engine before the hop in front that fails": (
        "engine_at_fault", "hop_withholds", evidence(proxy(answers=canary("proxy", None, "timeout")), hung()),
        ("engine-0", "engine-hung")),
    "a reused connection closed after idling: a keep-alive race before a broken connection": (
        "keepalive_race", "connection_broke",
        evidence(proxy(), idle(), failure=ev.RoundFailed(t=20.0, conv=1, round=3, phase="before-first-byte",
                                                         error="reset", duration_s=0.01, failure="reset",
                                                         reused=True, idle_s=4.0)),
        ("proxy", "keepalive-race")),
    "a hop whose page went silent answers nothing before it withholds": (
        "hop_answers_nothing", "hop_withholds", evidence(proxy(answers=canary("proxy", None, "timeout"), silent=True),
                                                         idle()),
        ("proxy", "hop-unresponsive")),
    "a fresh stream cut by a hop is a reset there before it withholds": (
        "hop_cuts_connection", "hop_withholds",
        evidence(proxy(answers=canary("proxy", 200, "reset")), idle()), ("proxy", "connection-reset")),
    "a round whose stream was cut, and the hop's fresh stream cut too: a reset there, either way": (
        "fresh_request_fails_too", "hop_cuts_connection",
        evidence(proxy(answers=canary("proxy", 200, "reset")), idle(),
                 failure=ev.RoundFailed(t=20.0, conv=1, round=3, phase="mid-stream", error="reset",
                                        duration_s=0.5, failure="truncated")),
        ("proxy", "connection-reset")),
    "an engine's own 404 through a hop before the hop's error": (
        "engine_refuses_through_hop", "hop_answers_error",
        evidence(proxy(answers=canary("proxy", 404, "http")), engine(answers=canary("engine-0", 404, "http"))),
        ("engine-0", "request-rejected")),
    "a gateway's canary quoting its engine's 429 before the gateway's error": (
        "hop_passes_on_refusal_for_load", "hop_answers_error",
        evidence(proxy(answers=relayed_canary("proxy", 429)), idle()), ("engine-0", "engine-saturated")),
    "a gateway quoting its engine's 429 is the engine's answer before the gateway's": (
        "engine_answered_status", "hop_answered_status",
        evidence(proxy(), idle(), failure=http_failure(429, bodies.LITELLM_RELAYED_429)),
        ("engine-0", "engine-saturated")),
    "triage: an engine refusing fresh requests before a wedge": (
        "engine_refuses_fresh_requests", "connection_wedged",
        evidence(engine(answers=canary("engine-0", 404, "http")), stall=TRIAGE, round_watched=False),
        ("engine-0", "request-rejected")),
    "no canary answered before nothing read": (
        "no_canary_answered", "nothing_read", evidence(engine(samples=False)), (None, "no-evidence")),
    "a wedged connection before a response that stopped": (
        "connection_wedged", "response_stopped", evidence(proxy(held=1), idle()), ("proxy", "connection-wedged")),
}


@pytest.mark.parametrize("name", list(EARLIER_WINS))
def test_an_earlier_rule_wins_over_a_later_one_where_both_apply(name):
    earlier, later, given, (where, kind) = EARLIER_WINS[name]
    assert ORDER.index(earlier) < ORDER.index(later)
    found = applying(given)
    assert earlier in found and later in found, found
    assert found[0] == earlier, found
    verdict = classify(given)
    assert (verdict.where, verdict.kind) == (where, kind), verdict.summary


def test_what_an_earlier_rule_read_stays_in_the_verdict_and_the_blamed_hop_is_not_ruled_out():
    """The driver's lag, read by the first rule, is an evidence entry of a verdict the walk reached;
    the proxy's own canary, said on the way, is left out of the ruled-out lines when it is blamed."""
    verdict = classify(evidence(proxy(held=1), idle()))
    assert verdict.evidence[0]["signal"] == "event-loop lag p99"
    assert verdict.ruled_out[0].startswith("client: event-loop lag p99 5 ms")
    assert [line.split(":")[0] for line in verdict.ruled_out] == ["client", "engine-0"]


def test_a_proxys_flow_log_with_no_hop_read_leaves_nothing_read_to_conclude():
    """The same evidence as "no canary answered", but the proxy's flow log saw the request go on: the
    earlier rule no longer applies and the next one concludes."""
    given = evidence(engine(samples=False), flows=({"event": "request_seen"}, {"event": "forwarded"}))
    assert applying(given)[0] == "nothing_read"
    assert classify(given).summary == "no hop could be read and no canary ran: nothing to judge by"
