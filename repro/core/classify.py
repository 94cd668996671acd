"""Judge a stall: which side, which hop, what kind, how sure, and what was ruled out.

`classify(evidence) -> Verdict` is pure: plain data in, plain data out, no clocks or sockets,
so it is tested on hand-built evidence and re-run offline by `repro report` on a recorded log.

What a verdict may say: every sentence of its summary and ruled-out list is made from one of
its evidence entries (hop, signal, value, time). A probe sample taken before the round stopped
progressing is history, shown as such, never the hop's state at the stall; a gauge not read
since then is "not read", never "idle"; "answers /health" needs a /health 200; "engines serve
fresh requests" needs every engine's own fresh canary to have succeeded.

How it decides is `RULES`, tried in order; the first that concludes makes the verdict. Each rule
is a small function of the `Case` (repro.core.rules) whose docstring says what it needs and what
it concludes. What each rule read on the way (its evidence entries) and ruled out stays in the
verdict whichever rule concludes; the hop blamed is never also ruled out. In outline:
1. The client's own health: the driver's event loop lagging or not reading, a certificate our
   client refused, a request refused for what it sent (the round's own answer stands whatever
   state the hops are in now), the client holding its own round; then the judging process's own
   lag (with --workers, it reads the hops and times the canaries: lagging, it cannot place the
   stall).
2. Each engine's state at the stall, from several signals, never one gauge
   (repro.core.engine_state): an engine at fault is blamed first.
3. A failed round with every engine serving: what its failure shows (no connection, an HTTP
   status and who wrote it, a broken connection).
4. With every engine serving, the stall is in front of them. Canaries through each hop find the
   first hop that fails a fresh request (it answers nothing, passes on an engine's refusal,
   answers an error, cuts the connection, or withholds); the in-flight ledger (proxy held flows,
   router active requests) and the proxy's flow log say whether the request or the response is withheld. Every
   fresh path working while the round's reused connection stays stuck is a connection-level wedge.
"""

from __future__ import annotations

from repro.core.evidence import Evidence, Fact, fact
from repro.core.failures import failure_text
from repro.core.rules import client, engines, failed, front, refusals, stalls
from repro.core.rules.case import Case, Cleared, Finding, Rule
from repro.core.verdict import Verdict

RULES: tuple[Rule, ...] = (
    # 1. the client's own health, and a request refused for what it sent
    Rule(client.driver_lagged, reads=client.driver_lag_read, clears=client.driver_lag_cleared),
    Rule(client.driver_unread, reads=client.round_and_sockets_read, clears=client.harness_in_use),
    Rule(client.tls_refused),
    Rule(refusals.too_large),
    Rule(refusals.past_context),
    Rule(refusals.upstream_path_refused),
    Rule(refusals.request_refused),
    Rule(client.client_held),
    Rule(client.judge_lagged, reads=client.judge_lag_read, clears=client.judge_lag_cleared),
    # 2. the engines
    Rule(engines.engine_at_fault, reads=engines.engine_states_read, clears=engines.engines_cleared),
    Rule(engines.deadline_while_receiving),
    Rule(engines.engine_took_no_connection),
    # 3. a failed round, every engine serving; from here on each hop in front whose own fresh
    # canary answered is ruled out
    Rule(failed.round_could_not_connect, clears=engines.front_cleared),
    Rule(failed.hop_took_no_connection),
    Rule(failed.rate_limited, reads=failed.answered_read),
    Rule(failed.rate_limit_not_placed),
    Rule(failed.engine_says_overloaded),
    Rule(failed.engine_answered_status),
    Rule(failed.gateway_status_of_only_hop),
    Rule(failed.status_not_placed),
    Rule(failed.hop_answered_status),
    Rule(failed.fresh_request_fails_too),
    Rule(failed.keepalive_race),
    Rule(failed.engine_stream_error),
    Rule(failed.connection_broke),
    # 4. in front of the engines: the first hop that fails a fresh request
    Rule(front.hop_answers_nothing, reads=front.walk_read),
    Rule(front.engine_refuses_through_hop),
    Rule(front.hop_passes_on_refusal_for_load),
    Rule(front.hop_answers_error),
    Rule(front.hop_cuts_connection),
    Rule(front.hop_withholds),
    # ... and every fresh path answers
    Rule(stalls.engine_refuses_fresh_requests),
    Rule(stalls.harness_idle),
    Rule(stalls.answer_stopped_or_idle),
    Rule(stalls.no_canary_answered),
    Rule(stalls.nothing_read),
    Rule(stalls.hop_buffers_response),
    Rule(stalls.connection_wedged),
    Rule(stalls.response_stopped),
)


def classify(evidence: Evidence) -> Verdict:
    case = Case(evidence)
    facts: list[Fact] = []
    cleared: list[Cleared] = []
    for rule in RULES:
        if rule.reads is not None:
            facts += rule.reads(case)
        if rule.clears is not None:
            cleared += rule.clears(case)
        found = rule.decide(case)
        if found is not None:
            return verdict(case, found, facts + list(found.facts), cleared + list(found.cleared))
    raise AssertionError("the last rule always concludes")


def tls_unverified(evidence: Evidence) -> list[Fact]:
    """An entry per https hop whose canary checked no certificate (--insecure): whatever it
    answered is not proven to come from that hop."""
    return [fact(h.name, "TLS", "certificate not verified (--insecure)", h.canary.t) for h in evidence.hops
            if h.canary is not None and h.canary.outcome.tls_verified is False]


def ruled_out(cleared: list[Cleared], where: str | None, suspects: tuple[str, ...] = ()) -> list[str]:
    """The verdict's ruled-out lines, in the order said: the hop blamed, and the hops a verdict that
    names none says may be at fault, are left out, whatever was said of them on the way (a hop is
    where the fault is or ruled out, never both; what its own fresh canary showed stays in its
    evidence entries)."""
    return [f"{hop}: {text}" for hop, text in cleared if hop != where and hop not in suspects]


def verdict(case: Case, found: Finding, facts: list[Fact], cleared: list[Cleared]) -> Verdict:
    """The verdict of the rule that concluded. A round watched (run): its own phase and silence.
    Triage watched none: only what the harness's sockets showed (triage --pid), else unknown."""
    stall, failure, sockets = case.stall, case.failure, case.sockets
    watched = case.evidence.round_watched
    stalled = stall.stalled_for_s if watched else (
        found.stalled_for if found.stalled_for is not None else sockets.stalled_for_s)
    return Verdict(
        side=found.side, where=found.where, kind=found.kind, confidence=found.confidence,
        phase=stall.phase if watched else sockets.phase, conversation=stall.conv, round=stall.round,
        stalled_for_s=None if stalled is None else round(stalled, 3),
        evidence=facts + tls_unverified(case.evidence),
        ruled_out=ruled_out(cleared, found.where, found.suspects),
        summary=found.summary if failure is None else f"{failure_text(failure)}; {found.summary}",
        outcome="failed" if failure is not None else "stalled",
        failure=failure.failure if failure is not None else None,
        status=failure.status if failure is not None else None,
        advice=found.advice,
    )
