"""A recorded run re-judged offline: the log's events fed to the same EvidenceBook and classify()
the live run used, in log order, so each stall is judged on exactly what the live judge saw. Also
what the report draws from the log: each round's span, each hop's metrics outages, and the texts
that name a verdict and an outage on the page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.core import events as ev
from repro.core.classify import classify
from repro.core.evidence_book import EvidenceBook, with_client_fate
from repro.core.hop import Hop
from repro.core.text import number
from repro.core.verdict import Verdict
from repro.io.runlog import RunLog, read_run_log

UNFINISHED_NOTE = "the run did not finish (no run_finished event): the report covers what was recorded"


@dataclass
class RoundSpan:
    conv: int
    round: int
    start: float
    end: float | None = None
    first_byte: float | None = None
    status: str = "running"
    stalled_at: float | None = None
    last_progress: float | None = None
    error: str | None = None


@dataclass
class Outage:
    """A span in which a hop's metrics page did not answer: from its first failed sample to the
    next readable one, or to the end of the log (`recovered` False)."""

    hop: str
    start: float
    end: float
    errors: list[str]  # distinct error texts, in the order they came
    samples: int  # failed samples in the span
    recovered: bool

    @property
    def error(self) -> str:
        return "; ".join(self.errors) or "no error text recorded"


@dataclass
class Rejudged:
    log: RunLog
    hops: list[Hop]
    rounds: list[RoundSpan]
    verdicts: list[Verdict]
    summary: dict[str, Any] | None
    end_t: float
    notes: list[str] = field(default_factory=list)
    verdict_times: list[float] = field(default_factory=list)  # when each of `verdicts` was reached, same order
    outages: list[Outage] = field(default_factory=list)


def find_outages(events: list[Any], end_t: float) -> list[Outage]:
    """Each hop's spans of consecutive unreadable ProbeSamples (snapshot.ok False)."""
    by_hop: dict[str, list[ev.ProbeSample]] = {}
    for event in events:
        if isinstance(event, ev.ProbeSample):
            by_hop.setdefault(event.hop, []).append(event)
    outages: list[Outage] = []
    for hop, samples in by_hop.items():
        current: Outage | None = None
        for sample in sorted(samples, key=lambda s: s.t):  # stable: same-time samples keep log order
            if not sample.snapshot.ok:
                if current is None:
                    current = Outage(hop, sample.t, sample.t, [], 0, False)
                current.samples += 1
                error = sample.snapshot.error
                if error and error not in current.errors:
                    current.errors.append(error)
            elif current is not None:
                current.end, current.recovered = sample.t, True
                outages.append(current)
                current = None
        if current is not None:
            current.end = max(end_t, current.start)
            outages.append(current)
    return sorted(outages, key=lambda o: (o.start, o.hop))


def rejudge(run_dir: Path) -> Rejudged:
    return rejudge_log(read_run_log(run_dir))


def rejudge_log(log: RunLog) -> Rejudged:
    """A log already read (a run folder's, or a range of a rotating log's) re-judged."""
    header = log.header
    hops = list(header.hops) if header else []
    config = header.config if header else {}
    book = EvidenceBook(hops, stall_after=float(config.get("stall_after", 10.0)))
    rounds: dict[tuple[int, int], RoundSpan] = {}
    summary = None
    end_t = 0.0
    pending: dict[tuple[int, int], ev.RoundStalled] = {}  # stalls whose live verdict is not yet in the log
    failed: dict[tuple[int, int], ev.RoundFailed] = {}  # failed rounds, likewise
    verdicts: list[Verdict] = []
    verdict_times: list[float] = []
    for event in log.events:
        end_t = max(end_t, event.t)
        book.add(event)
        if isinstance(event, ev.RoundStarted):
            rounds[(event.conv, event.round)] = RoundSpan(event.conv, event.round, event.t)
        elif isinstance(event, ev.FirstByte):
            span = rounds.get((event.conv, event.round))
            if span:
                span.first_byte = event.t
        elif isinstance(event, (ev.RoundDone, ev.RoundFailed, ev.RoundAbandoned)):
            span = rounds.get((event.conv, event.round))
            if span:
                span.end = event.t
                span.status = {ev.RoundDone: "completed", ev.RoundFailed: "failed"}.get(type(event), "stalled")
                if isinstance(event, ev.RoundFailed):
                    span.error = event.error
            if isinstance(event, ev.RoundFailed):
                failed[(event.conv, event.round)] = event
        elif isinstance(event, ev.RoundStalled):
            pending[(event.conv, event.round)] = event
            span = rounds.get((event.conv, event.round))
            if span:
                span.stalled_at, span.last_progress = event.t, event.last_progress_t
        elif isinstance(event, ev.VerdictReached):
            # Judge the stall now, in replay order: the book holds exactly what the live judge saw.
            key = (event.verdict.conversation, event.verdict.round)
            failure = failed.pop(key, None) if event.verdict.outcome == "failed" else None
            stall = pending.pop(key, None) if failure is None else None
            if failure is not None:
                verdicts.append(classify(book.evidence_for_failure(failure, until=event.t, canaries_since=failure.t)))
                verdict_times.append(event.t)
            elif stall is not None:
                verdicts.append(with_client_fate(classify(book.evidence_for(stall, until=event.t,
                                                                            canaries_since=stall.last_progress_t)),
                                                 book.client_fate(stall)))
                verdict_times.append(event.t)  # the re-judged verdict lands where the live one did
        elif isinstance(event, ev.RunFinished):
            summary = event.summary
    for stall in pending.values():
        # No live verdict (a run cut short, or an older log): judge with everything recorded.
        verdicts.append(with_client_fate(classify(book.evidence_for(stall, until=end_t,
                                                                    canaries_since=stall.last_progress_t)),
                                         book.client_fate(stall)))
        verdict_times.append(stall.t)  # no recorded verdict time: mark it at the stall
    notes = []
    if log.torn_last_line:
        notes.append("the log's last line was torn (the run was killed mid-write); everything before it was read")
    notes.extend(f"skipped unreadable {s}" for s in log.skipped[:5])
    if summary is None:
        notes.append(UNFINISHED_NOTE)
    return Rejudged(log, hops, sorted(rounds.values(), key=lambda r: (r.conv, r.round)), verdicts,
                    summary, end_t, notes, verdict_times, find_outages(log.events, end_t))


def seconds(t: float) -> str:
    return f"{number(t)} s"


def verdict_title(verdict: Verdict) -> str:
    """'client at proxy: connection-wedged' (no hop placed: 'unknown: no-evidence'): what a verdict
    mark on the timeline says."""
    return f"{verdict.side}{f' at {verdict.where}' if verdict.where else ''}: {verdict.kind}"


def outage_title(outage: Outage) -> str:
    until = f"to {seconds(outage.end)}" if outage.recovered else f"to the end of the log ({seconds(outage.end)})"
    count = f"{outage.samples} failed sample{'' if outage.samples == 1 else 's'}"
    return f"{outage.hop} metrics page did not answer from {seconds(outage.start)} {until}, {count}: {outage.error}"
