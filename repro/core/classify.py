"""Judge a stall: which side, which hop, what kind, how sure, and what was ruled out.

`classify(evidence) -> Verdict` is pure: plain data in, plain data out, no clocks or sockets,
so it is tested on hand-built evidence and re-run offline by `repro report` on a recorded log.

What a verdict may say: every sentence of its summary and ruled-out list is made from one of
its evidence entries (hop, signal, value, time). A probe sample taken before the round stopped
progressing is history, shown as such, never the hop's state at the stall; a gauge not read
since then is "not read", never "idle"; "answers /health" needs a /health 200; "engines serve
fresh requests" needs every engine's own fresh canary to have succeeded.

How it decides, in order:
1. The driver's own health. A client whose event loop lags cannot read what arrives: a
   client-side verdict on positive evidence, before blaming anything downstream. With
   --workers, the loop that drove the round; and the parent's, which reads the hops and times
   the canaries: lagging, it cannot place the stall (side unknown, judge-overloaded).
2. Each engine's state at the stall, from several signals, never one gauge: its fresh canary
   and /health, the progress counters since the stall (token counts and the inter-token-latency
   histogram count move while tokens flow), the running/queued gauges read since the stall
   (discounted when the probe marked them stale: SGLang refreshes them only on prefill or every
   40 decode steps; vLLM can keep them non-zero after aborts). An engine whose fresh canary
   fails is never serving, whatever its last gauges said. It answers nothing at all (canary,
   /health and metrics page silent): unresponsive, a frozen or stopped process. It answers
   /health but never generates: front end lost (sglang#33858).
3. With every engine serving, the stall is in front of them. Canaries through each hop find the
   first hop that fails a fresh request; a hop whose canary and metrics page both went silent is
   frozen (it answers nothing), otherwise it withholds; the in-flight ledger (proxy held flows,
   router active requests) and the proxy's flow log for this round's own connection say whether
   the request or the response is being withheld. Every fresh path working while the round's
   reused connection stays stuck is a connection-level wedge.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from repro.core import events as ev
from repro.core.engine_state import ENGINE_KIND, EngineState, assess_engine, engine_line
from repro.core.evidence import (
    Evidence,
    Fact,
    HopEvidence,
    canary_facts,
    canary_ok,
    canary_text,
    canary_timed_out,
    fact,
    metrics_facts,
    read_hop,
    silent_page_text,
)
from repro.core.failures import failure_text, failure_verdict, producer, refused_verdict
from repro.core.harness import HARNESS, SocketReading, socket_facts
from repro.core.kinds import TLS_REASON_WORDS
from repro.core.next_actions import ADVICE, TLS_ADVICE
from repro.core.ruled_out import RuledOut
from repro.core.text import number
from repro.core.verdict import Verdict

# --- the ledger in front of the engines --------------------------------------------------------


def _flow_stage(flows: Iterable[dict[str, Any]]) -> str | None:
    """How far this round's request got through the proxy, from its flow log: the last stage seen."""
    order = ("request_seen", "held", "forwarded", "response_headers", "events_forwarded", "released", "closed")
    stage = None
    for record in flows:
        name = record.get("event")
        if name == "held":
            stage = f"held-{record.get('stage', 'request')}"
        elif name == "released":
            stage = name  # an admin release ends the hold; what follows is ordinary forwarding
        elif name in order and (stage is None or not stage.startswith("held")):
            stage = name
    return stage


def _own_sample(hop: HopEvidence, since: float) -> ev.ProbeSample | None:
    """The hop's latest readable sample since the stall, if it is the hop's own page: an engine's
    page passed through a proxy says nothing of the proxy."""
    present = read_hop(hop, since).present
    if present is None or (hop.role != "engine" and present.snapshot.is_engine_page):
        return None
    return present


def _held_by(evidence: Evidence, states: Sequence[EngineState]) -> dict[str, float]:
    """The in-flight ledger in front of the engines, from samples read since the stall: how many
    requests each hop holds that the hops behind it do not have. Walked from the engines outwards,
    and only while every engine's gauges, read since the stall, show idle (else a count in front
    may be requests the engines are busy with). Repro's own proxy reports its held flows itself."""
    held: dict[str, float] = {}
    since = evidence.stall.last_progress_t
    engines_idle = bool(states) and all(s.reading.idle for s in states)
    behind: float | None = 0.0 if engines_idle else None
    for hop in reversed([h for h in evidence.hops if h.role != "engine"]):
        present = _own_sample(hop, since)
        if present is None:
            behind = None  # a hop not read: what it holds is unknown, so is what the next one exceeds
            continue
        snapshot = present.snapshot
        if snapshot.held:
            held[hop.name] = float(snapshot.held)
        elif snapshot.in_flight is not None and behind is not None and snapshot.in_flight > behind:
            held[hop.name] = float(snapshot.in_flight) - behind
        behind = float(snapshot.in_flight) if snapshot.in_flight is not None and behind is not None else None
    return held


def _engines_cover_the_driver(evidence: Evidence, states: Sequence[EngineState]) -> tuple[str, int] | None:
    """(what the engines hold, rounds outstanding) when the engines, read since the stall, run at
    least as many requests as the driver has outstanding and tokens move: the request got through."""
    if not evidence.round_watched:
        return None  # triage has no round of its own outstanding: the engines may run anyone's requests
    outstanding = max(evidence.driver_in_flight, evidence.stall.in_flight, 1)
    present = [s for s in states if s.reading.present is not None]
    if not present or len(present) < len(states):
        return None
    running = sum(s.reading.present.snapshot.running or 0 for s in present)
    moving = any(s.status == "moving" for s in states)
    if not moving or running < outstanding:
        return None
    holding = ", ".join(f"{s.name} runs {number(s.reading.present.snapshot.running)}" for s in present)
    return holding, outstanding


def _followed_past(hop: str, sockets: SocketReading) -> str | None:
    """The hop behind `hop` where the stuck request (triage --pid's harness, run's round) stopped, followed
    through the hops' sockets (repro.core.hop_chain); None when not followed past `hop`."""
    chain = sockets.chain
    if chain is None or chain.where == hop or hop not in [step.name for step in chain.steps]:
        return None
    return chain.where


def _first_proxy_name(evidence: Evidence) -> str | None:
    return next((h.name for h in evidence.hops if h.role == "proxy"), None)

# --- TLS: a certificate our client refused, and checks turned off ------------------------------

def _tls_rejected(evidence: Evidence, failure: ev.RoundFailed | None) -> tuple[str, str, str, str] | None:
    """(side, where, confidence, summary) when our client refused a hop's certificate: the round
    itself (the driver talks to the first hop), else a canary (the outermost hop refused). Behind a
    refused handshake nothing was asked, so nothing behind it can be judged; an engine whose canary
    was refused is not "serving wrongly". Whose change fixes it: for an unknown CA, when the round
    itself was refused, the client's trust (the certificate is good for its name and dates; only
    its issuer is not trusted here); a name mismatch (the URL or the certificate) or an expired
    certificate (the certificate or this clock) may be either's, and a refusal only our canaries
    met says nothing of where a harness is stuck: unknown."""
    first = evidence.hops[0] if evidence.hops else None
    refused = [h for h in evidence.hops if h.canary is not None and h.canary.outcome.failure == "tls"]
    round_refused = failure is not None and failure.failure == "tls"
    if not round_refused and not refused:
        return None
    hop = first if round_refused else refused[0]
    canary = hop.canary.outcome if hop is not None and hop in refused else None
    where = hop.name if hop is not None else "connection"
    reason = canary.tls_reason if canary is not None else None
    side = "client" if round_refused and reason == "unknown-ca" else "unknown"
    confidence = "high" if canary is not None and (round_refused or hop is first) else "medium"
    why = f" ({TLS_REASON_WORDS[reason]})" if reason else ""
    said = (f"our client refused {where}'s certificate{why}: no request was sent"
            if canary is not None else f"this round's TLS handshake with {where} failed: no request was sent")
    if not round_refused:
        said += (f"; this is repro's own canary, which cannot see past {where}: "
                 + ("nothing behind it was judged" if hop is first else f"{where} itself was not judged"))
    return side, where, confidence, said + (f"; {TLS_ADVICE[reason]}" if reason else "")


def _tls_unverified(evidence: Evidence) -> list[Fact]:
    """An entry per https hop whose canary checked no certificate (--insecure): whatever it
    answered is not proven to come from that hop."""
    return [fact(h.name, "TLS", "certificate not verified (--insecure)", h.canary.t) for h in evidence.hops
            if h.canary is not None and h.canary.outcome.tls_verified is False]


def _front_counts(front: Sequence[HopEvidence], held_by: dict[str, float], stall: ev.RoundStalled,
                  facts: list[Fact]) -> str:
    """What the hops in front hold, as read (an idle harness's verdict): each hop's own in-flight
    count, with its evidence entry, or that it was not read."""
    said = []
    for hop in front:
        own = _own_sample(hop, stall.last_progress_t)
        if hop.name in held_by:
            said.append(f"{hop.name} holds {number(held_by[hop.name])} request(s), none of them this harness's")
        elif own is not None and own.snapshot.in_flight is not None:
            facts.append(fact(hop.name, "in flight", number(own.snapshot.in_flight), own.t))
            said.append(f"{hop.name} has {number(own.snapshot.in_flight)} in flight")
        else:
            said.append(f"{hop.name}'s counters were not read")
    return ", ".join(said) if said else "no hop stands in front of the engines"


# --- the verdict ------------------------------------------------------------------------------


def classify(evidence: Evidence) -> Verdict:
    stall = evidence.stall
    ruled_out = RuledOut()
    facts: list[Fact] = []

    failure = evidence.failure
    first_hop = evidence.hops[0].name if evidence.hops else "connection"
    sockets = socket_facts(evidence, first_hop)

    def verdict(side: str, where: str | None, kind: str, confidence: str, summary: str,
                stalled_for: float | None = None) -> Verdict:
        if failure is not None and not summary.startswith(failure_text(failure)):
            summary = f"{failure_text(failure)}; {summary}"
        # A round watched (run): its own phase and silence. Triage watched none: only what the
        # harness's sockets showed (triage --pid), else unknown.
        phase = stall.phase if evidence.round_watched else sockets.phase
        stalled = stall.stalled_for_s if evidence.round_watched else (
            stalled_for if stalled_for is not None else sockets.stalled_for_s)
        return Verdict(
            side=side, where=where, kind=kind, confidence=confidence, phase=phase, conversation=stall.conv,
            round=stall.round, stalled_for_s=None if stalled is None else round(stalled, 3),
            evidence=facts + _tls_unverified(evidence),
            ruled_out=ruled_out.lines(where),  # the hop blamed is never also ruled out
            summary=summary, outcome="failed" if failure is not None else "stalled",
            failure=failure.failure if failure is not None else None,
            status=failure.status if failure is not None else None,
        )

    lag = evidence.loop_lag_p99_ms
    # A loop that lagged less than half the trigger cannot explain a silence of the whole trigger.
    lag_limit = max(250.0, evidence.stall_after * 1000 / 2)
    if lag is not None:
        facts.append(fact("client", "event-loop lag p99", f"{lag:.0f} ms", stall.t))
        if lag >= lag_limit:
            return verdict("client", "client", "client-overloaded", "high",
                           f"the driver's own event loop lagged {lag:.0f} ms (p99): it could not read what arrived")
        ruled_out.add("client", f"event-loop lag p99 {lag:.0f} ms, below {lag_limit:.0f} ms")
    if failure is not None:
        facts.append(fact(producer(failure, evidence) or first_hop, "round failed", failure_text(failure), failure.t))
    facts.extend(sockets.facts)
    if sockets.moved:
        ruled_out.add(HARNESS, f"in use during the window ({sockets.moved})")
    if sockets.elsewhere:
        ruled_out.add(HARNESS, sockets.elsewhere)
    if sockets.unread:
        return verdict("client", "client", "client-overloaded", "high", sockets.unread)
    if (tls := _tls_rejected(evidence, failure)) is not None:
        for hop in evidence.hops:
            facts.extend(canary_facts(hop.name, hop.canary))
        side, where, confidence, said = tls
        return verdict(side, where, "tls-rejected", confidence, said)
    if failure is not None:
        # Refused for what it sent (too large, past the context, its key, model, URL or tools):
        # what the round's own answer says stands whatever state the hops are in now.
        refused = refused_verdict(evidence, failure, verdict, facts)
        if refused is not None:
            return refused
    if failure is not None and failure.failure == "client-wait":
        # The client itself held the round when its deadline passed (its queue, its own back-off):
        # whatever state the hops are in, none of them held it then.
        return verdict("client", "client", "client-queued", "high",
                       f"the round's deadline passed while the client itself held it: {failure.error[:200]}")
    # Above, what the round's own worker saw (its socket, the status it got); below, what the
    # judging process read of the hops and timed with its canaries: late if its loop lagged.
    judge_lag = evidence.judge_loop_lag_p99_ms
    if judge_lag is not None:
        facts.append(fact("client", "judging process's event-loop lag p99", f"{judge_lag:.0f} ms", stall.t))
        if judge_lag >= lag_limit:
            # Nothing says the stall is ours (the worker's loop kept up), nor where it is: every
            # canary time and sample the parent took is late by as much. Say so; do not guess.
            return verdict("unknown", None, "judge-overloaded", "low",
                           f"repro's judging process lagged {judge_lag:.0f} ms (p99) while it read the hops and "
                           f"sent the canaries: what it saw is late by as much and cannot place this stall")
        ruled_out.add("client", f"judging process's event-loop lag p99 {judge_lag:.0f} ms, below {lag_limit:.0f} ms")

    engines = [h for h in evidence.hops if h.role == "engine"]
    states = [assess_engine(h, stall, evidence.stall_after) for h in engines]
    for state in states:
        facts.extend(state.evidence)

    front = [h for h in evidence.hops if h.role != "engine"]
    faulty = [s for s in states if s.status in ENGINE_KIND]
    if faulty:
        worst = faulty[0]
        # A failed fresh canary is positive evidence of its own; without one, or without gauges
        # read since the stall, or with gauges known to go stale, the verdict is less sure.
        unsure = (worst.canary_ok is None or (worst.stale and worst.canary_ok is not False)
                  or (not worst.gauges_read and worst.status not in ("unreachable", "unresponsive"))
                  or worst.address_unproven
                  # unresponsive, but its page never answered here: a frozen process is likely, not shown
                  or (worst.status == "unresponsive" and (worst.reading.went_silent is None
                                                          or worst.reading.answered_t is None)))
        confidence = "medium" if unsure else "high"
        for state in states:
            if state is not worst:
                ruled_out.add(state.name, engine_line(state) if state.status not in ENGINE_KIND
                              else f"{state.status} too")
        for hop in front:
            facts.extend(canary_facts(hop.name, hop.canary))
            if canary_ok(hop):
                ruled_out.add(hop.name, canary_text(hop.canary))
        others = f" (also {', '.join(s.name for s in faulty[1:])})" if len(faulty) > 1 else ""
        notes = ("; " + "; ".join(worst.notes)) if worst.notes else ""
        return verdict("server", worst.name, ENGINE_KIND[worst.status], confidence, f"{worst.summary}{others}{notes}")

    for state in states:
        ruled_out.add(state.name, engine_line(state))
    # "Engines serve": said only when every engine's own fresh canary succeeded.
    engines_serve = bool(states) and all(s.canary_ok for s in states)
    engines_clause = ("engines serve fresh requests" if engines_serve
                      else "no engine hop was given" if not states
                      else "not every engine's fresh canary ran")
    if failure is not None and failure.failure == "deadline" and failure.events and failure.last_progress_t is not None:
        quiet = failure.t - failure.last_progress_t
        if quiet < evidence.stall_after:
            # Bytes were still coming: the round was long, not stuck. No hop to blame for that.
            facts.append(fact("client", "silent before the deadline", f"{quiet:.1f} s", failure.t))
            return verdict("unknown", None, "round-deadline", "low",
                           f"the round was still receiving ({quiet:.1f} s since its last event) when its deadline "
                           f"passed: nothing was stuck; it ran longer than --round-timeout ({engines_clause})")
    first = evidence.hops[0] if evidence.hops else None
    if (failure is not None and failure.failure in ("connect", "connect-timeout") and first is not None
            and first.role == "engine" and first.canary is None):
        # The round's own new connection to the engine it talks to failed, and no canary ran since
        # (a wave that ended before this round began): that attempt is the only evidence, and it
        # is a fresh connection refused by the engine, not "a fresh connection works".
        return verdict("server", first.name, "engine-unreachable", "medium",
                       f"this round's new connection to {first.name} failed and no fresh canary ran since: "
                       f"{first.name} takes no connection")
    if failure is not None and failure.failure not in (None, "timeout", "deadline"):
        judged = failure_verdict(evidence, failure, verdict, engines_serve, engines_clause, ruled_out, facts)
        if judged is not None:
            return judged

    held_by = _held_by(evidence, states)
    stage = _flow_stage(evidence.flows)
    if stage:
        facts.append(fact(_first_proxy_name(evidence) or "proxy", "this round's flow", stage, stall.t))

    # Walk from the engines outwards: the first hop in front whose fresh canary fails holds requests.
    failing = None
    failing_reading = None
    for hop in reversed(front):
        reading = read_hop(hop, stall.last_progress_t)
        facts.extend(canary_facts(hop.name, hop.canary))
        if reading.present is not None and reading.present.snapshot.is_engine_page:
            facts.append(fact(hop.name, "metrics page", f"an engine's page passed through "
                              f"({reading.present.snapshot.dialect}): not counted as {hop.name}'s own",
                              reading.present.t))
        elif hop.samples:
            facts.extend(metrics_facts(hop.name, reading, True, stall)[:1])
        if hop.name in held_by:
            facts.append(fact(hop.name, "holds requests", number(held_by[hop.name]), stall.t))
        if hop.canary is not None and not hop.canary.outcome.ok:
            failing, failing_reading = hop, reading
            break
    confidence = "high" if engines_serve else "medium"

    if failing is not None:
        for hop in front:
            if hop is not failing and canary_ok(hop):
                ruled_out.add(hop.name, canary_text(hop.canary))
        failed = f"a fresh request through {failing.name} failed ({failing.canary.outcome.error})"
        if canary_timed_out(failing.canary) and failing_reading.went_silent is not None:
            # "Stopped answering" only of a page seen answering before; one never seen answering
            # (in triage: not once in its window) leaves a wrong metrics URL possible.
            seen = failing_reading.answered_t is not None
            return verdict("client", failing.name, "hop-unresponsive", confidence if seen else "medium",
                           f"{engines_clause}, but {failing.name} answers nothing: {failed}, and its metrics page "
                           f"{silent_page_text(failing_reading)} (a frozen or stopped process, not one that withholds "
                           "on purpose)")
        outcome = failing.canary.outcome
        if outcome.failure == "http" and outcome.status is not None:
            # The hop answered, with an error status: nothing was withheld. When an engine's own
            # fresh request gets the same 4xx, the engine refuses what was sent (a path or API it
            # does not serve) and the hop passes its answer on.
            same = next((e for e in engines if e.canary is not None and e.canary.outcome.failure == "http"
                         and e.canary.outcome.status == outcome.status), None)
            if same is not None and 400 <= outcome.status < 500:
                return verdict("client", same.name, "request-rejected", "medium",
                               f"a fresh request through {failing.name} and one straight to {same.name} are both "
                               f"answered HTTP {outcome.status} ({same.canary.outcome.error}): {same.name} refuses "
                               f"what was sent and {failing.name} passes its answer on; "
                               + ADVICE["url" if outcome.status == 404 else "request"].format(hop=same.name))
            return verdict("client", failing.name, "hop-error", confidence if engines_serve else "medium",
                           f"{engines_clause}, but a fresh request through {failing.name} was answered "
                           f"HTTP {outcome.status} ({outcome.error})")
        kind = "response-withheld" if stall.phase != "before-first-byte" or stage in (
            "forwarded", "response_headers", "held-response") else "request-withheld"
        caveat = ""
        if canary_timed_out(failing.canary) and failing_reading.present is None:
            caveat = ("; its metrics were not read since the stall, so a frozen process is not ruled out"
                      if failing.samples else "; it has no metrics page, so a frozen process is not ruled out")
            confidence = "medium"
        if (deeper := _followed_past(failing.name, sockets)) is not None:
            return verdict("client", deeper, kind, confidence if sockets.chain.seen_to_the_end else "medium",
                           f"{engines_clause}, but {failed}; {sockets.waiting}: {failing.name} only waits on it")
        return verdict("client", failing.name, kind, confidence,
                       f"{engines_clause}, but {failed}: {failing.name} withholds the "
                       f"{'response' if kind == 'response-withheld' else 'request'}{caveat}")

    for hop in front:
        if canary_ok(hop):
            ruled_out.add(hop.name, canary_text(hop.canary))
    every_path = all(h.canary is not None and h.canary.outcome.ok for h in evidence.hops)

    holder = next((h for h in front if h.name in held_by), None)
    rejecting = next((s for s in states if s.status == "rejects"), None)
    if rejecting is not None and not evidence.round_watched and holder is None and not stage:
        # Triage, no round of its own: a fresh request straight to the engine is refused for what it
        # is (a 4xx: the path, the model, the key). Not a hang, and not "every fresh path answers".
        outcome = rejecting.canary.outcome
        return verdict("client", rejecting.name, "request-rejected", "medium",
                       f"a fresh request straight to {rejecting.name} is answered HTTP {outcome.status} "
                       f"({outcome.error}): {rejecting.name} refuses what was sent; "
                       + ADVICE["url" if outcome.status == 404 else "request"].format(hop=rejecting.name))
    where = holder.name if holder is not None else (_first_proxy_name(evidence) if stage else None)
    paths = "every fresh path answers" if every_path else (
        "every fresh canary that ran answered" if any(h.canary for h in evidence.hops) else "no canary ran")
    if sockets.idle is not None and every_path and not stage and (holder is None or sockets.idle.confidence == "high"):
        # triage --pid: the harness has no request outstanding on any connection while every hop
        # serves fresh requests: it waits in its own code. An idle pooled connection names no hop;
        # requests a hop holds are not this harness's when it surely has none outstanding.
        return verdict("client", HARNESS, "harness-idle", sockets.idle.confidence,
                       f"{paths} and {_front_counts(front, held_by, stall, facts)}, but {sockets.idle.text}",
                       stalled_for=sockets.idle.stalled_for_s)
    if sockets.unsure and every_path and holder is None and not stage:
        # triage --pid: an answer began and stopped on a connection the harness's event loop watches.
        # Stuck at the hop, or idle in the pool: not known, so neither the hop nor the harness is named.
        return verdict("client", "connection", "connection-wedged", "low",
                       f"{paths} and {_front_counts(front, held_by, stall, facts)}, but {sockets.unsure}: "
                       "no hop is named on that alone")
    if not any(h.canary for h in evidence.hops) and holder is None and not stage:
        # Client side is said because fresh paths work while this round is stuck; with no canary
        # read since it stopped (none ran, or it resumed before one answered) nothing says that.
        return verdict("unknown", None, "no-evidence", "low",
                       f"this round {'got no byte' if stall.phase == 'before-first-byte' else 'stopped mid-stream'} "
                       f"and no fresh canary answered since it stopped ({engines_clause}): nothing places it")
    if stall.phase == "before-first-byte" and stage not in ("response_headers", "held-response"):
        if not any(s.gauges_read or s.canary is not None for s in states) and not front:
            return verdict("unknown", None, "no-evidence", "low",
                           "no hop could be read and no canary ran: nothing to judge by")
        covered = _engines_cover_the_driver(evidence, states)
        if covered is not None and front and holder is None:
            # The engines hold at least as many requests as the driver has outstanding and move
            # tokens for them, yet this round got no byte: the hop nearest the engines withholds
            # the response (a proxy that buffers whole bodies). Its own in-flight count holding
            # the rounds confirms it; without it, other clients' requests may be what the engines run.
            buffering = front[-1]
            own = _own_sample(buffering, stall.last_progress_t)
            confirmed = own is not None and (own.snapshot.in_flight or 0) >= covered[1]
            facts.append(fact("client", "rounds outstanding", str(covered[1]), stall.t))
            if own is not None and own.snapshot.in_flight is not None:
                facts.append(fact(buffering.name, "in flight", number(own.snapshot.in_flight), own.t))
            return verdict("client", buffering.name, "response-withheld", "high" if confirmed else "medium",
                           f"{covered[0]} and move tokens, covering the driver's {covered[1]} outstanding "
                           f"round(s), yet this round received no byte: {buffering.name} withholds the "
                           "response (buffering whole bodies)"
                           + (f"; its own count shows {number(own.snapshot.in_flight)} in flight" if confirmed
                              else "; its own in-flight count was not read" if own is None
                              or own.snapshot.in_flight is None else ""))
        reused = "its reused keep-alive connection" if stall.reused else "its connection"
        if where is None and sockets.waiting_hop is not None:
            # The hop holding the request: the one the harness's connections wait on (triage --pid),
            # or the hop behind it where the request stopped, followed through the hops' sockets.
            where = sockets.waiting_hop
            reused = (f"{reused} to {sockets.waiting_on} ({sockets.waiting})" if evidence.round_watched
                      else f"its established connections to {sockets.waiting_on or where} ({sockets.waiting})")
        elif where is not None and (deeper := _followed_past(where, sockets)) is not None:
            # The ledger counts the request at `where`, which only waits on a hop behind it.
            reused, where = f"{reused} to {where} ({sockets.waiting})", deeper
        unseen = sockets.chain is not None and not sockets.chain.seen_to_the_end and where == sockets.waiting_hop
        return verdict(
            "client", where or "connection", "connection-wedged",
            confidence if (stall.reused or where) and every_path and not unseen else "medium",
            f"{paths}, but this round is stuck on {reused}"
            + (f" ({stall.local})" if stall.local else "")
            + ((f"; it went on to {where}, not seen from here" if unseen else f"; {where} holds it") if where else "")
            + ": a connection-level wedge, not the engine",
        )
    return verdict(
        "client", where or "connection", "response-withheld", confidence if every_path else "medium",
        f"{engines_clause} and {paths}, but this round's response stopped "
        + ("after its last event (the end of the body never came)" if stall.phase == "after-last-event"
           else "mid-stream")
        + (f": {where} withholds it" if where else ""),
    )
