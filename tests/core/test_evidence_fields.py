"""An evidence entry carries typed fields beside its words, set where the words are made: the
readers (the console, the deployment diff) decide by them, never by the words."""

from __future__ import annotations

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.evidence import canary_facts, fact


def canary(ok: bool, status: int | None) -> ev.CanaryResult:
    outcome = CanaryOutcome(hop="nginx", url="http://127.0.0.1:1", ok=ok, status=status, total_s=0.05,
                            health_status=200, events=1 if ok else 0, done=ok, failure=None if ok else "http",
                            error=None if ok else f"HTTP {status}")
    return ev.CanaryResult(t=2.0, hop="nginx", outcome=outcome)


def test_a_canary_entry_carries_whether_it_answered_and_its_status():
    answered, _ = canary_facts("nginx", canary(True, 200))
    assert (answered["ok"], answered["status"], answered["value"]) == (True, 200, "fresh canary 200 in 0.05 s")
    refused, _ = canary_facts("nginx", canary(False, 502))
    assert (refused["ok"], refused["status"]) == (False, 502)
    no_status, _ = canary_facts("nginx", canary(False, None))
    assert no_status["ok"] is False and "status" not in no_status  # not known: left out, never None


def test_a_field_not_given_is_not_a_key():
    assert set(fact("nginx", "in flight", "3", 1.0)) == {"hop", "signal", "value", "at"}
    assert fact("nginx", "socket", "pid 7 ...", 1.0, pid=7)["pid"] == 7
