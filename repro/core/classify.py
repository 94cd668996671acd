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
   client-side verdict on positive evidence, before blaming anything downstream.
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
from dataclasses import dataclass, field
from typing import Any

from repro.core import events as ev
from repro.core.text import number
from repro.core.verdict import Verdict

Fact = dict[str, Any]  # {hop, signal, value, at}: one evidence entry


@dataclass(frozen=True)
class HopEvidence:
    """One hop around the stall: its probe samples over the window and a fresh canary."""

    name: str
    role: str  # proxy | router | engine
    samples: tuple[ev.ProbeSample, ...] = ()  # oldest first
    canary: ev.CanaryResult | None = None  # fresh connection straight to this hop


@dataclass(frozen=True)
class Evidence:
    stall: ev.RoundStalled  # stalled_for_s counts up to the moment the evidence was collected
    hops: tuple[HopEvidence, ...]  # ordered from the client side, the first is what the driver talks to
    stall_after: float
    driver_in_flight: int = 1
    loop_lag_p99_ms: float | None = None
    flows: tuple[dict[str, Any], ...] = ()  # the proxy flow-log records of this round's connection
    # TCP connections' kernel state: this round's own socket (driver), or a harness's (triage --pid)
    sockets: tuple[ev.SocketSample, ...] = ()
    failure: ev.RoundFailed | None = None  # set when the round failed rather than stalled


def fact(hop: str, signal: str, value: str, at: float | None) -> Fact:
    return {"hop": hop, "signal": signal, "value": value, "at": None if at is None else round(at, 3)}


# --- a hop's samples, split at the moment the round stopped progressing -----------------------

PROGRESS_COUNTERS = ("itl_count", "gen_tokens_total")


@dataclass(frozen=True)
class Reading:
    """What a hop's metrics say about the stall. `present` is the latest readable sample taken
    after the round stopped progressing; `history` the latest one from before, which describes
    the past only."""

    present: ev.ProbeSample | None
    history: ev.ProbeSample | None
    went_silent: ev.ProbeSample | None  # the last failed sample, when every sample since the stall failed
    progress: float | None  # counter movement per second since the stall; None: not measurable

    @property
    def busy(self) -> bool:
        s = self.present.snapshot if self.present else None
        return s is not None and ((s.running or 0) > 0 or (s.queued or 0) > 0)

    @property
    def idle(self) -> bool:
        """Gauges read since the stall show nothing running and nothing queued."""
        s = self.present.snapshot if self.present else None
        return s is not None and s.running == 0 and (s.queued or 0) == 0


def read_hop(hop: HopEvidence, since: float) -> Reading:
    fresh = [s for s in hop.samples if s.t > since]
    readable = [s for s in fresh if s.snapshot.ok]
    history = next((s for s in reversed(hop.samples) if s.t <= since and s.snapshot.ok), None)
    silent = fresh[-1] if fresh and not readable else None
    return Reading(readable[-1] if readable else None, history, silent, _progress(readable, history))


def _counter(sample: ev.ProbeSample) -> float | None:
    for name in PROGRESS_COUNTERS:
        value = getattr(sample.snapshot, name)
        if value is not None:
            return value
    return None


def _progress(readable: Sequence[ev.ProbeSample], before: ev.ProbeSample | None) -> float | None:
    """Counter movement per second among samples taken since the stall. With a single one, the
    sample before the stall can show that nothing moved (a counter only grows), never that
    something did: that movement may predate the stall."""
    if len(readable) >= 2:
        first, last = readable[0], readable[-1]
        a, b = _counter(first), _counter(last)
        span = last.t - first.t
        if a is None or b is None or span <= 0:
            return None
        return max(0.0, (b - a) / span)
    if len(readable) == 1 and before is not None:
        a, b = _counter(before), _counter(readable[0])
        if a is not None and b is not None and b <= a:
            return 0.0
    return None


def _recent_seconds_per_token(samples: Sequence[ev.ProbeSample]) -> float | None:
    """Mean inter-token latency over the last span in which the ITL histogram moved.

    Tells an engine that is slow per token (each step slower than the trigger, so a window can
    hold no token at all) from one that stopped: a hang keeps the last healthy mean."""
    usable = [s.snapshot for s in samples
              if s.snapshot.ok and s.snapshot.itl_count is not None and s.snapshot.itl_sum is not None]
    for newer, older in zip(reversed(usable), list(reversed(usable))[1:], strict=False):
        count = newer.itl_count - older.itl_count
        if count > 0:
            return max(0.0, (newer.itl_sum - older.itl_sum) / count)
    return None


def _gauge_text(sample: ev.ProbeSample) -> str:
    s = sample.snapshot
    return f"{number(s.running, '?')} running, {number(s.queued, '?')} queued" + (" (stale gauge)" if s.stale else "")


def metrics_facts(name: str, reading: Reading, has_page: bool, stall: ev.RoundStalled) -> list[Fact]:
    """The gauges as evidence: read since the stall, history from before, or not read."""
    facts = []
    if reading.present is not None:
        facts.append(fact(name, "running/queued", _gauge_text(reading.present), reading.present.t))
    elif reading.went_silent is not None:
        facts.append(fact(name, "metrics page", "stopped answering since the stall"
                          + (f" ({reading.went_silent.snapshot.error})" if reading.went_silent.snapshot.error else ""),
                          reading.went_silent.t))
    else:
        facts.append(fact(name, "metrics page", "not read since the stall" if has_page else "none given: not read",
                          stall.t))
    if reading.present is None and reading.history is not None:
        before = stall.last_progress_t - reading.history.t
        facts.append(fact(name, "running/queued before the stall",
                          f"{_gauge_text(reading.history)}, {before:.1f} s before it (history)", reading.history.t))
    if reading.progress is not None:
        facts.append(fact(name, "token progress since the stall", f"{reading.progress:.1f}/s",
                          reading.present.t if reading.present else stall.t))
    return facts


# --- canaries ---------------------------------------------------------------------------------


def _canary_text(canary: ev.CanaryResult | None) -> str:
    if canary is None:
        return "no canary"
    outcome = canary.outcome
    if outcome.ok:
        return f"fresh canary {outcome.status or 200} in {outcome.total_s:.2f} s"
    return f"fresh canary failed ({outcome.error or 'status ' + str(outcome.status)})"


def _health_text(canary: ev.CanaryResult) -> str:
    status = canary.outcome.health_status
    return "no answer" if status is None else str(status)


def canary_facts(name: str, canary: ev.CanaryResult | None) -> list[Fact]:
    if canary is None:
        return []
    return [fact(name, "canary", _canary_text(canary), canary.t),
            fact(name, "/health", _health_text(canary), canary.t)]


def _canary_ok(hop: HopEvidence) -> bool:
    return hop.canary is not None and hop.canary.outcome.ok


def _canary_timed_out(canary: ev.CanaryResult | None) -> bool:
    """Connected, then no answer at all within the deadline: not a status, not a reset."""
    return canary is not None and canary.outcome.failure == "timeout" and canary.outcome.status is None


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
    canary_failed = canary is not None and not canary.outcome.ok
    health = canary.outcome.health_status if canary is not None else None
    failed = f"a fresh request failed ({canary.outcome.error})" if canary_failed else ""

    if canary_failed and canary.outcome.failure == "connect":
        state.status = "unreachable"
        state.summary = f"{hop.name} takes no fresh connection ({canary.outcome.error})"
        return state
    if canary_failed and canary.outcome.failure == "http" and canary.outcome.status in (429, 503):
        state.status = "saturated"
        state.summary = f"{hop.name} turns fresh requests away: {failed}"
        return state
    if canary_failed and _rejected(canary.outcome.status):
        state.status = "rejects"  # our request, not the engine: a key, a model name, a path
        return state
    if canary_failed and canary.outcome.failure in ("http", "reset", "stream") and not reading.busy:
        state.status = "error"
        state.summary = f"{hop.name} answers fresh requests, but wrongly: {failed}"
        return state
    if canary_failed:
        # Never serving, whatever its last gauges said: only what was seen since the stall counts.
        if _canary_timed_out(canary) and health is None and present is None:
            state.status = "unresponsive"
            page = ("its metrics page stopped answering" if reading.went_silent is not None
                    else "its metrics page was not read" if hop.samples else "it has no metrics page to read")
            state.summary = (f"{hop.name} accepts connections but answers nothing: {failed}, /health gave no "
                             f"answer, and {page} (a frozen, stopped or GIL-bound process)")
            return state
        if moving:
            queued = present is not None and (present.queued or 0) > 0
            state.status = "saturated" if queued else "frontend-lost"
            state.summary = (f"{hop.name} moves tokens ({reading.progress:.1f}/s since the stall) but "
                             + ("requests queue, and " if queued else "") + failed)
            return state
        if reading.busy:
            per_token = _recent_seconds_per_token(hop.samples)
            if per_token is not None and per_token >= stall_after / 2:
                state.status = "slow"
                state.evidence.append(fact(hop.name, "recent inter-token latency", f"{per_token:.2f} s per token",
                                           stall.t))
                state.summary = (f"{hop.name} holds requests ({_gauge_text(reading.present)}) and its last tokens "
                                 f"took {per_token:.2f} s each, slower than the stall trigger; {failed}")
            else:
                state.status = "hung"
                no_token = ("no token moved since the stall" if reading.progress == 0
                            else "no token movement was measured since the stall")
                state.summary = f"{hop.name} holds requests ({_gauge_text(reading.present)}), {no_token}, and {failed}"
            return state
        state.status = "frontend-lost"
        answers = []
        if health == 200:
            answers.append("answers /health (200)")
        elif health is not None:
            answers.append(f"answers /health with {health}")
        gauges = ("its gauges, read since the stall, show idle" if reading.idle
                  else "its gauges were not read since the stall")
        if present is not None and not answers:
            answers.append("answers its metrics page")
        state.summary = (f"{hop.name} {' and '.join(answers) or 'answers'} yet {failed}; {gauges}"
                         + (" (sglang#33858)" if health == 200 else ""))
        return state
    if present is not None and moving:
        # Seconds between two tokens of one request: the ITL histogram's own mean where it moved
        # (it counts only streamed tokens), else running / progress, which a canary in the
        # running count (one token, no ITL) makes look slower than it is.
        per_token = _recent_seconds_per_token(hop.samples)
        per_request = per_token if per_token is not None else (
            (present.running / reading.progress) if present.running else None)
        if (present.queued or 0) > 0:
            state.status = "saturated"
            wait = canary.outcome.total_s if canary is not None else None
            state.summary = f"{hop.name} moves tokens ({reading.progress:.1f}/s) but requests queue ({_gauge_text(reading.present)})"
            if canary is not None and wait is not None and wait < stall_after / 2:
                state.notes.append(f"a fresh request was served in {wait:.2f} s, so the queue moves")
                state.stale = True  # lowers confidence: the queue gauge may lag (SGLang refresh cadence)
        elif per_request is not None and per_request >= stall_after / 2:
            # Each running request gets a token less often than half the trigger. (With nothing
            # running, a trickle of tokens is a canary or a short request, not slowness.)
            state.status = "slow"
            state.summary = (f"{hop.name} moves tokens ({reading.progress:.1f}/s since the stall for "
                             f"{number(present.running)} running), {per_request:.2f} s apart per request: "
                             "slower than the stall trigger")
        else:
            state.status = "moving"
        return state
    if canary is not None:  # served a fresh request
        if reading.busy and reading.progress == 0:
            state.notes.append(
                f"gauges say {_gauge_text(reading.present)}, but no token moved and a fresh request was served: "
                "the gauges are stale (SGLang refresh cadence, or vLLM gauges kept after aborted requests)")
        state.status = "idle" if reading.idle else "serving"
        return state
    # No canary: the gauges read since the stall, alone.
    if present is None:
        return state
    if reading.busy and reading.progress == 0 and not state.stale:
        state.status = "hung"
        state.summary = f"{hop.name} holds requests ({_gauge_text(reading.present)}) and no token moved since the stall"
    elif reading.idle:
        state.status = "idle"
    return state


def _rejected(status: int | None) -> bool:
    """A 4xx other than 429: the request is refused for what it is (key, model, path), not for load."""
    return status is not None and 400 <= status < 500 and status != 429


ENGINE_KIND = {
    "error": "engine-error",
    "hung": "engine-hung",
    "saturated": "engine-saturated",
    "slow": "engine-slow",
    "frontend-lost": "engine-frontend-lost",
    "unresponsive": "engine-unresponsive",
    "unreachable": "engine-unreachable",
}


def _engine_line(state: EngineState) -> str:
    """A ruled-out line, from the state's own evidence."""
    words = {"idle": "idle", "serving": "serves fresh requests", "moving": "moving"}
    detail = f"{state.name}: {words.get(state.status, state.status)}"
    if state.reading.present is not None:
        detail += f", {_gauge_text(state.reading.present)}"
    else:
        detail += ", gauges not read since the stall"
    if state.progress is not None:
        detail += f", tokens {state.progress:.1f}/s"
    detail += f"; {_canary_text(state.canary)}"
    if state.notes:
        detail += f" ({'; '.join(state.notes)})"
    return detail


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


def _first_proxy_name(evidence: Evidence) -> str | None:
    return next((h.name for h in evidence.hops if h.role == "proxy"), None)


# --- the harness's sockets and failed rounds --------------------------------------------------


@dataclass
class SocketReading:
    facts: list[Fact]
    unread: str | None = None  # why the reader is not reading, when bytes wait in its receive queue
    waiting_hop: str | None = None  # the hop a harness's connections wait on (triage --pid)
    waiting: str = ""
    waiting_sure: bool = True  # False: the connections are silent, maybe idle, not seen waiting


def _ago(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds:.1f} s"


def _waits(sock) -> bool:
    """Established, nothing queued either way, and its last bytes went out after the last ones
    came in (or none ever came): a request that was sent and acknowledged, with no answer since."""
    if sock.state != "ESTABLISHED" or sock.rqueue or sock.wqueue:
        return False
    if sock.bytes_received == 0:
        return True
    sent, received = sock.last_data_sent_s, sock.last_data_recv_s
    return sent is not None and received is not None and sent < received


def _silent(sock, at_least: float) -> bool:
    """Established, nothing queued, no byte in for a long time, its last bytes in after its last out:
    stuck mid-answer or idle between requests; the kernel cannot tell which."""
    return (sock.state == "ESTABLISHED" and not sock.rqueue and not sock.wqueue
            and sock.last_data_recv_s is not None and sock.last_data_recv_s >= at_least)


def _latest_per_socket(samples: Sequence[ev.SocketSample]) -> list[ev.SocketSample]:
    """One sample per connection, the latest: triage reads a pid's sockets more than once."""
    latest: dict[tuple, ev.SocketSample] = {}
    for sample in samples:
        sock = sample.socket
        latest[(sample.conv, sample.round, sock.pid, sock.inode, sock.local, sock.remote)] = sample
    return sorted(latest.values(), key=lambda s: s.t)


def _socket_facts(evidence: Evidence, first_hop: str) -> SocketReading:
    reading = SocketReading([])
    waiting: dict[str, list] = {}
    silent: dict[str, list] = {}
    for sample in _latest_per_socket(evidence.sockets):
        sock = sample.socket
        ours = sample.conv is not None
        hop = first_hop if ours else (sock.hop or "client")
        who = "the driver" if ours else f"pid {sock.pid}"
        reading.facts.append(fact(hop, "socket", (
            f"{who} {sock.local} -> {sock.remote} {sock.state}: last byte received {_ago(sock.last_data_recv_s)} ago, "
            f"sent {_ago(sock.last_data_sent_s)} ago; unread {number(sock.rqueue)} B, unacknowledged "
            f"{number(sock.wqueue)} B"), sample.t))
        # Unread bytes count on a connection of the stack only: a harness's database connection
        # with bytes waiting says nothing about its LLM calls.
        if sock.rqueue and reading.unread is None and (ours or sock.hop):
            reading.unread = (f"{number(sock.rqueue)} bytes wait unread in {who}'s receive queue on its connection to "
                              f"{hop} ({sock.local}): {who} is not reading what arrived")
        if not ours and sock.hop:
            if _waits(sock):
                waiting.setdefault(sock.hop, []).append(sock)
            elif _silent(sock, max(1.0, evidence.stall_after)):  # silent through the whole window watched
                silent.setdefault(sock.hop, []).append(sock)
    for group, words in ((waiting, "wait"), (silent, "are silent")):
        if not group:
            continue
        hop, socks = max(group.items(), key=lambda item: len(item[1]))
        longest = max((s.last_data_recv_s or 0.0) for s in socks)
        pids = sorted({s.pid for s in socks if s.pid is not None})
        reading.waiting_hop = hop
        reading.waiting = (f"pid {', '.join(map(str, pids)) or '?'}: {len(socks)} connection(s) {words}, no byte "
                           f"received for up to {longest:.0f} s, nothing queued either way"
                           + ("" if group is waiting else " (stuck mid-answer, or idle between requests: the kernel "
                              "cannot tell which)"))
        reading.waiting_sure = group is waiting
        break
    return reading


_FAILURE_WORDS = {
    "connect": "the connection was refused or failed",
    "connect-timeout": "no connection within the connect timeout",
    "reset": "the connection was reset",
    "early-close": "the peer closed the connection",
    "truncated": "the stream ended before its last event",
    "stream": "the stream carried an error",
    "timeout": "no byte within the read deadline",
}


def _failure_text(failure: ev.RoundFailed) -> str:
    if failure.failure == "http":
        what = f"HTTP {failure.status}"
    else:
        what = _FAILURE_WORDS.get(failure.failure or "", f"the round failed ({failure.error[:120]})")
    text = f"round failed: {what} {failure.phase} after {failure.duration_s:.1f} s"
    if failure.reused and failure.idle_s is not None:
        text += f", on a connection reused after {failure.idle_s:.1f} s idle"
    if failure.server:
        text += f" (Server: {failure.server[:40]})"
    if failure.via:
        text += f" (Via: {failure.via[:60]})"
    return text


def _producer(failure: ev.RoundFailed, evidence: Evidence) -> str | None:
    """Which hop answered a failed round's HTTP status: the hop whose own page's dialect the Server
    header names, else the innermost hop whose fresh canary got the same status."""
    if failure.failure != "http" or failure.status is None:
        return None
    server = (failure.server or "").lower()
    since = evidence.stall.last_progress_t
    if server:
        for hop in evidence.hops:
            present = read_hop(hop, since).present or read_hop(hop, since).history
            if present is not None and present.snapshot.dialect != "unknown" and present.snapshot.dialect in server:
                return hop.name
    for hop in reversed(evidence.hops):
        if hop.canary is not None and hop.canary.outcome.status == failure.status:
            return hop.name
    return None


def _failure_verdict(evidence: Evidence, failure: ev.RoundFailed, verdict, engines_serve: bool, engines_clause: str,
                     ruled_out: list[str]) -> Verdict | None:
    """A failed round whose engines are not at fault (a faulty engine was judged before). None:
    judge it as a stall."""
    hops = evidence.hops
    front = [h for h in hops if h.role != "engine"]
    first = hops[0] if hops else None
    confidence = "high" if engines_serve else "medium"
    for hop in front:
        if _canary_ok(hop):
            ruled_out.append(f"{hop.name}: {_canary_text(hop.canary)}")
    kind = failure.failure
    if kind in ("connect", "connect-timeout"):
        if first is None or first.role == "engine":
            return verdict("unknown", "connection", "connection-reset", "low",
                           f"{engines_clause}, yet this round could not connect; a fresh connection works")
        refused = first.canary is not None and first.canary.outcome.failure == "connect"
        return verdict("client", first.name, "hop-unreachable", "high" if refused else "medium",
                       f"{engines_clause}, but {first.name} took no connection"
                       + (f"; a fresh one fails too ({first.canary.outcome.error})" if refused else ""))
    if kind == "http":
        producer = _producer(failure, evidence)
        hop = next((h for h in hops if h.name == producer), None)
        if hop is None:
            hop = front[0] if front else first
        if hop is None:
            return None
        same = hop.canary is not None and hop.canary.outcome.status == failure.status
        if hop.role == "engine":
            engine_kind = "engine-saturated" if failure.status in (429, 503) else "engine-error"
            return verdict("server", hop.name, engine_kind, "high" if same else "medium",
                           f"{hop.name} answered HTTP {failure.status}"
                           + ("; a fresh request gets the same" if same else "; a fresh request is served"))
        return verdict("client", hop.name, "hop-error", confidence if (same or producer) else "medium",
                       f"{engines_clause}, but {hop.name} answered HTTP {failure.status}"
                       + ("; a fresh request through it gets the same" if same else "")
                       + ("" if producer else f" (no Server header or canary named the hop: {hop.name} is the "
                                              "first in front of the engines)"))
    if kind in ("reset", "early-close", "truncated", "stream"):
        failing = next((h for h in reversed(front) if h.canary is not None and not h.canary.outcome.ok), None)
        if failing is not None:
            return verdict("client", failing.name, "hop-error", confidence,
                           f"{engines_clause}, but a fresh request through {failing.name} fails too "
                           f"({failing.canary.outcome.error})")
        every_path = all(h.canary is not None and h.canary.outcome.ok for h in hops)
        if (kind in ("reset", "early-close") and failure.reused and failure.phase == "before-first-byte"
                and failure.idle_s is not None and failure.idle_s >= 0.5 and every_path and first is not None):
            return verdict("client", first.name, "keepalive-race", confidence,
                           f"{engines_clause} and every fresh path answers, but this round's connection was reused "
                           f"after {failure.idle_s:.1f} s idle and {first.name} closed it as the request went out: "
                           "a keep-alive race (the client kept the connection longer than the server does)")
        if kind == "stream" and len([h for h in hops if h.role == "engine"]) == 1 and not front:
            engine = next(h for h in hops if h.role == "engine")
            return verdict("server", engine.name, "engine-error", "medium",
                           f"{engine.name} sent an error inside the stream; a fresh request is served")
        where = first.name if first is not None else "connection"
        return verdict("client", where, "connection-reset", "medium" if not every_path else confidence,
                       f"{engines_clause}"
                       + (" and every fresh path answers" if every_path else "")
                       + f", but this round's connection broke ({_FAILURE_WORDS.get(kind or '', kind)})")
    return None


# --- the verdict ------------------------------------------------------------------------------


def classify(evidence: Evidence) -> Verdict:
    stall = evidence.stall
    ruled_out: list[str] = []
    facts: list[Fact] = []

    failure = evidence.failure

    def verdict(side: str, where: str | None, kind: str, confidence: str, summary: str) -> Verdict:
        if failure is not None and not summary.startswith(_failure_text(failure)):
            summary = f"{_failure_text(failure)}; {summary}"
        return Verdict(
            side=side, where=where, kind=kind, confidence=confidence, phase=stall.phase, conversation=stall.conv,
            round=stall.round, stalled_for_s=round(stall.stalled_for_s, 3), evidence=facts, ruled_out=ruled_out,
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
        ruled_out.append(f"client: event-loop lag p99 {lag:.0f} ms, below {lag_limit:.0f} ms")
    first_hop = evidence.hops[0].name if evidence.hops else "connection"
    if failure is not None:
        facts.append(fact(_producer(failure, evidence) or first_hop, "round failed", _failure_text(failure), failure.t))
    sockets = _socket_facts(evidence, first_hop)
    facts.extend(sockets.facts)
    if sockets.unread:
        return verdict("client", "client", "client-overloaded", "high", sockets.unread)
    if failure is not None and failure.failure == "http" and _rejected(failure.status):
        return verdict("client", "client", "request-rejected", "high",
                       "the request itself is refused: check the API key, the model name and the URL")

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
                  # unresponsive, but its page never answered here: a frozen process is likely, not shown
                  or (worst.status == "unresponsive" and worst.reading.went_silent is None))
        confidence = "medium" if unsure else "high"
        for state in states:
            if state is not worst:
                ruled_out.append(_engine_line(state) if state.status not in ENGINE_KIND
                                 else f"{state.name}: {state.status} too")
        for hop in front:
            facts.extend(canary_facts(hop.name, hop.canary))
            if _canary_ok(hop):
                ruled_out.append(f"{hop.name}: {_canary_text(hop.canary)}")
        others = f" (also {', '.join(s.name for s in faulty[1:])})" if len(faulty) > 1 else ""
        notes = ("; " + "; ".join(worst.notes)) if worst.notes else ""
        return verdict("server", worst.name, ENGINE_KIND[worst.status], confidence, f"{worst.summary}{others}{notes}")

    for state in states:
        ruled_out.append(_engine_line(state))
    # "Engines serve": said only when every engine's own fresh canary succeeded.
    engines_serve = bool(states) and all(s.canary_ok for s in states)
    engines_clause = ("engines serve fresh requests" if engines_serve
                      else "no engine hop was given" if not states
                      else "not every engine's fresh canary ran")
    if failure is not None and failure.failure not in (None, "timeout"):
        judged = _failure_verdict(evidence, failure, verdict, engines_serve, engines_clause, ruled_out)
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
            if hop is not failing and _canary_ok(hop):
                ruled_out.append(f"{hop.name}: {_canary_text(hop.canary)}")
        failed = f"a fresh request through {failing.name} failed ({failing.canary.outcome.error})"
        if _canary_timed_out(failing.canary) and failing_reading.went_silent is not None:
            return verdict("client", failing.name, "hop-unresponsive", confidence,
                           f"{engines_clause}, but {failing.name} answers nothing: {failed}, and its metrics page "
                           "stopped answering since the stall (a frozen or stopped process, not one that withholds "
                           "on purpose)")
        kind = "response-withheld" if stall.phase != "before-first-byte" or stage in (
            "forwarded", "response_headers", "held-response") else "request-withheld"
        caveat = ""
        if _canary_timed_out(failing.canary) and failing_reading.present is None:
            caveat = ("; its metrics were not read since the stall, so a frozen process is not ruled out"
                      if failing.samples else "; it has no metrics page, so a frozen process is not ruled out")
            confidence = "medium"
        return verdict("client", failing.name, kind, confidence,
                       f"{engines_clause}, but {failed}: {failing.name} withholds the "
                       f"{'response' if kind == 'response-withheld' else 'request'}{caveat}")

    for hop in front:
        if _canary_ok(hop):
            ruled_out.append(f"{hop.name}: {_canary_text(hop.canary)}")
    every_path = all(h.canary is not None and h.canary.outcome.ok for h in evidence.hops)

    holder = next((h for h in front if h.name in held_by), None)
    where = holder.name if holder is not None else (_first_proxy_name(evidence) if stage else None)
    paths = "every fresh path answers" if every_path else (
        "every fresh canary that ran answered" if any(h.canary for h in evidence.hops) else "no canary ran")
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
            where = sockets.waiting_hop  # the harness's connections that wait on it (triage --pid)
            reused = f"its established connections to {where} ({sockets.waiting})"
        return verdict(
            "client", where or "connection", "connection-wedged",
            confidence if (stall.reused or where) and every_path and sockets.waiting_sure else "medium",
            f"{paths}, but this round is stuck on {reused}"
            + (f" ({stall.local})" if stall.local else "")
            + (f"; {where} holds it" if where else "")
            + ": a connection-level wedge, not the engine",
        )
    return verdict(
        "client", where or "connection", "response-withheld", confidence if every_path else "medium",
        f"{engines_clause} and {paths}, but this round's response stopped "
        + ("after its last event (the end of the body never came)" if stall.phase == "after-last-event"
           else "mid-stream")
        + (f": {where} withholds it" if where else ""),
    )
