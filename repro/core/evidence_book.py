"""The evidence book: what a run has seen of each hop, kept bounded, turned into `Evidence`.

The live judge and `repro report` both feed it events (live as they happen, offline from the
log) and ask it for the evidence of one stall, so a recorded run is re-judged with exactly the
code that judged it live.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable
from typing import Any

import msgspec

from repro.core import events as ev
from repro.core.client_timeouts import POLICIES, would_be
from repro.core.evidence import Evidence, Fact, HopEvidence, fact
from repro.core.hop import Hop
from repro.core.verdict import Verdict

MAX_SAMPLES_PER_HOP = 2000
MAX_FLOWS_PER_CONNECTION = 64
MAX_CONNECTIONS_TRACKED = 4096
MAX_SOCKET_SAMPLES = 4096
MAX_CONVERSATIONS_PLACED = 65536
ROUNDS_KEPT = 3
CANARIES_PER_HOP = 16  # a stall's canary is among a hop's last ones


def _put_bounded(table: dict, key: Any, value: Any) -> None:
    """Insert, dropping the oldest entry past MAX_CONVERSATIONS_PLACED: a run of any length stays bounded."""
    if key not in table and len(table) >= MAX_CONVERSATIONS_PLACED:
        table.pop(next(iter(table)))
    table[key] = value


class EvidenceBook:
    def __init__(self, hops: Iterable[Hop], *, stall_after: float, api: str | None = None,
                 samples_kept_s: float | None = None) -> None:
        self.hops = list(hops)
        self.stall_after = stall_after
        # Probe samples older than this (seconds before the newest) are dropped as well: a stall's
        # evidence reads none from before its round began (less stall_after), so a watch, whose
        # rounds end within --round-timeout, keeps that much, not MAX_SAMPLES_PER_HOP at any pace.
        # None (a run, read again by `repro report`): the count cap only.
        self.samples_kept_s = samples_kept_s
        # The wire API whose canaries this book keeps (a watch canaries several: each its own
        # book, so a messages canary's 404 is never read as the chat path failing); None: any.
        self.api = api
        self.samples: dict[str, deque[ev.ProbeSample]] = {h.name: deque(maxlen=MAX_SAMPLES_PER_HOP) for h in self.hops}
        self.canaries: dict[str, list[ev.CanaryResult]] = {h.name: [] for h in self.hops}
        # (t, p99 ms, worker): with --workers each worker's loop reports its own lag.
        self.loop_lag: deque[tuple[float, float, int | None]] = deque(maxlen=4096)
        self.worker_of: dict[int, int] = {}  # conversation -> the worker that drives it (from RoundStarted)
        self.judge_lag: deque[tuple[float, float]] = deque(maxlen=4096)  # a sharded run's parent: (t, p99 ms)
        # (conv, round) -> (when it got its connection, reused): a proxy's records of that connection
        # from before then belong to whoever used it before (a shared pool hands connections around).
        self.connected: dict[tuple[int, int], tuple[float, bool]] = {}
        self.sockets: deque[ev.SocketSample] = deque(maxlen=MAX_SOCKET_SAMPLES)
        self.flows: dict[str, deque[dict[str, Any]]] = {}
        # The run's client and timeout mode (from RunStarted): with --client-timeouts native, each
        # stall's verdict says what that client would have done under its library's own timeouts.
        self.client: str | None = None
        self.client_timeouts: str | None = None
        # conversation -> its last ROUNDS_KEPT round starts, and its last round answered in full
        self.sent: dict[int, tuple[ev.RoundStarted, ...]] = {}
        self.answered: dict[int, int] = {}
        # A flagged round that gets a byte again while it is judged is no longer stuck from that
        # moment: what is read after it (a canary answered once a fault lifted) is about a stack
        # that moved on, and would say "a fresh path works while this round is stuck" of a round
        # that was not. (conv, round) -> when flagged; then -> when it first progressed again.
        self.flagged: dict[tuple[int, int], float] = {}
        self.resumed: dict[tuple[int, int], float] = {}
        # hop -> when its metrics page last answered, for the book's whole life (one entry a hop:
        # bounded, and never forgotten with conversations): a watch's later verdicts of one
        # incident judge stalls whose window starts after the page froze, and it was still seen
        # answering. Two times, the last and the one before it: a report re-judging a stall reads
        # the book after later samples came in, and takes the newest one not after the stall.
        self.page_answered: dict[str, tuple[float, ...]] = {}
        self.wall_at_zero: float | None = None  # the wall clock at t=0 (from RunStarted): when, in words

    def add(self, event: ev.Event) -> None:
        if isinstance(event, ev.RunStarted):
            self.wall_at_zero = event.wall_clock_origin - event.t
            self.client = event.config.get("client", "aiohttp")
            self.client_timeouts = event.config.get("client_timeouts")
        elif isinstance(event, ev.ProbeSample):
            if event.hop in self.samples:
                kept = self.samples[event.hop]
                kept.append(event)
                if self.samples_kept_s is not None:
                    while kept[0].t < event.t - self.samples_kept_s:
                        kept.popleft()
                if event.snapshot.ok:
                    self.page_answered[event.hop] = (*self.page_answered.get(event.hop, ())[-1:], event.t)
        elif isinstance(event, ev.CanaryResult):
            # The book's own hops only: a watch feeds every book every event, and hops renamed by
            # discovery would otherwise leave a list each behind, for ever.
            history = self.canaries.get(event.hop)
            if history is not None and (self.api is None or event.outcome.api == self.api):
                history.append(event)
                del history[:-CANARIES_PER_HOP]
        elif isinstance(event, ev.LoopLag):
            if event.judge:
                self.judge_lag.append((event.t, event.p99_ms))
            else:
                self.loop_lag.append((event.t, event.p99_ms, event.worker))
        elif isinstance(event, ev.RoundConnected):
            _put_bounded(self.connected, (event.conv, event.round), (event.t, event.reused))
        elif isinstance(event, (ev.SSEReceived, ev.FirstByte)):
            key = (event.conv, event.round)
            if self.flagged.pop(key, None) is not None:
                _put_bounded(self.resumed, key, event.t)
        elif isinstance(event, ev.RoundStalled):
            key = (event.conv, event.round)
            self.resumed.pop(key, None)
            _put_bounded(self.flagged, key, event.t)
        elif isinstance(event, ev.VerdictReached):
            self.resumed.pop((event.verdict.conversation, event.verdict.round), None)
        elif isinstance(event, ev.RoundFailed):
            self.flagged.pop((event.conv, event.round), None)
        elif isinstance(event, (ev.RoundDone, ev.RoundAbandoned)):
            self.flagged.pop((event.conv, event.round), None)
            self.connected.pop((event.conv, event.round), None)
            if isinstance(event, ev.RoundDone):
                _put_bounded(self.answered, event.conv, event.round)
        elif isinstance(event, ev.RoundStarted):
            _put_bounded(self.sent, event.conv, (*self.sent.get(event.conv, ())[1 - ROUNDS_KEPT:], event))
            if event.worker is not None and self.worker_of.get(event.conv) != event.worker:
                _put_bounded(self.worker_of, event.conv, event.worker)
        elif isinstance(event, ev.SocketSample):
            self.sockets.append(event)
        elif isinstance(event, ev.ProxyFlow):
            client = event.data.get("client")
            if not client:
                return
            if event.data.get("event") == "closed":
                # A finished exchange can no longer be the one a stall waits on: forget it, so what
                # the book keeps is bounded by the flows open now, not by every connection ever made.
                records = self.flows.get(client)
                if records is not None:
                    flow = event.data.get("flow")
                    kept = [r for r in records if r.get("flow") != flow]
                    if kept:
                        self.flows[client] = deque(kept, maxlen=MAX_FLOWS_PER_CONNECTION)
                    else:
                        del self.flows[client]
                return
            if client not in self.flows and len(self.flows) >= MAX_CONNECTIONS_TRACKED:
                self.flows.pop(next(iter(self.flows)))
            self.flows.setdefault(client, deque(maxlen=MAX_FLOWS_PER_CONNECTION)).append({**event.data, "t": event.t})

    def forget(self, conversations: Iterable[int]) -> None:
        """Drop what the book keeps per conversation for conversations that ended and were judged
        (`repro watch` starts new ones for ever: their bound would be reached, and kept, otherwise)."""
        conversations = set(conversations)
        for conv in conversations:
            self.sent.pop(conv, None)
            self.answered.pop(conv, None)
            self.worker_of.pop(conv, None)
        for table in (self.connected, self.flagged, self.resumed):
            for key in [key for key in table if key[0] in conversations]:
                del table[key]

    def evidence_for_failure(self, failure: ev.RoundFailed, *, until: float, driver_in_flight: int = 1,
                             canaries_since: float | None = None) -> Evidence:
        """Evidence for a failed round: gathered as for a stall that began when the round last
        progressed and ended when it failed, with the failure itself attached."""
        started = failure.t - failure.duration_s
        last_progress = failure.last_progress_t if failure.last_progress_t is not None else started
        as_stall = ev.RoundStalled(t=failure.t, conv=failure.conv, round=failure.round, phase=failure.phase,
                                   stalled_for_s=round(failure.t - last_progress, 3), started_t=started,
                                   last_progress_t=last_progress, local=failure.local, reused=failure.reused,
                                   events=failure.events, in_flight=driver_in_flight)
        evidence = self.evidence_for(as_stall, until=until, driver_in_flight=driver_in_flight,
                                     canaries_since=last_progress if canaries_since is None else canaries_since)
        sent = tuple(s for s in self.sent.get(failure.conv, ()) if s.round <= failure.round)
        return dataclasses.replace(evidence, failure=failure, sent=sent, last_answered=self.answered.get(failure.conv))

    def evidence_for(self, stall: ev.RoundStalled, *, until: float, driver_in_flight: int = 1,
                     canaries_since: float | None = None) -> Evidence:
        """Evidence for one stall: samples from a little before the round began up to `until`
        (the moment the judge finished collecting), the canaries sent for this stall, the
        driver's loop lag while the round was silent, and the proxy's record of its connection.
        A round that progressed again after it was flagged is judged on what was read until then."""
        resumed = self.resumed.get((stall.conv, stall.round))
        if resumed is not None and resumed >= stall.t:
            until = min(until, resumed)
        since = stall.started_t - self.stall_after
        hops = []
        for hop in self.hops:
            window = tuple(s for s in self.samples.get(hop.name, ()) if since <= s.t <= until)
            # Canaries sent for this stall: after it was flagged, or by a wave begun while it was suspect.
            first = stall.t if canaries_since is None else canaries_since
            canary = next((c for c in reversed(self.canaries.get(hop.name, [])) if first <= c.t <= until), None)
            answered = [t for t in self.page_answered.get(hop.name, ()) if t <= until]
            hops.append(HopEvidence(hop.name, hop.role, window, canary, page_answered_t=max(answered, default=None),
                                    wall_at_zero=self.wall_at_zero))
        # The lag of the loop that drives this round: another worker's loop lagging says nothing of
        # it (pooling them would blame the client for an engine's hang). A log from before workers
        # were named, or a conversation not placed, takes every loop's.
        worker = self.worker_of.get(stall.conv)
        lags = [p99 for t, p99, lagged in self.loop_lag if stall.last_progress_t <= t <= until
                and (worker is None or lagged is None or lagged == worker)]
        judge_lags = [p99 for t, p99 in self.judge_lag if stall.last_progress_t <= t <= until]
        flows: tuple[dict[str, Any], ...] = ()
        if stall.local and stall.local in self.flows:
            since = stall.started_t - 0.5
            connected = self.connected.get((stall.conv, stall.round))
            if connected is not None and connected[1]:
                # A reused connection's records from before this round had it are another round's
                # (a shared pool hands connections around); 0.1 s for our own stamp's lateness.
                since = max(since, connected[0] - 0.1)
            flows = tuple(f for f in self.flows[stall.local] if since <= f["t"] <= until)
        # This round's own socket (read by the driver at the stall), or a harness's connections read
        # from outside (no round of ours: triage --pid), taken since the round stopped progressing.
        sockets = tuple(s for s in self.sockets if stall.last_progress_t <= s.t <= until
                        and ((s.conv, s.round) == (stall.conv, stall.round) or s.conv is None))
        return Evidence(
            stall=msgspec.structs.replace(stall, stalled_for_s=max(stall.stalled_for_s, until - stall.last_progress_t)),
            hops=tuple(hops),
            stall_after=self.stall_after,
            driver_in_flight=driver_in_flight,
            loop_lag_p99_ms=max(lags) if lags else None,
            judge_loop_lag_p99_ms=max(judge_lags) if judge_lags else None,
            flows=flows,
            sockets=sockets,
        )

    def client_fate(self, stall: ev.RoundStalled) -> Fact | None:
        """With --client-timeouts native: what the run's client would have done with this stall,
        from the timeline observed up to its flagging, as an evidence entry (hop "client"). None
        in repro's own timeout mode, or for a client whose policy was not checked."""
        policy = POLICIES.get(self.client or "")
        if self.client_timeouts != "native" or policy is None:
            return None
        fate = would_be(policy, started_t=stall.started_t, headers=stall.phase != "before-first-byte",
                        last_byte_t=stall.last_byte_t, trickle_every_s=stall.trickle_every_s, observed_until=stall.t)
        # Stamped when it was worked out (the stall), like every entry: the time the client would
        # give up, in the future of what was observed, is in the sentence, not in `at`.
        return fact("client", "native timeout", fate.text, stall.t)


def with_client_fate(verdict: Verdict, entry: Fact | None) -> Verdict:
    """The verdict, plus what the harness's own client would have done (--client-timeouts native):
    its evidence entry and the sentence made from it."""
    if entry is None:
        return verdict
    said = verdict.summary.removesuffix(".") + "."  # one full stop, whether the summary had one
    return msgspec.structs.replace(verdict, evidence=[*verdict.evidence, entry],
                                   summary=f"{said} Client: {entry['value']}.")
