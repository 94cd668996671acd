"""A wall-clock range of a rotating run log (`repro report FOLDER --since T --until T`) re-judged.

The range's segments are read with CONTEXT_S seconds either side (repro.io.rotating_log.read_range)
and re-judged whole by repro.reporting.rejudge, exactly as a run is: a stall that began before
`--since` is judged on the samples and canaries recorded before it, and one whose live verdict came
after `--until` is judged where the live judge judged it, not on a cut-off record. Then only what
belongs to the range is kept: the verdicts reached within it, the rounds that overlap it, the
events drawn on the timeline, and counts of the rounds that ended (or stalled) within it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from repro.core import events as ev
from repro.core.moments import utc_text
from repro.io.rotating_log import RangeLog, read_range
from repro.reporting.rejudge import UNFINISHED_NOTE, Rejudged, RoundSpan, find_outages, rejudge_log

# Read around the range for context: more than a stall trigger plus a judge's budget, and a
# watch's rounds last seconds to minutes; the read costs at most a neighbouring segment.
CONTEXT_S = 600.0
_HEADER_KINDS = (ev.RunStarted, ev.DeploymentRecorded)


def rejudge_range(folder: Path, since: float | None, until: float | None, *, context: float = CONTEXT_S) -> Rejudged:
    """The range's verdicts, rounds and events; `data.log` is the RangeLog (its `in_range` 0: nothing recorded)."""
    log = read_range(folder, since, until, margin=context)
    return within_range(rejudge_log(log), log)


def within_range(data: Rejudged, log: RangeLog) -> Rejudged:
    """`data` (the range and its context re-judged) cut to the range; `log.events` keeps the header
    and the range's events, which the timeline draws."""
    def inside(t: float) -> bool:
        return (log.t_since is None or t >= log.t_since) and (log.t_until is None or t <= log.t_until)

    kept = [i for i, t in enumerate(data.verdict_times) if inside(t)]
    end_t = data.end_t if log.t_until is None else min(data.end_t, log.t_until)
    rounds = [r for r in data.rounds if (log.t_until is None or r.start <= log.t_until)
              and (log.t_since is None or (r.end if r.end is not None else end_t) >= log.t_since)]
    log.events = [e for e in log.events if isinstance(e, _HEADER_KINDS) or inside(e.t)]
    header = log.header
    whole_run = header is not None and (log.t_since is None or log.t_since <= header.t)
    finished = any(isinstance(e, ev.RunFinished) for e in log.events)
    notes = [n for n in data.notes if n != UNFINISHED_NOTE or log.until is None] + log.notes
    return replace(data, rounds=rounds, verdicts=[data.verdicts[i] for i in kept],
                   verdict_times=[data.verdict_times[i] for i in kept], end_t=end_t, notes=notes,
                   summary=data.summary if whole_run and finished else range_counts(rounds, inside),
                   outages=find_outages(log.events, end_t))


def range_counts(rounds: list[RoundSpan], inside: Callable[[float], bool]) -> dict[str, int]:
    """What happened to rounds within a range of a run that goes on: those that ended in it, and
    those stalled in it (still stalled at its end, or abandoned). A round merely running at the
    end of the range is not counted: it has not done anything yet."""
    completed = sum(1 for r in rounds if r.status == "completed" and r.end is not None and inside(r.end))
    failed = sum(1 for r in rounds if r.status == "failed" and r.end is not None and inside(r.end))
    stalled = sum(1 for r in rounds if (r.stalled_at is not None and inside(r.stalled_at))
                  or (r.status == "stalled" and r.end is not None and inside(r.end)))
    return {"rounds_total": completed + failed + stalled, "rounds_completed": completed,
            "rounds_failed": failed, "rounds_stalled": stalled}


def range_text(log: RangeLog) -> str:
    """'from 2026-12-05T10:00:00Z (t 3600 s) to now (...)': the range a report covers, in wall time
    and on the run's clock (the timeline's seconds)."""
    def end(wall: float | None, t: float | None, open_text: str) -> str:
        if wall is None:
            return open_text
        if t is None:
            return utc_text(wall)
        return f"{utc_text(wall)} ({'before the run started' if header and t < header.t else f't {t:.0f} s'})"

    header = log.header
    run = f" of the run started {utc_text(header.wall_clock_origin)}" if header else ""
    return (f"from {end(log.since, log.t_since, 'the oldest segment kept')} to "
            f"{end(log.until, log.t_until, 'the newest event')}{run}")


def empty_range_text(log: RangeLog, folder: Path) -> str:
    """One line for a range that holds no event: what the folder does hold."""
    held = ""
    if log.held:
        held = f"; its segments started between {utc_text(log.held[0])} and {utc_text(log.held[1])}"
    return f"nothing was recorded {range_text(log)} in {folder}{held}"
