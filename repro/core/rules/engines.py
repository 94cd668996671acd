"""Rules on the engines, from each engine's state at the stall (repro.core.engine_state): an engine
at fault, then what a failed round says while no engine is (a deadline passed on a round still
receiving; the round's own new connection to the engine refused, with no canary since)."""

from __future__ import annotations

from repro.core.engine_state import ENGINE_KIND, engine_line
from repro.core.evidence import Fact, canary_facts, canary_ok, canary_text, fact
from repro.core.rules.case import Case, Cleared, Finding


def engine_states_read(case: Case) -> list[Fact]:
    return [f for state in case.states for f in state.evidence]


def engines_cleared(case: Case) -> list[Cleared]:
    """Each engine as its state shows it (an engine at fault beside the one blamed: "hung too")."""
    return [(s.name, engine_line(s) if s.status not in ENGINE_KIND else f"{s.status} too") for s in case.states]


def front_cleared(case: Case) -> list[Cleared]:
    """Each hop in front whose own fresh canary answered."""
    return [(h.name, canary_text(h.canary)) for h in case.front if canary_ok(h)]


def engine_at_fault(case: Case) -> Finding | None:
    """Needs: each engine's state (its fresh canary and /health, progress counters and gauges read
    since the stall). Concludes the first faulty engine's kind (engine-hung, -saturated, -overloaded,
    -slow, -frontend-lost, -unresponsive, -unreachable, -error), server side. A failed fresh canary is
    positive evidence of its own; without one, without gauges read since the stall, with gauges
    known to go stale, or refused where it was never seen answering, the verdict is less sure."""
    if not case.faulty:
        return None
    worst, others = case.faulty[0], case.faulty[1:]
    unsure = (worst.canary_ok is None or (worst.stale and worst.canary_ok is not False)
              or (not worst.gauges_read and worst.status not in ("unreachable", "unresponsive"))
              or worst.address_unproven
              # unresponsive, but its page never answered here: a frozen process is likely, not shown
              or (worst.status == "unresponsive" and (worst.reading.went_silent is None
                                                      or worst.reading.answered_t is None)))
    also = f" (also {', '.join(s.name for s in others)})" if others else ""
    notes = ("; " + "; ".join(worst.notes)) if worst.notes else ""
    return Finding("server", worst.name, ENGINE_KIND[worst.status], "medium" if unsure else "high",
                   f"{worst.summary}{also}{notes}",
                   facts=tuple(f for h in case.front for f in canary_facts(h.name, h.canary)),
                   cleared=tuple(front_cleared(case)))


def deadline_while_receiving(case: Case) -> Finding | None:
    """Needs: a round failed at its deadline, with events, whose last one came less than the stall
    trigger before. Concludes round-deadline, side unknown: bytes were still coming, the round was
    long, not stuck; no hop to blame for that."""
    failure = case.failure
    if not case.failed("deadline") or not failure.events or failure.last_progress_t is None:
        return None
    quiet = failure.t - failure.last_progress_t
    if quiet >= case.evidence.stall_after:
        return None
    return Finding("unknown", None, "round-deadline", "low",
                   f"the round was still receiving ({quiet:.1f} s since its last event) when its deadline "
                   f"passed: nothing was stuck; it ran longer than --round-timeout ({case.engines_clause})",
                   facts=(fact("client", "silent before the deadline", f"{quiet:.1f} s", failure.t),))


def engine_took_no_connection(case: Case) -> Finding | None:
    """Needs: the round's own new connection to the engine it talks to (the first hop) failed, and
    no canary ran since (a wave that ended before this round began). Concludes engine-unreachable,
    medium: that attempt is the only evidence, and it is a fresh connection the engine refused."""
    first = case.first
    if not case.failed("connect", "connect-timeout") or first is None or first.role != "engine" \
            or first.canary is not None:
        return None
    return Finding("server", first.name, "engine-unreachable", "medium",
                   f"this round's new connection to {first.name} failed and no fresh canary ran since: "
                   f"{first.name} takes no connection")
