"""A long watch's record written through repro.io.rotating_log.RotatingRunLog without running one:
a healthy canary conversation and probe samples all along, and at chosen moments a stall shaped
like the two this tool tells apart (a proxy wedging a reused connection: client-side; an engine
holding its request with no token moving: server-side), each with the live verdict the watch
would have logged. Its clock is the log's own: wall = WALL0 + t, so a test names wall moments."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.hop import Hop
from repro.core.snapshot import Snapshot
from repro.core.verdict import Verdict
from repro.io.rotating_log import RotatingRunLog

WALL0 = datetime(2026, 12, 5, 10, 0, tzinfo=UTC).timestamp()  # t = 0: the watch started
HOPS = [Hop("proxy", "http://127.0.0.1:1", "http://127.0.0.1:3/metrics", "proxy"),
        Hop("engine-0", "http://127.0.0.1:2", "http://127.0.0.1:2/metrics", "engine")]
CONFIG = {"target": "http://127.0.0.1:1/v1", "model": "m", "conversations": 2, "stall_after": 1.0}


class WatchClock:
    """The wall clock of the recorded watch: set to each event's moment as it is written."""

    def __init__(self) -> None:
        self.wall = WALL0

    def __call__(self) -> float:
        return self.wall


def at(hh_mm: str) -> float:
    """'10:20' on the watch's day as wall-clock epoch seconds."""
    hours, minutes = hh_mm.split(":")
    return WALL0 + (int(hours) - 10) * 3600 + int(minutes) * 60


def header(wall0: float = WALL0, origin: float = 1000.0) -> ev.RunStarted:
    return ev.RunStarted(t=0.0, config=CONFIG, versions={"python": "3"}, monotonic_origin=origin,
                         wall_clock_origin=wall0, hops=HOPS)


def deployment(t: float, engine_version: str) -> ev.DeploymentRecorded:
    return ev.DeploymentRecorded(t=t, hops={"engine-0": {"role": "engine", "url": "http://127.0.0.1:2",
                                                         "settings": {"version": engine_version}, "read": {}}})


def live_verdict(side: str, where: str, kind: str, conv: int, rnd: int) -> Verdict:
    return Verdict(side=side, where=where, kind=kind, confidence="high", phase="before-first-byte", conversation=conv,
                   round=rnd, stalled_for_s=1.05, evidence=[], ruled_out=[], summary="as the live judge said it")


def stall(t0: float, fault: str, rnd: int) -> list[ev.Event]:
    """Conversation 1's round `rnd` stalls at t0 + 1.05 ('wedge': the proxy holds it, the engine idles,
    fresh canaries pass; 'hang': the engine holds it, no token moves, a fresh request times out)."""
    wedge = fault == "wedge"
    events: list[ev.Event] = [ev.RoundStarted(t=t0, conv=1, round=rnd, prompt_chars=30, messages=3)]
    for i in range(12):
        t = t0 - 0.5 + 0.25 * i
        engine = Snapshot(ok=True, running=0 if wedge else 1, queued=0, itl_count=40)
        events.append(ev.ProbeSample(t=t, hop="engine-0", snapshot=engine))
        events.append(ev.ProbeSample(t=t, hop="proxy", snapshot=Snapshot(ok=True, in_flight=1, held=1 if wedge else 0)))
    events.append(ev.RoundStalled(t=t0 + 1.05, conv=1, round=rnd, phase="before-first-byte", stalled_for_s=1.05,
                                  started_t=t0, last_progress_t=t0, local="127.0.0.1:5555", reused=True))
    for hop, url in (("proxy", "http://127.0.0.1:1"), ("engine-0", "http://127.0.0.1:2")):
        outcome = (CanaryOutcome(hop=hop, url=url, ok=True, status=200, total_s=0.03, health_status=200) if wedge
                   else CanaryOutcome(hop=hop, url=url, ok=False, error="timed out after 1.0 s", total_s=1.0,
                                      health_status=200))
        events.append(ev.CanaryResult(t=t0 + 1.2, hop=hop, outcome=outcome))
    side, where, kind = ("client", "proxy", "connection-wedged") if wedge else ("server", "engine-0", "engine-hung")
    events.append(ev.VerdictReached(t=t0 + 1.3, verdict=live_verdict(side, where, kind, 1, rnd)))
    events.append(ev.RoundAbandoned(t=t0 + 2.5, conv=1, round=rnd, phase="before-first-byte", stalled_for_s=2.5,
                                    duration_s=2.5))
    return events


def healthy(until: float, *, round_every: float = 20.0, sample_every: float = 5.0) -> list[ev.Event]:
    """Conversation 0's canary rounds and both hops' samples, all well, from t = 1 to `until`."""
    events: list[ev.Event] = []
    rnd, t = 0, 1.0
    while t < until:
        rnd += 1
        events += [ev.RoundStarted(t=t, conv=0, round=rnd, prompt_chars=10, messages=1),
                   ev.FirstByte(t=t + 0.05, conv=0, round=rnd, status=200),
                   ev.RoundDone(t=t + 0.2, conv=0, round=rnd, status=200, reply_chars=5, duration_s=0.2, events=5,
                                max_gap_s=0.01)]
        t += round_every
    t = 2.5
    while t < until:
        events.append(ev.ProbeSample(t=t, hop="engine-0", snapshot=Snapshot(ok=True, running=0, queued=0, itl_count=9)))
        events.append(ev.ProbeSample(t=t, hop="proxy", snapshot=Snapshot(ok=True, in_flight=0, held=0)))
        t += sample_every
    return events


def record_watch(folder: Path, *, seconds: float, stalls: dict[float, str] | None = None,
                 deployments: dict[float, str] | None = None, clock: WatchClock | None = None,
                 finish: bool = False, **rotation) -> RotatingRunLog:
    """`seconds` of a watch written through a RotatingRunLog(folder, **rotation); `stalls` maps a t
    to 'wedge' or 'hang', `deployments` a t to the engine version recorded then. Returns the log, closed."""
    clock = clock or WatchClock()
    log = RotatingRunLog(folder, clock=clock, **rotation)
    first = header(clock.wall)
    events: list[ev.Event] = healthy(seconds)
    for rnd, (t0, fault) in enumerate(sorted((stalls or {}).items()), start=1):
        events += stall(t0, fault, rnd)
    events += [deployment(t, version) for t, version in (deployments or {0.5: "v1"}).items()]
    if finish:
        events.append(ev.RunFinished(t=seconds, summary={}, reason="interrupted by SIGTERM"))
    log.write(first)
    for event in sorted(events, key=lambda e: e.t):
        clock.wall = first.wall_clock_origin + event.t
        log.write(event)
    log.close()
    return log
