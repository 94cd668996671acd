"""classify() on TLS: a certificate our client refused is `tls-rejected` at that hop, with the
reason, on the side whose change fixes it; an engine our canary could not reach through TLS is
never judged "serving wrongly"; --insecure is an evidence entry of every verdict it touched; and a
round refused by a dead engine with no canary since is engine-unreachable, never "a fresh
connection works"."""

from __future__ import annotations

import pytest

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.classify import classify
from repro.core.evidence import Evidence, HopEvidence
from repro.core.snapshot import Snapshot
from tests.support.claims import unbacked_claims

STALL = ev.RoundStalled(conv=0, round=1, phase="before-first-byte", t=20.0, stalled_for_s=0.0, started_t=20.0,
                        last_progress_t=20.0, reused=False)


def canary(hop: str, *, ok: bool = True, failure: str | None = None, reason: str | None = None,
           verified: bool | None = None, error: str | None = None) -> ev.CanaryResult:
    outcome = CanaryOutcome(hop=hop, url="https://127.0.0.1:1/v1/chat/completions", ok=ok, status=200 if ok else None,
                            total_s=0.05, failure=failure, tls_reason=reason, tls_verified=verified,
                            health_status=200 if ok else None, events=1 if ok else 0, done=ok, error=error)
    return ev.CanaryResult(t=20.2, hop=hop, outcome=outcome)


def refused(hop: str, reason: str) -> ev.CanaryResult:
    return canary(hop, ok=False, failure="tls", reason=reason, verified=True, error=f"tls-rejected: {reason} (detail)")


def idle_engine(name: str = "engine-0", result: ev.CanaryResult | None = None) -> HopEvidence:
    page = ev.ProbeSample(t=20.1, hop=name, snapshot=Snapshot(hop=name, ok=True, running=0, queued=0, itl_count=5))
    return HopEvidence(name, "engine", (page,), result if result is not None else canary(name))


def failed_round(failure: str, error: str) -> ev.RoundFailed:
    return ev.RoundFailed(t=20.01, conv=0, round=1, phase="before-first-byte", error=error, duration_s=0.01,
                          failure=failure, reused=False, last_progress_t=20.0)


def judge(*hops: HopEvidence, failure: ev.RoundFailed | None = None):
    verdict = classify(Evidence(stall=STALL, hops=hops, stall_after=5.0, loop_lag_p99_ms=2.0, failure=failure))
    assert not unbacked_claims(verdict.to_dict()), verdict.to_dict()
    return verdict


@pytest.mark.parametrize(("reason", "side", "words", "advice"), [
    ("unknown-ca", "client", "unknown CA", "--ca-file"),
    ("name-mismatch", "unknown", "name mismatch", "certificate naming this host"),
    ("expired", "unknown", "expired certificate", "renew"),
    ("handshake", "unknown", "TLS handshake failed", "speaks TLS"),
])
def test_a_round_refused_in_its_handshake_is_tls_rejected_at_the_hop_it_talks_to(reason, side, words, advice):
    nginx = HopEvidence("nginx", "proxy", (), refused("nginx", reason))
    v = judge(nginx, idle_engine(), failure=failed_round("tls", f"ConnectError: tls-rejected: {reason}"))
    assert (v.side, v.where, v.kind, v.confidence) == (side, "nginx", "tls-rejected", "high")
    assert words in v.summary and advice in v.advice and "no request was sent" in v.summary
    assert {"hop": "nginx", "signal": "canary"} in [{k: e[k] for k in ("hop", "signal")} for e in v.evidence]


def test_without_a_canary_the_reason_is_not_known_and_the_side_stays_unknown():
    v = judge(idle_engine(result=None), failure=failed_round("tls", "ConnectError: tls-rejected: unknown CA"))
    assert (v.side, v.where, v.kind, v.confidence) == ("unknown", "engine-0", "tls-rejected", "medium")


def test_only_our_canary_refused_is_unknown_side_even_for_an_unknown_ca():
    """triage: no round of ours; what our canary could not verify says nothing of where a harness is stuck."""
    v = judge(HopEvidence("nginx", "proxy", (), refused("nginx", "unknown-ca")), idle_engine())
    assert (v.side, v.where, v.kind, v.confidence) == ("unknown", "nginx", "tls-rejected", "high")
    assert "cannot see past nginx" in v.summary


def test_an_engine_whose_canary_was_refused_is_never_judged_serving_wrongly():
    """Before: a refused canary with no /health and no metrics read was "frontend-lost", server side."""
    engine = HopEvidence("engine-0", "engine", (), refused("engine-0", "unknown-ca"))
    v = judge(HopEvidence("proxy", "proxy", (), canary("proxy")), engine)
    assert v.side != "server" and v.kind == "tls-rejected" and v.where == "engine-0"
    assert v.confidence == "medium"  # behind the hop the round talks to: only our canary met it


def test_insecure_is_an_evidence_entry_of_every_verdict_it_touched():
    nginx = HopEvidence("nginx", "proxy", (), canary("nginx", verified=False))
    hung = idle_engine(result=canary("engine-0", ok=False, failure="timeout", error="no first byte"))
    v = judge(nginx, hung)
    assert {"hop": "nginx", "signal": "TLS", "value": "certificate not verified (--insecure)", "at": 20.2} in v.evidence
    plain = judge(HopEvidence("nginx", "proxy", (), canary("nginx", verified=None)), hung)
    assert not [e for e in plain.evidence if e["signal"] == "TLS"]  # plain http: not touched


def test_a_round_refused_by_a_dead_engine_with_no_canary_since_is_engine_unreachable():
    """The contradiction `repro run` printed: a round that failed after the wave's canaries came back
    had none, and was told "a fresh connection works" while nothing listened."""
    v = judge(HopEvidence("target", "engine", (), None),
              failure=failed_round("connect", "ConnectError: cannot connect to 127.0.0.1:1: connection refused"))
    assert (v.side, v.where, v.kind, v.confidence) == ("server", "target", "engine-unreachable", "medium")
    assert "fresh connection works" not in v.summary


def test_a_refused_round_while_a_fresh_canary_works_is_still_not_blamed_on_the_engine():
    v = judge(idle_engine("target"), failure=failed_round("connect", "ConnectError: connection refused"))
    assert v.side != "server" and "a fresh connection works" in v.summary
