"""Property: a verdict asserts nothing its evidence lacks, and never blames the front for an engine
whose own fresh canary failed. Hypothesis builds evidence from the real payload types (samples
before and after the stall, readable or not; canaries that pass or fail every way, /health
answering or not) and every sentence of the verdict is checked against it."""

from __future__ import annotations

import re

from hypothesis import given, settings

from repro.core import events as ev
from repro.core.classify import classify
from repro.core.evidence import Evidence, HopEvidence
from repro.core.harness import HARNESS, quiet_for, use_of
from repro.core.next_actions import ADVICE
from tests.support.claims import advice_misfits, unbacked_claims
from tests.support.evidence_strategies import LAST_PROGRESS_T, evidences

# A refusal stands on the round's own answer (a 4xx that says why): an engine failing its canary
# now does not make the request that was refused then the engine's fault.
REFUSALS = frozenset({"request-too-large", "context-exceeded", "request-rejected"})
# Decided before any engine is judged, by design: a certificate our client refused (nothing behind
# it was asked), the judging process too late to place anything, the client holding the round itself.
BEFORE_THE_ENGINES = frozenset({"tls-rejected", "judge-overloaded", "client-queued"})


def fresh_readable(hop: HopEvidence) -> ev.ProbeSample | None:
    return next((s for s in reversed(hop.samples) if s.t > LAST_PROGRESS_T and s.snapshot.ok), None)


def idle_since_stall(hop: HopEvidence) -> bool:
    s = fresh_readable(hop)
    return s is not None and s.snapshot.running == 0 and s.snapshot.queued == 0


@settings(max_examples=600, deadline=None)
@given(evidences())
def test_every_claim_has_its_evidence(evidence):
    assert_claims_backed(evidence)


@settings(max_examples=400, deadline=None)
@given(evidences(triage_pid=True))
def test_a_harness_read_from_outside_names_a_hop_only_on_positive_evidence(evidence):
    assert_claims_backed(evidence)
    assert unbacked_claims(classify(evidence).to_dict()) == []


def assert_claims_backed(evidence: Evidence) -> None:
    v = classify(evidence)
    hops = {h.name: h for h in evidence.hops}
    engines = [h for h in evidence.hops if h.role == "engine"]
    texts = [v.summary, *v.ruled_out]

    # The worst bug: an engine whose own fresh canary failed, and the verdict blames the front.
    # (Unless bytes wait unread in our own receive queue: then our canaries are suspect too.)
    unread = any(s.socket.rqueue for s in evidence.sockets)
    if any(h.canary is not None and not h.canary.outcome.ok for h in engines) and not unread \
            and v.kind not in REFUSALS | BEFORE_THE_ENGINES:
        assert v.side == "server", (v.side, v.kind, v.summary)
    if v.kind in REFUSALS:
        assert evidence.failure is not None and 400 <= evidence.failure.status < 500, (v.kind, evidence.failure)
    # The advice fits the kind and the cause: never "check the API key" for a body too large.
    assert advice_misfits(v.to_dict()) == [], v.summary

    for text in texts:
        for name, hop in hops.items():
            if f"{name} answers /health (200)" in text:
                assert hop.canary is not None and hop.canary.outcome.health_status == 200, text
            if text.startswith(f"{name}: idle"):
                assert idle_since_stall(hop), text
            if text.startswith(f"{name}: moving"):
                assert len([s for s in hop.samples if s.t > LAST_PROGRESS_T and s.snapshot.ok]) >= 2, text
            if text.startswith(f"{name}:") and "running" in text and "before" not in text:
                counts = re.search(r"(\d+) running, (\d+) queued", text)
                if counts:
                    present = fresh_readable(hop)
                    assert present is not None, text
                    assert (int(counts[1]), int(counts[2])) == (present.snapshot.running, present.snapshot.queued), text
        if "engines serve fresh requests" in text:
            assert engines and all(h.canary is not None and h.canary.outcome.ok for h in engines), text
        if "every fresh path answers" in text:
            assert all(h.canary is not None and h.canary.outcome.ok for h in evidence.hops), text
    if "show idle" in v.summary:
        assert v.where in hops and idle_since_stall(hops[v.where]), v.summary
    if "stopped answering" in v.summary and v.where in hops:
        hop = hops[v.where]
        fresh = [s for s in hop.samples if s.t > LAST_PROGRESS_T]
        assert fresh and not any(s.snapshot.ok for s in fresh), v.summary
    # Every evidence entry names a hop of the stack (or the client, or the harness read from outside) and carries a time.
    for entry in v.evidence:
        assert entry["hop"] in hops or entry["hop"] in ("client", HARNESS), entry
        assert entry["at"] is not None and entry["value"], entry
    # Triage watched no round: its phase and stall only as the harness's sockets showed them.
    harness = [s.socket for s in evidence.sockets if s.conv is None]
    read = {t.pid: t for t in evidence.threads}
    if not evidence.round_watched:
        assert v.phase in (None, "before-first-byte"), v.phase
        if v.phase == "before-first-byte":
            assert any(s.hop and use_of(s, read.get(s.pid)) in ("waiting", "unacked") for s in harness), v
        assert v.stalled_for_s is None or any(quiet_for(s) is not None and abs(quiet_for(s) - v.stalled_for_s) < 1e-3
                                              for s in harness), v.stalled_for_s
    # harness-idle only with every fresh path answering and no connection of the harness in use.
    if v.kind == "harness-idle":
        assert all(h.canary is not None and h.canary.outcome.ok for h in evidence.hops), v.summary
        assert not any(use_of(s, read.get(s.pid)) in ("waiting", "unacked", "read", "unread", "connecting")
                       for s in harness), v.summary
    # The worst bug's cousin: a hop named as where a harness's connection is wedged, with no
    # positive evidence (its connection in use, a hop holding requests or failing a canary).
    if v.kind == "connection-wedged" and v.where in hops and harness and not any(e["signal"] == "holds requests"
                                                                                 for e in v.evidence):
        assert any(s.hop == v.where and use_of(s, read.get(s.pid)) in ("waiting", "unacked", "read") for s in harness), v


@settings(max_examples=300, deadline=None)
@given(evidences())
def test_the_matrix_checker_finds_every_claim_backed(evidence):
    """The checker run over every verdict of the scenario matrix agrees with the property above."""
    assert unbacked_claims(classify(evidence).to_dict()) == []


def test_the_matrix_checker_catches_a_claim_without_evidence():
    verdict = {"where": "engine-0", "summary": "engine-0 answers /health (200) yet a fresh request failed; "
               "its gauges, read since the stall, show idle", "ruled_out": ["engine-1: idle, 0 running, 0 queued"],
               "evidence": [{"hop": "engine-0", "signal": "/health", "value": "no answer", "at": 1.0},
                            {"hop": "engine-1", "signal": "running/queued before the stall", "value": "0 running, 0 queued",
                             "at": 1.0}]}
    problems = " | ".join(unbacked_claims(verdict))
    for claim in ("'engine-0 answers /health'", "'engine-1: idle'", "counts for engine-1", "'show idle'"):
        assert claim in problems, problems


def test_the_advice_checker_catches_advice_that_does_not_fit():
    """What the tool used to say of nginx's 413 (a conversation past client_max_body_size) is caught."""
    assert all(sentence.split("{")[0] for sentence in ADVICE.values()), "each advice opens with fixed words to find"
    old = {"kind": "request-rejected", "status": 413, "evidence": [], "summary": "round failed: HTTP 413; the "
           "request itself is refused: check the API key, the model name and the URL against what nginx accepts"}
    assert "a 413 (too large) given request-rejected's advice" in " | ".join(advice_misfits(old)), old
    too_large = {"kind": "request-too-large", "status": 413, "evidence": [], "summary": "nginx refused the request "
                 "with HTTP 413; check the API key (--api-key, or the environment variable the harness reads)"}
    problems = " | ".join(advice_misfits(too_large))
    assert "advice 'key' in a request-too-large verdict" in problems and "without its advice" in problems, problems
    key_for_400 = {"kind": "request-rejected", "status": 400, "evidence": [], "summary": 'engine-0 refused the request '
                   'itself with HTTP 400: "bad json"; check the API key (--api-key, or the environment variable the '
                   'harness reads)'}
    assert "API-key advice for HTTP 400" in " | ".join(advice_misfits(key_for_400))
