"""Several run folders read as one run: the shards of `repro run --shard K/N` (N machines, or the
N pods of an Indexed Job), merged so that `repro report` judges them once, as it would the run one
process drove.

Each shard's times count from its own start on its own host's monotonic clock; its header says
what the wall clock read at that start. The events are moved onto the earliest shard's clock by
the difference of the wall clocks (hosts kept in step by NTP agree to milliseconds; the stall
trigger is seconds) and merged by time, as the segments of `--workers` are. The counts are the
sum of the shards' own, each shard's summary being what its driver counted (a round flagged
stalled that never ended has no event to count it by).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from repro.core import events as ev
from repro.core.errors import UsageError
from repro.io.runlog import LOG_NAME, RunLog, RunLogError, read_run_log
from repro.load.shards import outcome_of
from repro.reporting.summary import summarize

SHARD_FOLDER_PREFIX = "shard-"
# The fields of an event that are moments on the run's clock, besides `t`.
MOMENTS = ("started_t", "last_progress_t", "last_byte_t")
LOOPS_PER_SHARD = 1 << 16  # more worker processes than one machine runs
COUNTS = ("rounds_total", "rounds_completed", "rounds_stalled", "rounds_failed", "rounds_skipped",
          "rounds_with_tool_calls", "tool_calls")


def shard_folders(folder: Path) -> list[Path]:
    """The shard-K run folders in a folder that is not a run itself (what an Indexed Job's shared
    volume holds), by K; [] when there are none."""
    folder = Path(folder)
    if not folder.is_dir() or (folder / LOG_NAME).exists():
        return []
    found = [p for p in folder.glob(f"{SHARD_FOLDER_PREFIX}*") if (p / LOG_NAME).exists()
             and p.name.removeprefix(SHARD_FOLDER_PREFIX).isdigit()]
    return sorted(found, key=lambda p: int(p.name.removeprefix(SHARD_FOLDER_PREFIX)))


def merged_log(folders: list[Path]) -> RunLog:
    """The run logs of several shards as one log: one header, every event on one clock in time
    order, one end with the summed counts (none when a shard did not finish)."""
    logs = [read_run_log(folder) for folder in folders]
    headers = []
    for folder, log in zip(folders, logs, strict=True):
        if log.header is None:
            raise RunLogError(f"{folder} holds no run_started event: pass run folders written by `repro run`")
        headers.append(log.header)
    _check_disjoint(folders, headers)
    _check_one_stack(folders, headers)
    base = min(h.wall_clock_origin for h in headers)
    events: list[ev.Event] = []
    finished: list[ev.RunFinished] = []
    for index, (log, header) in enumerate(zip(logs, headers, strict=True)):
        shift = header.wall_clock_origin - base
        for event in log.events:
            if isinstance(event, ev.RunFinished):
                finished.append(event)
            elif not isinstance(event, ev.RunStarted):
                events.append(_own_loop(_shifted(event, shift), index))
    events.sort(key=lambda e: e.t)  # stable: a shard's own events keep their order at a tie
    first = min(headers, key=lambda h: h.wall_clock_origin)
    config = {**first.config, "conversations": sum(_conversations(h) for h in headers), "conversation_ids": None,
              "shards": [h.config.get("shard") for h in headers]}
    merged = [msgspec.structs.replace(first, t=0.0, config=config), *events]
    if len(finished) == len(logs):
        end = max((e.t for e in events), default=0.0)
        merged.append(ev.RunFinished(t=end, summary=merged_summary(finished, events, config),
                                     reason="; ".join(dict.fromkeys(f.reason for f in finished))))
    skipped = [f"{folder.name}: {line}" for folder, log in zip(folders, logs, strict=True) for line in log.skipped]
    return RunLog(path=Path(os.path.commonpath([Path(f).resolve() for f in folders])) / LOG_NAME, events=merged,
                  torn_last_line=any(log.torn_last_line for log in logs), skipped=skipped)


def merged_summary(finished: list[ev.RunFinished], events: list[ev.Event], config: dict[str, Any]) -> dict[str, Any]:
    """The shards' counts summed; the per-round table from every shard's rounds together."""
    outcomes = [outcome_of(e) for e in events if isinstance(e, (ev.RoundDone, ev.RoundFailed, ev.RoundAbandoned))]
    summary = summarize(outcomes, conversations=config["conversations"], rounds=int(config.get("rounds", 0)))
    for key in COUNTS:
        summary[key] = sum(int(f.summary.get(key, 0)) for f in finished)
    summary["interrupted"] = any(f.summary.get("interrupted") for f in finished)
    summary["shards"] = len(finished)
    return summary


def _conversations(header: ev.RunStarted) -> int:
    ids = header.config.get("conversation_ids")
    return len(ids) if ids is not None else int(header.config.get("conversations", 0))


def _check_disjoint(folders: list[Path], headers: list[ev.RunStarted]) -> None:
    """Shards of one run drive different conversations; two runs that drove the same ones are not
    shards of one run, and merging them would count each of those rounds twice."""
    seen: dict[int, Path] = {}
    for folder, header in zip(folders, headers, strict=True):
        ids = header.config.get("conversation_ids")
        for conv in ids if ids is not None else range(int(header.config.get("conversations", 0))):
            if conv in seen:
                raise UsageError(f"{folder} and {seen[conv]} both drove conversation {conv}: they are not shards "
                                 "of one run; give the folders of `repro run --shard K/N`, K = 0 .. N-1")
            seen[conv] = folder


def _check_one_stack(folders: list[Path], headers: list[ev.RunStarted]) -> None:
    """Shards of one run drive one stack: the same hops at the same addresses. Two stacks under one
    hop name (each shard's own embedded engine, or its own --inject proxy) would put one's samples
    in the other's evidence, and a verdict on the wrong hop."""
    first = [(hop.name, hop.url) for hop in headers[0].hops]
    for folder, header in zip(folders[1:], headers[1:], strict=True):
        hops = [(hop.name, hop.url) for hop in header.hops]
        if hops != first:
            differs = next((f"{a[0]} at {a[1]} and {b[0]} at {b[1]}" for a, b in zip(first, hops, strict=False)
                            if a != b), "a different number of hops")
            raise UsageError(f"{folders[0]} and {folder} drove different stacks ({differs}): shards of one run "
                             "drive the same hops; give each the same --target/--hop (not its own embedded engine)")


def _own_loop(event: ev.Event, shard: int) -> ev.Event:
    """A shard's driving loops under ids of their own: each shard ran in its own process (its
    workers too, with --workers), and a loop's lag is evidence for the rounds it drove only
    (EvidenceBook.loop_lag): pooled, one shard's starved loop would blame the client for another
    shard's stall at the engine. Shard s's only loop becomes s * LOOPS_PER_SHARD, its worker w
    s * LOOPS_PER_SHARD + w + 1. The judge's own lag (`judge`) stays as it was."""
    if isinstance(event, ev.RoundStarted) or (isinstance(event, ev.LoopLag) and not event.judge):
        worker = shard * LOOPS_PER_SHARD + (0 if event.worker is None else event.worker + 1)
        return msgspec.structs.replace(event, worker=worker)
    return event


def _shifted(event: ev.Event, shift: float) -> ev.Event:
    if not shift:
        return event
    moved = {"t": event.t + shift}
    for name in MOMENTS:
        value = getattr(event, name, None)
        if value is not None:
            moved[name] = value + shift
    return msgspec.structs.replace(event, **moved)

