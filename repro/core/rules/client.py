"""Rules on the client's own side, tried first: the driver's event loop lagging, its receive queue
unread, a certificate our client refused, a round its own client held past its deadline, and the
judging process lagging while it read the hops. What the round's own worker saw (its socket, the
status it got) comes before what the judging process read of the hops and timed with its canaries."""

from __future__ import annotations

from repro.core.evidence import Fact, canary_facts, fact
from repro.core.failures import failure_text
from repro.core.harness import HARNESS
from repro.core.kinds import TLS_REASON_WORDS
from repro.core.next_actions import TLS_ADVICE
from repro.core.rules.case import Case, Cleared, Finding


def _lag_fact(case: Case, lag: float | None, signal: str) -> list[Fact]:
    return [] if lag is None else [case.fact("client", signal, f"{lag:.0f} ms")]


def _lag_cleared(case: Case, lag: float | None, signal: str) -> list[Cleared]:
    """A loop whose lag stayed below the limit is ruled out as the cause."""
    if lag is None or lag >= case.lag_limit:
        return []
    return [("client", f"{signal} {lag:.0f} ms, below {case.lag_limit:.0f} ms")]


DRIVER_LAG = "event-loop lag p99"
JUDGE_LAG = "judging process's event-loop lag p99"


def driver_lag_read(case: Case) -> list[Fact]:
    return _lag_fact(case, case.evidence.loop_lag_p99_ms, DRIVER_LAG)


def driver_lag_cleared(case: Case) -> list[Cleared]:
    return _lag_cleared(case, case.evidence.loop_lag_p99_ms, DRIVER_LAG)


def driver_lagged(case: Case) -> Finding | None:
    """Needs: the event-loop lag of the loop that drove the round (with --workers, its worker's).
    Concludes client-overloaded when it reached half the stall trigger (at least 250 ms): a client
    whose loop lags cannot read what arrives, positive evidence before blaming anything downstream."""
    lag = case.evidence.loop_lag_p99_ms
    if lag is None or lag < case.lag_limit:
        return None
    return Finding("client", "client", "client-overloaded", "high",
                   f"the driver's own event loop lagged {lag:.0f} ms (p99): it could not read what arrived")


def round_and_sockets_read(case: Case) -> list[Fact]:
    """How the round failed (at the hop that answered, when shown), then its own sockets or a harness's."""
    failure, found = case.failure, case.answer
    answered = found.hop.name if found is not None and found.hop is not None else case.first_hop
    facts = [] if failure is None else [fact(answered, "round failed", failure_text(failure), failure.t,
                                                  restates=True)]
    return facts + case.sockets.facts


def harness_in_use(case: Case) -> list[Cleared]:
    """The harness (triage --pid) carried bytes in the window, or waits on something outside the stack."""
    sockets = case.sockets
    return ([(HARNESS, f"in use during the window ({sockets.moved})")] if sockets.moved else []) + (
        [(HARNESS, sockets.elsewhere)] if sockets.elsewhere else [])


def driver_unread(case: Case) -> Finding | None:
    """Needs: the driver's own socket at the stall, or a harness's (triage --pid). Concludes
    client-overloaded when bytes wait unread in its receive queue: the reader is not reading."""
    unread = case.sockets.unread
    return None if not unread else Finding("client", "client", "client-overloaded", "high", unread)


def tls_refused(case: Case) -> Finding | None:
    """Needs: the round's TLS failure, or a canary our client's TLS refused. Concludes tls-rejected
    at the first hop (the round's) or the outermost hop refused: behind a refused handshake nothing
    was asked, so nothing behind it can be judged. Client side only for an unknown CA the round
    itself met (the certificate is good, its issuer not trusted here); else whose change fixes it
    (the URL, the certificate, this clock) is not shown: unknown."""
    hops = case.evidence.hops
    refused = [h for h in hops if h.canary is not None and h.canary.outcome.failure == "tls"]
    round_refused = case.failed("tls")
    if not round_refused and not refused:
        return None
    hop = case.first if round_refused else refused[0]
    canary = hop.canary.outcome if hop is not None and hop in refused else None
    where = hop.name if hop is not None else "connection"
    reason = canary.tls_reason if canary is not None else None
    side = "client" if round_refused and reason == "unknown-ca" else "unknown"
    confidence = "high" if canary is not None and (round_refused or hop is case.first) else "medium"
    why = f" ({TLS_REASON_WORDS[reason]})" if reason else ""
    said = (f"our client refused {where}'s certificate{why}: no request was sent"
            if canary is not None else f"this round's TLS handshake with {where} failed: no request was sent")
    if not round_refused:
        said += (f"; this is repro's own canary, which cannot see past {where}: "
                 + ("nothing behind it was judged" if hop is case.first else f"{where} itself was not judged"))
    facts = tuple(f for h in hops for f in canary_facts(h.name, h.canary))
    return Finding(side, where, "tls-rejected", confidence, said, facts=facts,
                   advice=TLS_ADVICE[reason] if reason else None)


def client_held(case: Case) -> Finding | None:
    """Needs: a round failed client-wait (its deadline passed while the client itself held it: its
    queue, its own back-off). Concludes client-queued: none of the hops held it then."""
    if not case.failed("client-wait"):
        return None
    return Finding("client", "client", "client-queued", "high",
                   f"the round's deadline passed while the client itself held it: {case.failure.error[:200]}")


def judge_lag_read(case: Case) -> list[Fact]:
    return _lag_fact(case, case.evidence.judge_loop_lag_p99_ms, JUDGE_LAG)


def judge_lag_cleared(case: Case) -> list[Cleared]:
    return _lag_cleared(case, case.evidence.judge_loop_lag_p99_ms, JUDGE_LAG)


def judge_lagged(case: Case) -> Finding | None:
    """Needs: the event-loop lag of the process that read the hops and timed the canaries (a
    sharded run's parent). Concludes judge-overloaded, side unknown, when it reached the limit:
    every canary time and sample it took is late by as much, so nothing places the stall."""
    lag = case.evidence.judge_loop_lag_p99_ms
    if lag is None or lag < case.lag_limit:
        return None
    return Finding("unknown", None, "judge-overloaded", "low",
                   f"repro's judging process lagged {lag:.0f} ms (p99) while it read the hops and "
                   f"sent the canaries: what it saw is late by as much and cannot place this stall")
