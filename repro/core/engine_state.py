"""Each engine's state at the stall, from several signals, never one gauge: its fresh canary and
/health, the progress counters since the stall, the running/queued gauges read since the stall
(discounted when the probe marked them stale: SGLang refreshes them only on prefill or every 40
decode steps; vLLM can keep them non-zero after aborts). An engine whose fresh canary fails is
never serving, whatever its last gauges said."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.evidence import (
    Fact,
    HopEvidence,
    Reading,
    canary_facts,
    canary_text,
    canary_timed_out,
    fact,
    gauge_text,
    metrics_facts,
    read_hop,
    recent_seconds_per_token,
    silent_page_text,
)
from repro.core.text import number

# --- engine state -----------------------------------------------------------------------------


@dataclass
class EngineState:
    name: str
    # idle | serving | moving | hung | saturated | slow | frontend-lost | unresponsive | unreachable | unknown
    status: str
    reading: Reading
    canary: ev.CanaryResult | None
    progress: float | None = None
    stale: bool = False
    gauges_read: bool = False  # a sample since the stall was readable
    # Refused where it was never seen answering: a wrong port fits the evidence as well as a dead engine.
    address_unproven: bool = False
    summary: str = ""  # why, for a faulty engine: every clause from `evidence`
    notes: list[str] = field(default_factory=list)
    evidence: list[Fact] = field(default_factory=list)

    @property
    def canary_ok(self) -> bool | None:
        return None if self.canary is None else self.canary.outcome.ok


def assess_engine(hop: HopEvidence, stall: ev.RoundStalled, stall_after: float) -> EngineState:
    reading = read_hop(hop, stall.last_progress_t)
    canary = hop.canary
    state = EngineState(hop.name, "unknown", reading, canary, progress=reading.progress)
    state.evidence += canary_facts(hop.name, canary)
    state.evidence += metrics_facts(hop.name, reading, bool(hop.samples), stall)
    present = reading.present.snapshot if reading.present else None
    state.gauges_read = present is not None
    state.stale = bool(present and present.stale)
    moving = reading.progress is not None and reading.progress > 0
    if canary is not None and not canary.outcome.ok:
        _canary_failed(state, hop, stall, stall_after)
    elif present is not None and moving:
        _moving(state, hop, stall_after)
    elif canary is not None:  # served a fresh request
        if reading.busy and reading.progress == 0:
            state.notes.append(
                f"gauges say {gauge_text(reading.present)}, but no token moved and a fresh request was served: "
                "the gauges are stale (SGLang refresh cadence, or vLLM gauges kept after aborted requests)")
        state.status = "idle" if reading.idle else "serving"
    elif present is not None:  # no canary: the gauges read since the stall, alone
        if reading.busy and reading.progress == 0 and not state.stale:
            state.status = "hung"
            state.summary = (f"{hop.name} holds requests ({gauge_text(reading.present)}) and no token moved "
                             "since the stall")
        elif reading.idle:
            state.status = "idle"
    return state


def _canary_failed(state: EngineState, hop: HopEvidence, stall: ev.RoundStalled, stall_after: float) -> None:
    """An engine whose fresh canary failed: never serving, whatever its last gauges said; only
    what was seen since the stall counts. How it failed comes first (refused, turned away, refused
    for what was sent, answered wrongly), then what its page and /health show."""
    outcome, reading = hop.canary.outcome, state.reading
    failed = f"a fresh request failed ({outcome.error})"
    if outcome.failure == "connect":
        state.status = "unreachable"
        state.summary = unreachable_text(hop.name, outcome, reading)
        state.address_unproven = outcome.refused and not answered_there_before(outcome, reading)
    elif outcome.failure == "http" and outcome.status in (429, 503, 529) and outcome.cause == "busy":
        # Its answer's own words: vLLM's 503 "currently busy", SGLang's "queue is full", the
        # Messages API's 529 overloaded_error. A bare 429 or 503 is saturation, inferred.
        state.status = "overloaded"
        state.summary = f"{hop.name} turns fresh requests away, saying it is overloaded: {failed}"
    elif outcome.failure == "http" and outcome.status in (429, 503, 529):
        state.status = "saturated"
        state.summary = f"{hop.name} turns fresh requests away: {failed}"
    elif rejected(outcome.status):
        state.status = "rejects"  # our request, not the engine: a key, a model name, a path
    elif outcome.failure in ("http", "reset", "stream") and not reading.busy:
        state.status = "error"
        state.summary = f"{hop.name} answers fresh requests, but wrongly: {failed}"
    elif canary_timed_out(hop.canary) and outcome.health_status is None and reading.present is None:
        state.status = "unresponsive"
        page = (f"its metrics page {silent_page_text(reading)}" if reading.went_silent is not None
                else "its metrics page was not read" if hop.samples else "it has no metrics page to read")
        state.summary = (f"{hop.name} accepts connections but answers nothing: {failed}, /health gave no "
                         f"answer, and {page} (a frozen, stopped or GIL-bound process)")
    elif reading.progress is not None and reading.progress > 0:
        present = reading.present.snapshot if reading.present else None
        queued = present is not None and (present.queued or 0) > 0
        state.status = "saturated" if queued else "frontend-lost"
        state.summary = (f"{hop.name} moves tokens ({reading.progress:.1f}/s since the stall) but "
                         + ("requests queue, and " if queued else "") + failed)
    elif reading.busy:
        _busy_and_failing(state, hop, stall, stall_after, failed)
    else:
        _frontend_lost(state, hop, failed)


def _busy_and_failing(state: EngineState, hop: HopEvidence, stall: ev.RoundStalled, stall_after: float,
                      failed: str) -> None:
    """Gauges show requests held, a fresh request failed, no token moved: slow when its last
    tokens came slower than half the stall trigger, else hung."""
    reading = state.reading
    per_token = recent_seconds_per_token(hop.samples)
    if per_token is not None and per_token >= stall_after / 2:
        state.status = "slow"
        state.evidence.append(fact(hop.name, "recent inter-token latency", f"{per_token:.2f} s per token", stall.t))
        state.summary = (f"{hop.name} holds requests ({gauge_text(reading.present)}) and its last tokens "
                         f"took {per_token:.2f} s each, slower than the stall trigger; {failed}")
        return
    state.status = "hung"
    no_token = ("no token moved since the stall" if reading.progress == 0
                else "no token movement was measured since the stall")
    state.summary = f"{hop.name} holds requests ({gauge_text(reading.present)}), {no_token}, and {failed}"


def _frontend_lost(state: EngineState, hop: HopEvidence, failed: str) -> None:
    """It answers /health or its metrics page, holds nothing, and a fresh request fails: the front
    end is lost (sglang#33858)."""
    reading, health = state.reading, hop.canary.outcome.health_status
    state.status = "frontend-lost"
    answers = []
    if health == 200:
        answers.append("answers /health (200)")
    elif health is not None:
        answers.append(f"answers /health with {health}")
    gauges = ("its gauges, read since the stall, show idle" if reading.idle
              else "its gauges were not read since the stall")
    if reading.present is not None and not answers:
        answers.append("answers its metrics page")
    state.summary = (f"{hop.name} {' and '.join(answers) or 'answers'} yet {failed}; {gauges}"
                     + (" (sglang#33858)" if health == 200 else ""))


def _moving(state: EngineState, hop: HopEvidence, stall_after: float) -> None:
    """Tokens move and its gauges were read since the stall: saturated when requests queue, slow
    when each running request gets a token less often than half the trigger, else moving. Seconds
    between two tokens of one request: the ITL histogram's own mean where it moved (it counts only
    streamed tokens), else running / progress, which a canary in the running count (one token, no
    ITL) makes look slower than it is."""
    reading, canary = state.reading, hop.canary
    present = reading.present.snapshot
    per_token = recent_seconds_per_token(hop.samples)
    per_request = per_token if per_token is not None else (
        (present.running / reading.progress) if present.running else None)
    if (present.queued or 0) > 0:
        state.status = "saturated"
        wait = canary.outcome.total_s if canary is not None else None
        state.summary = (f"{hop.name} moves tokens ({reading.progress:.1f}/s) but requests queue "
                         f"({gauge_text(reading.present)})")
        if canary is not None and wait is not None and wait < stall_after / 2:
            state.notes.append(f"a fresh request was served in {wait:.2f} s, so the queue moves")
            state.stale = True  # lowers confidence: the queue gauge may lag (SGLang refresh cadence)
    elif per_request is not None and per_request >= stall_after / 2:
        # With nothing running, a trickle of tokens is a canary or a short request, not slowness.
        state.status = "slow"
        state.summary = (f"{hop.name} moves tokens ({reading.progress:.1f}/s since the stall for "
                         f"{number(present.running)} running), {per_request:.2f} s apart per request: "
                         "slower than the stall trigger")
    else:
        state.status = "moving"


def unreachable_text(name: str, outcome: CanaryOutcome, reading: Reading) -> str:
    """What a refused or failed fresh connection showed. Refused: nothing listens at that host and
    port, which a stopped engine and a mistyped port both give; only its page answering before at
    that same address tells the one from the other."""
    if not outcome.refused:
        return f"{name} takes no fresh connection ({outcome.error})"
    address = urlsplit(outcome.url).netloc
    if answered_there_before(outcome, reading):
        return (f"nothing listens on {address} any more (connection refused), where {name}'s metrics page "
                f"answered before the stall: {name} went down")
    return f"nothing listens on {address} (connection refused): the engine {name} is down, or the port is wrong"


def answered_there_before(outcome: CanaryOutcome, reading: Reading) -> bool:
    """The hop's metrics page, at the canary's own host and port, answered before the stall."""
    before = reading.history
    return before is not None and urlsplit(before.snapshot.url).netloc == urlsplit(outcome.url).netloc


def rejected(status: int | None) -> bool:
    """A 4xx other than 429: the request is refused for what it is (key, model, path), not for load."""
    return status is not None and 400 <= status < 500 and status != 429


ENGINE_KIND = {
    "error": "engine-error",
    "hung": "engine-hung",
    "saturated": "engine-saturated",
    "overloaded": "engine-overloaded",
    "slow": "engine-slow",
    "frontend-lost": "engine-frontend-lost",
    "unresponsive": "engine-unresponsive",
    "unreachable": "engine-unreachable",
}


def engine_line(state: EngineState) -> str:
    """What rules the engine out (its ruled-out line, after its name), from the state's own evidence."""
    words = {"idle": "idle", "serving": "serves fresh requests", "moving": "moving"}
    detail = words.get(state.status, state.status)
    gauges = gauge_text(state.reading.present) if state.reading.present is not None else None
    detail += f", {gauges}" if gauges is not None else ", gauges not read since the stall"
    if state.progress is not None:
        detail += f", tokens {state.progress:.1f}/s"
    detail += f"; {canary_text(state.canary)}"
    if state.notes:
        detail += f" ({'; '.join(state.notes)})"
    return detail
