"""What `repro watch` knows at any moment, and its metric contract: one model that the Prometheus
exposition, the alert rules, the status page and `/status.json` all read, so none of them can
disagree with another about a name or a state.

Pure: no clock (times are given), no I/O. The watch session feeds it events; readers take
`to_dict()` (the status page, /status.json) or iterate it (the exposition).

An incident is the condition behind a verdict (side, where, kind). It opens with the verdict and
lasts while multi-round conversations still cannot complete: it clears only when a canary
conversation that started after the incident's last verdict completes every one of its rounds.
A round that completes on its own proves nothing about the round after it (a proxy that wedges
reused connections lets the first rounds through), so "a round succeeded" never clears one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

# Where `repro watch` serves /metrics and its page unless told: 9464, the port OpenTelemetry's
# Prometheus exporter uses. Here, not beside the server: building the CLI's parser reads it, and
# must not import the server's aiohttp (a process dropped to another user could not).
DEFAULT_LISTEN = "127.0.0.1:9464"

# --- the metric contract (docs/watch.md#metrics documents it; tests hold the rules, the
# dashboard and the exposition to it) ---------------------------------------------------------
# name -> (type, help, labels). Names follow Prometheus conventions: units in the name, `_total`
# on counters, `_info` on a series that carries text as labels with the value 1.
METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "repro_watch_rounds_total": ("counter", "Canary rounds ended, by outcome (completed, failed, stalled).",
                                 ("outcome",)),
    "repro_watch_verdicts_total": ("counter", "Verdicts reached on canary rounds.", ("side", "where", "kind")),
    "repro_watch_incident": ("gauge", "1 while the condition behind a verdict lasts, 0 once it cleared.",
                             ("side", "where", "kind")),
    "repro_watch_incident_info": ("gauge", "The open incident's verdict sentence and next action (value 1).",
                                  ("side", "where", "kind", "summary", "next_action", "segment")),
    "repro_watch_hop_up": ("gauge", "1 when the hop itself answers, else 0: its last fresh-connection canary "
                           "answered; or that canary failed the same way as the canary of a hop behind it (toward "
                           "the engine) and the hop answered on its own (its metrics page, or /health with any "
                           "status); for a hop read by its metrics only (no canary), its last metrics scrape.",
                           ("hop",)),
    "repro_watch_hop_engine": ("gauge", "1 for a hop in front of an engine on the canaries' path, naming that "
                               "engine (the last canaried hop behind it): ReproWatchHopDown carries it as `engine`, "
                               "so Alertmanager holds back the hop's ticket while that engine's incident pages.",
                               ("hop", "engine")),
    "repro_watch_hop_canary_seconds": ("histogram", "Fresh-connection canary time to an answer, per hop.", ("hop",)),
    "repro_watch_hop_in_flight": ("gauge", "Requests in flight at the hop as last read from its metrics "
                                  "(absent when the hop exposes none).", ("hop",)),
    "repro_watch_hop_sample_age_seconds": ("gauge", "Seconds since the hop's metrics were last read.", ("hop",)),
    "repro_watch_loop_lag_seconds": ("gauge", "The watcher's own event-loop lag, worst over the last second.", ()),
    "repro_watch_last_round_timestamp_seconds": ("gauge", "Wall-clock time the last canary round ended.", ()),
    "repro_watch_hops": ("gauge", "Hops being watched.", ()),
    "repro_watch_hop_changes_total": ("counter", "Hops added to or removed from the watched set.", ("change",)),
}

INCIDENT_KEY = ("side", "where", "kind")
# Upper bounds (seconds) of repro_watch_hop_canary_seconds' buckets: a healthy hop answers a
# one-token canary in milliseconds; the top buckets reach the canary deadlines people set.
CANARY_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
HOP_HISTORY_S = 3600.0  # the status page shows each hop over the last hour
# A hop read by its metrics only is checked at every scrape (2 s by default): its history keeps a
# point per this many seconds, and every change of state, so an hour of it stays about as long
# as a canaried hop's (a canary every 15 s by default).
SCRAPE_POINT_EVERY_S = 15.0
RECENT_VERDICTS = 20
# Caps on what a watch keeps for ever otherwise (docs/watch.md): cleared incidents (each distinct
# side, where and kind, with hops renamed by discovery, is a new one), kept newest-cleared last.
CLEARED_INCIDENTS_KEPT = 50
# repro_watch_verdicts_total's label sets: the most recently counted kept (a counter series that
# goes away is read by rate() as ended, never as a reset).
VERDICT_SERIES_KEPT = 256
# A hop's history points over HOP_HISTORY_S, whatever the canary cadence (one a second at most).
HOP_POINTS_KEPT = 3600
# Open incidents: hops x kinds while the hops stay, but discovery may rename hops for ever while
# nothing completes (no conversation clears them then). Past the cap the open incident whose last
# verdict is oldest is forgotten (its series leaves /metrics: an alert on it resolves as stale).
OPEN_INCIDENTS_KEPT = 256
# Hops watched at once, given and discovered (each costs ~2 MiB, docs/watch-memory.md): a fleet
# larger than this is watched by several watches, each with a --selector of its own part.
HOPS_WATCHED_MAX = 64


@dataclass
class HopPoint:
    t: float  # wall clock
    up: bool | None  # None: nothing read at that time
    canary_s: float | None = None
    in_flight: float | None = None


@dataclass
class HopState:
    name: str
    url: str
    role: str | None = None
    # Where `up` comes from: True, the hop's fresh-connection canaries (its scrapes say nothing of
    # whether it answers requests); False, a hop read by its metrics only, its scrapes.
    takes_canary: bool = True
    up: bool | None = None  # None: not checked yet (a canaried hop's: WatchStatus.settle_up derives it)
    reason: str | None = None  # why it is down, as the canary or scrape said
    # A canaried hop's own last check, which `up` is derived from (WatchStatus.settle_up): whether
    # its canary answered, how it failed, whether /health gave any status, whether its metrics
    # page answered its last read (None: it has none, or not read yet).
    canary_ok: bool | None = None
    canary_failure: str | None = None
    health_answered: bool = False
    page_answered: bool | None = None
    # Up though its canary failed: the hop behind it whose own canary failed the same way.
    explained_by: str | None = None
    _canary_point: HopPoint | None = field(default=None, repr=False)
    canary_s: float | None = None
    in_flight: float | None = None  # None: not read (never "idle")
    sampled_at: float | None = None  # wall clock of the last metrics read
    history: deque[HopPoint] = field(default_factory=lambda: deque(maxlen=HOP_POINTS_KEPT))
    # The canary histogram (answered canaries only): per bucket of CANARY_BUCKETS, not cumulative.
    canary_buckets: list[int] = field(default_factory=lambda: [0] * len(CANARY_BUCKETS))
    canary_count: int = 0
    canary_sum: float = 0.0

    def record(self, point: HopPoint) -> None:
        self.history.append(point)
        while self.history and self.history[0].t < point.t - HOP_HISTORY_S:
            self.history.popleft()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "role": self.role, "takes_canary": self.takes_canary, "up": self.up,
                "reason": self.reason, "explained_by": self.explained_by,
                "canary_s": self.canary_s, "in_flight": self.in_flight, "sampled_at": self.sampled_at,
                "history": [vars(p) for p in self.history]}

    def canary(self, *, answered: bool, seconds: float | None, reason: str | None, at: float,
               failure: str | None = None, health_answered: bool = False) -> None:
        """A fresh-connection canary's answer. Up while its last canary answered; a failed one
        may still leave it up, which WatchStatus.settle_up decides (it knows the hops behind)."""
        self.up, self.reason = answered, None if answered else reason
        self.canary_ok, self.canary_failure, self.health_answered = answered, failure, health_answered
        self.explained_by = None
        self.canary_s = seconds if answered else None
        if answered and seconds is not None:
            self.canary_count += 1
            self.canary_sum += seconds
            slot = next((i for i, bound in enumerate(CANARY_BUCKETS) if seconds <= bound), None)
            if slot is not None:  # above the top bound: counted in +Inf only (canary_count)
                self.canary_buckets[slot] += 1
        self._canary_point = HopPoint(t=at, up=answered, canary_s=self.canary_s, in_flight=self.in_flight)
        self.record(self._canary_point)

    def sampled(self, *, in_flight: float | None, at: float, answered: bool | None = None,
                reason: str | None = None) -> None:
        """The hop's metrics were read (in_flight None: the page has no such gauge, or did not answer).
        For a hop with no canary, the scrape is its check: `answered` sets it up or down."""
        self.in_flight, self.sampled_at = in_flight, at
        if self.takes_canary or answered is None:
            if answered is not None:
                self.page_answered = answered
            return
        changed = answered != self.up
        self.up, self.reason = answered, None if answered else reason
        if changed or not self.history or at - self.history[-1].t >= SCRAPE_POINT_EVERY_S:
            self.record(HopPoint(t=at, up=answered, in_flight=in_flight))


@dataclass
class Incident:
    side: str
    where: str | None
    kind: str
    summary: str
    next_action: str
    opened_at: float  # wall clock of its first verdict
    last_verdict_at: float
    segment: str | None = None  # the run-log segment holding its last verdict
    verdicts: int = 1
    cleared_at: float | None = None
    # Opened by a wire API's fresh canaries (watch --api chat,messages), not by a round: it clears
    # when that API's canaries answer again (api_answered), not when a conversation completes.
    api: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.side, self.where or "", self.kind)

    @property
    def open(self) -> bool:
        return self.cleared_at is None

    def to_dict(self) -> dict[str, Any]:
        return {**vars(self), "where": self.where, "open": self.open}


@dataclass
class WatchStatus:
    started_at: float
    listen: str = ""
    cost: dict[str, float] = field(default_factory=dict)  # requests_per_min, tokens_per_min
    hops: dict[str, HopState] = field(default_factory=dict)
    incidents: dict[tuple[str, str, str], Incident] = field(default_factory=dict)
    verdicts: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=RECENT_VERDICTS))
    rounds: dict[str, int] = field(default_factory=dict)  # outcome -> count
    last_round_at: float | None = None
    loop_lag_s: float = 0.0
    hop_changes: dict[str, int] = field(default_factory=dict)  # "added" | "removed" -> count
    # (side, where, kind) -> verdicts ever reached (a counter: an incident's own count restarts with it)
    verdict_counts: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # hop -> the canaried hops behind it on the canaries' path (toward the engine): a canary
    # through the hop goes on to one of them.
    behind: dict[str, tuple[str, ...]] = field(default_factory=dict)

    # --- hops up or down ----------------------------------------------------------------------

    def settle_up(self) -> None:
        """Each canaried hop's `up` from its own last check and those of the hops behind it.

        Up: its last canary answered; or it failed the same way (the same failure kind) as the
        last canary of a hop behind it, and the hop answered on its own: its metrics page answered
        its last read, or its canary's /health got an HTTP status (any: the process answers).
        Then the failure is the hop behind's, carried through: an engine hung behind nginx does
        not make nginx down. A refused connection or a failed TLS handshake is the hop's own
        socket, never carried. A TCP accept alone shows nothing: the kernel accepts for a frozen
        (SIGSTOPped) process. The canary's history point is amended with what was derived."""
        for state in self.hops.values():
            if not state.takes_canary or state.canary_ok is None:
                continue
            carried = None
            if not state.canary_ok and state.canary_failure not in (None, "connect", "tls") and (
                    state.page_answered or state.health_answered):
                carried = next((name for name in self.behind.get(state.name, ())
                                if (b := self.hops.get(name)) is not None and b.canary_ok is False
                                and b.canary_failure == state.canary_failure), None)
            up = state.canary_ok or carried is not None
            state.explained_by = carried
            if up != state.up:
                state.up = up
                if state._canary_point is not None:
                    state._canary_point.up = up

    # --- incidents ----------------------------------------------------------------------------

    def verdict(self, verdict: dict[str, Any], *, at: float, segment: str | None = None,
                api: str | None = None) -> Incident:
        """A verdict (Verdict.to_dict()) opens its incident, or renews the open one. `api`: the
        verdict is on that wire API's fresh canaries (the incident then clears by api_answered)."""
        self.verdicts.append({**verdict, "at": at, "segment": segment})
        key = (verdict["side"], verdict.get("where") or "", verdict["kind"])
        self.verdict_counts[key] = self.verdict_counts.pop(key, 0) + 1  # moved last: the most recent
        while len(self.verdict_counts) > VERDICT_SERIES_KEPT:
            del self.verdict_counts[next(iter(self.verdict_counts))]
        action = (verdict.get("next_action") or {}).get("do", "")
        incident = self.incidents.get(key)
        if incident is None or not incident.open:
            incident = Incident(side=key[0], where=verdict.get("where"), kind=key[2], summary=verdict["summary"],
                                next_action=action, opened_at=at, last_verdict_at=at, segment=segment, verdicts=0)
            self.incidents[key] = incident
        incident.verdicts += 1
        incident.last_verdict_at = at
        incident.summary, incident.next_action, incident.segment = verdict["summary"], action, segment
        incident.api = api
        self._forget_open()
        return incident

    def _forget_open(self) -> None:
        """At most OPEN_INCIDENTS_KEPT open incidents, the one whose last verdict is oldest forgotten first."""
        if len(self.incidents) <= OPEN_INCIDENTS_KEPT:  # the cheap test first: this runs at every verdict
            return
        opened = self.open_incidents()
        if len(opened) > OPEN_INCIDENTS_KEPT:
            opened.sort(key=lambda i: i.last_verdict_at)
            for incident in opened[:len(opened) - OPEN_INCIDENTS_KEPT]:
                del self.incidents[incident.key]

    def conversation_completed(self, *, started_at: float, at: float,
                               path: Collection[str] | None = None) -> list[Incident]:
        """A canary conversation that started at `started_at` completed all its rounds at `at`:
        every open incident whose last verdict came before that start clears. Returns them.

        `path`: the hops the conversation went through (None: every hop). A conversation to one
        engine proves nothing about another (a watch of discovered engines talks to each
        directly), so an incident at a watched hop off its path stays open; one at no watched hop
        ("client", "connection", none, or a hop no longer watched) clears."""
        cleared = []
        for incident in self.incidents.values():
            off_path = path is not None and incident.where in self.hops and incident.where not in path
            # A conversation speaks the first API only: it proves nothing of another API's path.
            if incident.open and incident.api is None and incident.last_verdict_at < started_at and not off_path:
                incident.cleared_at = at
                cleared.append(incident)
        self._forget_cleared()
        return cleared

    def api_wave_judged(self, api: str, *, since: float, at: float, path: Collection[str]) -> list[Incident]:
        """The fresh canaries of `api` of a wave begun at `since` to the hops `path` were judged (at
        `at`): all answered, or what failed is this wave's verdict (its incident renewed since). A
        wave's judgement is the whole state of that API's path: the open incidents its canaries
        opened before `since` at those hops (or at no watched hop) clear. Returns them."""
        cleared = []
        for incident in self.incidents.values():
            on_path = incident.where in path or incident.where not in self.hops
            if incident.open and incident.api == api and incident.last_verdict_at < since and on_path:
                incident.cleared_at = at
                cleared.append(incident)
        self._forget_cleared()
        return cleared

    def _forget_cleared(self) -> None:
        """At most CLEARED_INCIDENTS_KEPT cleared incidents, the oldest cleared forgotten first."""
        gone = [i for i in self.incidents.values() if not i.open]
        gone.sort(key=lambda i: i.cleared_at or 0.0)
        for incident in gone[:max(0, len(gone) - CLEARED_INCIDENTS_KEPT)]:
            del self.incidents[incident.key]

    def open_incidents(self) -> list[Incident]:
        return [i for i in self.incidents.values() if i.open]

    def round_ended(self, outcome: str, *, at: float) -> None:
        self.rounds[outcome] = self.rounds.get(outcome, 0) + 1
        self.last_round_at = at

    def watch_hops(self, hops: list[tuple[str, str, str | None]], read_only: Collection[str] = (),
                   behind: dict[str, tuple[str, ...]] | None = None) -> None:
        """The watched set is now `hops` (name, url, role), those named in `read_only` read by their
        metrics only (no canary: their scrapes say up): new hops are added unchecked, gone ones
        dropped (their history with them), kept ones keep their state. `behind`: each hop's
        canaried hops behind it on the canaries' path (settle_up)."""
        self.behind = dict(behind or {})
        names = {name for name, _url, _role in hops}
        for name in [n for n in self.hops if n not in names]:
            del self.hops[name]
        for name, url, role in hops:
            state = self.hops.get(name)
            takes_canary = name not in read_only
            if state is None or state.url != url or state.takes_canary != takes_canary:
                self.hops[name] = HopState(name=name, url=url, role=role, takes_canary=takes_canary)

    def hops_changed(self, *, added: int, removed: int) -> None:
        for change, count in (("added", added), ("removed", removed)):
            if count:
                self.hop_changes[change] = self.hop_changes.get(change, 0) + count

    def to_dict(self) -> dict[str, Any]:
        return {"started_at": self.started_at, "listen": self.listen, "cost": dict(self.cost),
                "hops": [h.to_dict() for h in self.hops.values()],
                "incidents": [i.to_dict() for i in self.incidents.values()],
                "open_incidents": [i.to_dict() for i in self.open_incidents()],
                "verdicts": list(self.verdicts), "rounds": dict(self.rounds),
                "last_round_at": self.last_round_at, "loop_lag_s": self.loop_lag_s,
                "hop_changes": dict(self.hop_changes)}
