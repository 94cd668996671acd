"""A hop whose fresh canary's connection was closed under it (a fault proxy's truncate-reset cutting
the stream after its first events, or a drop before any answer) while the engine behind it serves
its own canary is connection-reset at that hop, client side: it withholds nothing, it closes. Found
by `repro harness` on Claude Code under reset-mid-stream, judged request-withheld at the proxy."""

from __future__ import annotations

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.classify import classify
from repro.core.evidence import Evidence, HopEvidence
from repro.core.next_actions import ACTIONS, next_action
from repro.core.snapshot import Snapshot
from tests.support.claims import unbacked_claims

TRIAGE = ev.RoundStalled(conv=0, round=0, phase="before-first-byte", t=20.0, stalled_for_s=0.1, started_t=19.9,
                         last_progress_t=19.9)
CUT = "read: RemoteProtocolError: peer closed connection without sending complete message body after 1 events"


def hop(name: str, role: str, *, status: int | None = 200, failure: str | None = None, events: int = 1,
        pages: bool = False) -> HopEvidence:
    """A hop whose fresh canary was served, or failed as `failure` after `events` SSE events."""
    ok = failure is None
    samples = (ev.ProbeSample(t=20.05, hop=name, snapshot=Snapshot(hop=name, ok=True, running=0, queued=0)),) \
        if pages else ()
    outcome = CanaryOutcome(hop=name, url="http://127.0.0.1:1", ok=ok, status=status, total_s=0.05,
                            health_status=200, events=events, done=ok, failure=failure,
                            error=None if ok else CUT if status == 200 else "no response")
    return HopEvidence(name, role, samples, ev.CanaryResult(t=20.1, hop=name, outcome=outcome))


def judge(*hops: HopEvidence):
    return classify(Evidence(stall=TRIAGE, hops=hops, stall_after=5.0, loop_lag_p99_ms=5.0, round_watched=False))


ENGINE = hop("engine-0", "engine", pages=True)


def test_a_stream_cut_by_the_proxy_is_a_connection_reset_there_not_a_withheld_request():
    verdict = judge(hop("proxy", "proxy", failure="reset"), ENGINE)
    assert (verdict.side, verdict.where, verdict.kind, verdict.confidence) == \
        ("client", "proxy", "connection-reset", "high")
    assert "it cut the stream after 1 SSE event (proxy withholds nothing" in verdict.summary
    assert "withheld" not in verdict.kind and not any(line.startswith("proxy:") for line in verdict.ruled_out)
    action = next_action(verdict)
    assert "read and idle timeouts" in action.do and "maximum response body size" in action.do
    assert unbacked_claims(verdict.to_dict()) == []


def test_a_connection_closed_before_any_answer_is_a_reset_with_the_kinds_own_action():
    verdict = judge(hop("proxy", "proxy", status=None, failure="reset", events=0), ENGINE)
    assert (verdict.where, verdict.kind) == ("proxy", "connection-reset")
    assert "it closed the connection before any answer" in verdict.summary
    assert next_action(verdict).do == ACTIONS["connection-reset"][0].format(hop="proxy")


def test_the_hop_nearest_the_engines_that_cuts_is_blamed_not_the_one_in_front_passing_it_on():
    verdict = judge(hop("gateway", "proxy", failure="reset"), hop("router", "router", failure="reset", events=2),
                    ENGINE)
    assert (verdict.where, verdict.kind) == ("router", "connection-reset")
    assert "after 2 SSE events" in verdict.summary


def test_a_canary_that_timed_out_still_is_withheld_not_reset():
    """The new rule reads only a closed connection: a hop that answers nothing in time is left to the
    rules after it."""
    verdict = judge(hop("proxy", "proxy", status=None, failure="timeout", events=0), ENGINE)
    assert verdict.kind == "request-withheld"


def test_an_engine_that_fails_its_own_canary_is_blamed_before_a_cut_in_front():
    verdict = judge(hop("proxy", "proxy", failure="reset"), hop("engine-0", "engine", status=None,
                                                                  failure="timeout", events=0, pages=True))
    assert (verdict.side, verdict.where) == ("server", "engine-0") and verdict.kind != "connection-reset"


def judge_failed(*hops: HopEvidence):
    """A round of `repro run` whose own stream was cut mid-way (the driver's failure truncated)."""
    failure = ev.RoundFailed(t=20.0, conv=0, round=3, phase="mid-stream", error="truncated", duration_s=0.2,
                             failure="truncated")
    return classify(Evidence(stall=TRIAGE, hops=hops, stall_after=5.0, loop_lag_p99_ms=5.0, failure=failure))


def test_a_cut_round_whose_fresh_canary_is_cut_too_is_a_reset_at_that_hop_not_an_error_status():
    verdict = judge_failed(hop("proxy", "proxy", failure="reset"), ENGINE)
    assert (verdict.side, verdict.where, verdict.kind, verdict.outcome) == \
        ("client", "proxy", "connection-reset", "failed")
    assert "read and idle timeouts" in next_action(verdict).do


def test_a_cut_round_whose_fresh_canary_gets_an_error_status_stays_a_hop_error():
    failing = hop("proxy", "proxy", status=502, failure="http", events=0)
    verdict = judge_failed(failing, ENGINE)
    assert (verdict.where, verdict.kind) == ("proxy", "hop-error")
