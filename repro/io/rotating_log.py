"""The run log of a session that runs for days (`repro watch`): rotating segments, bounded in size
and age, and any wall-clock range of them read back as one RunLog.

A folder holds segments named by the wall-clock second they started and a sequence number,
`events-20261205T101500Z-0001.jsonl`, so that `ls` lists them in time order and a reader finds the
segments overlapping a range from the names alone (a segment ends where the next one starts): no
index file to keep consistent with the segments, nothing to repair after a crash.

Each segment is a run log of its own (repro.io.runlog.RunLogWriter writes it; `repro report
SEGMENT` reads it alone): it starts with a copy of the run's header, ev.RunStarted (its clock
origins map every event's `t` to wall time) and the latest ev.DeploymentRecorded. The copies keep
their original `t`, so a reader of several segments recognises them and keeps one.

Why these defaults: a segment of 64 MiB holds about 15 minutes of a busy run's SSE events and many
hours of a watch's few canary conversations, and is read back in well under a second; a new
segment at least every hour keeps a range read of an hour to one or two segments; 7 days covers a
week-end and the incident review after it; 1 GiB total bounds the disk whatever the rate (the
older segments go first).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from repro.core import events as ev
from repro.core.moments import utc_text
from repro.io.runlog import RunLog, RunLogError, RunLogWriter, read_run_log

MIB = 1 << 20
DEFAULT_SEGMENT_BYTES = 64 * MIB
DEFAULT_SEGMENT_SECONDS = 3600.0
DEFAULT_KEEP_SECONDS = 7 * 24 * 3600.0
DEFAULT_KEEP_BYTES = 1024 * MIB

_NAME = re.compile(r"^events-(\d{8}T\d{6}Z)-(\d{4,})\.jsonl$")
_STAMP = "%Y%m%dT%H%M%SZ"
# How far a reader looks past a segment's named span: the name is floored to the second, and the
# wall clock that named it may have been stepped (NTP) against the monotonic one events carry.
NAME_SLACK_S = 60.0


def segment_file_name(start: float, seq: int) -> str:
    return f"events-{datetime.fromtimestamp(start, UTC).strftime(_STAMP)}-{seq:04d}.jsonl"


@dataclass(frozen=True)
class Segment:
    path: Path
    start: float  # wall-clock epoch seconds it started, to the second (from its name)
    seq: int

    @property
    def name(self) -> str:
        return self.path.name


def list_segments(folder: Path) -> list[Segment]:
    """The folder's segments, oldest first (by sequence number: a clock stepped back does not reorder them)."""
    found = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.scandir(folder):
            match = _NAME.match(entry.name)
            if match:
                start = datetime.strptime(match[1], _STAMP).replace(tzinfo=UTC).timestamp()
                found.append(Segment(Path(folder) / entry.name, start, int(match[2])))
    return sorted(found, key=lambda s: s.seq)


def is_rotating_folder(folder: Path) -> bool:
    return bool(list_segments(folder))


LOCK_NAME = "events.lock"


def hold_folder(folder: Path) -> BinaryIO:
    """The folder's writer lock, held while the returned file is open (the kernel drops it when the
    process ends, however it ends): two writers would number and trim the same segments."""
    lock = open(folder / LOCK_NAME, "ab")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise RunLogError(f"another process writes its run log into {folder}: give this one a folder of its own") from None
    return lock


class RotatingRunLog:
    """The Session's run log as rotating segments: write(event), flush(), close(), path, count, and
    `segment` (the current segment's file name, which a verdict records to point to its segment).

    A segment is closed and the next one opened when it holds `segment_bytes` (it may pass that by
    the one event that filled it) or has been open `segment_seconds`; then the oldest segments go
    while any ended more than `keep_seconds` ago or all of them hold more than `keep_bytes`. The
    current segment is never deleted. One writer per folder.

    Rotation is on the writing thread, between two events, so no event is lost or reordered. It
    does not fsync the finished segment: its bytes are in the kernel already (a crash of the
    process loses none), written back by the kernel as a plain log's are between its flushes,
    while one fsync of 64 MiB stalled the writer 41 ms (benchmarks/runlog_rotation.py); flush()
    and close() fsync the current segment as the plain log does. Trimming costs a listing, a stat
    per segment and an unlink per expired one. A delete that fails is written into the log as an
    ev.Note and retried at the next rotation.
    `clock` gives wall-clock epoch seconds (tests pass their own).
    """

    def __init__(self, folder: Path, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 keep_seconds: float = DEFAULT_KEEP_SECONDS, keep_bytes: int = DEFAULT_KEEP_BYTES,
                 segment_seconds: float = DEFAULT_SEGMENT_SECONDS, flush_interval: float = 0.2,
                 clock: Callable[[], float] = time.time) -> None:
        if segment_bytes <= 0 or keep_seconds <= 0 or segment_seconds <= 0:
            raise RunLogError("a rotating run log needs a positive segment size, segment age and keep time")
        if keep_bytes < segment_bytes:
            raise RunLogError(f"a rotating run log keeps at least one whole segment: keep_bytes ({keep_bytes}) "
                              f"is below segment_bytes ({segment_bytes})")
        self.folder = self.run_dir = Path(folder)  # run_dir: as the plain writer names its folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = hold_folder(self.folder)
        self.segment_bytes = segment_bytes
        self.segment_seconds = segment_seconds
        self.keep_seconds = keep_seconds
        self.keep_bytes = keep_bytes
        self._flush_interval = flush_interval
        self._clock = clock
        self._run_started: ev.RunStarted | None = None
        self._deployment: ev.DeploymentRecorded | None = None
        self._last_t = 0.0
        self._closed = False
        self._undeleted: list[str] = []  # deletes that failed, not yet said in the log
        self.count = 0  # events written by the caller (the header copies not counted)
        self.rotations = 0
        existing = list_segments(self.folder)
        self._seq = existing[-1].seq if existing else 0
        self._open_next()
        self._expire()  # a watch restarted on an old folder starts by trimming it

    @property
    def path(self) -> Path:
        return self._writer.path

    @property
    def segment(self) -> str:
        return self._writer.path.name

    def write(self, event: ev.Event) -> None:
        if self._closed:
            return
        writer = self._writer
        writer.write(event)
        self.count += 1
        self._last_t = event.t
        kind = type(event)
        if kind is ev.RunStarted:
            self._run_started = event
            self._note_undeleted()
        elif kind is ev.DeploymentRecorded:
            self._deployment = event
        if writer.size >= self.segment_bytes or self._clock() >= self._rotate_at:
            self.rotate()

    def rotate(self) -> None:
        """Close the current segment and open the next, with the header copied, then trim old ones."""
        self._close_segment(sync=False)
        self._open_next()
        self.rotations += 1
        for header in (self._run_started, self._deployment):
            if header is not None:
                self._writer.write(header)
        self._expire()

    def flush(self) -> None:
        if not self._closed:
            self._writer.flush()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close_segment(sync=True)
            self._lock.close()  # and with it the folder's lock

    def _close_segment(self, *, sync: bool) -> None:
        self._writer.close(sync=sync)
        # Its modification time says when it ended, on `clock`'s scale: what trimming by age reads.
        now = self._clock()
        with contextlib.suppress(OSError):
            os.utime(self._writer.path, (now, now))

    def _open_next(self) -> None:
        self._seq += 1
        started = self._clock()
        self._rotate_at = started + self.segment_seconds
        name = segment_file_name(started, self._seq)
        self._writer = RunLogWriter(self.folder, flush_interval=self._flush_interval, name=name)

    def _expire(self) -> None:
        segments = list_segments(self.folder)
        sizes, ended = {}, {}
        for segment in segments:
            with contextlib.suppress(FileNotFoundError):
                stat = segment.path.stat()
                sizes[segment.seq], ended[segment.seq] = stat.st_size, stat.st_mtime
        total = sum(sizes.values())
        horizon = self._clock() - self.keep_seconds
        for older, newer in zip(segments, segments[1:], strict=False):  # never the newest: the current one
            if older.path == self.path:
                break
            # It ended when last written, and at the latest when the next one began (floored to the second
            # in its name): the older of the two, so that an old run's last segment is not kept for its
            # successor's age, nor a segment whose file was touched since.
            end = min(ended.get(older.seq, horizon), newer.start + 1.0)
            if end >= horizon and total <= self.keep_bytes:
                break  # oldest first: what follows is younger, and the total is within bounds
            try:
                older.path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                self._undeleted.append(f"the expired run-log segment {older.path} could not be deleted ({exc}); "
                                       "kept, retried at the next rotation")
                continue
            total -= sizes.get(older.seq, 0)
        self._note_undeleted()

    def _note_undeleted(self) -> None:
        """Say in the log which deletes failed, once the log has its header (a note before it could not
        be placed in time)."""
        if self._run_started is not None:
            for message in self._undeleted:
                self._writer.write(ev.Note(t=self._last_t, level="warning", message=message))
            self._undeleted.clear()


# --- reading a range --------------------------------------------------------------------------


@dataclass
class RangeLog(RunLog):
    """The events of one run recorded between two wall-clock moments, read from rotating segments:
    the run's header (ev.RunStarted and the latest ev.DeploymentRecorded before the range) and the
    events of the range, in the order they were written, `t` on the run's own monotonic origin."""

    since: float | None = None  # wall-clock epoch seconds, as asked (None: from the oldest kept)
    until: float | None = None  # likewise (None: to the newest)
    t_since: float | None = None  # the same moments on the run's `t` scale (None: open)
    t_until: float | None = None
    margin: float = 0.0  # seconds read either side of the range, as context
    in_range: int = 0  # events within [since, until] (the header and the margin not counted)
    segments: list[str] = field(default_factory=list)  # the segment files read
    notes: list[str] = field(default_factory=list)  # what the reader wants the user to know
    held: tuple[float, float] | None = None  # when the folder's oldest and newest segments started

    def wall(self, t: float) -> float | None:
        """An event's `t` as wall-clock epoch seconds, through the header's clock origins."""
        header = self.header
        return None if header is None else wall_of(header, t)


def wall_of(header: ev.RunStarted, t: float) -> float:
    # The header was stamped `t` and read the wall clock as it was written: both name one moment.
    return header.wall_clock_origin + (t - header.t)


def t_of(header: ev.RunStarted, wall: float) -> float:
    return header.t + (wall - header.wall_clock_origin)


@dataclass
class _Run:
    header: ev.RunStarted
    deployment: ev.DeploymentRecorded | None = None  # the latest one before the range
    events: list[ev.Event] = field(default_factory=list)
    seen: set[tuple[type, float]] = field(default_factory=set)  # header kinds kept, to drop their copies
    in_range: int = 0
    torn: bool = False
    skipped: list[str] = field(default_factory=list)


def read_range(folder: Path, since: float | None, until: float | None, *, margin: float = 0.0) -> RangeLog:
    """The events recorded between `since` and `until` (wall-clock epoch seconds, None: open) in a
    folder of rotating segments, as one RunLog that repro.reporting.rejudge judges as it judges a
    run. Only the segments whose names overlap the range are read. `margin` seconds either side are
    read too, as context (a stall that began before `since` is judged on what was recorded before
    it); `in_range`, `t_since` and `t_until` say what the range itself is.

    A folder that a restarted watch wrote twice holds two runs, each on its own clock: the latest
    run with events in the range is returned and a note names the others. A torn last line (a
    segment cut by a crash) is tolerated and reported, as read_run_log does."""
    folder = Path(folder)
    segments = list_segments(folder)
    if not segments:
        raise RunLogError(f"no rotating run-log segments (events-*Z-*.jsonl) in {folder}: pass the folder "
                          "`repro watch` records into, or a run folder written by `repro run --out DIR`")
    if since is not None and until is not None and until < since:
        raise RunLogError("the range ends before it starts: --until must be after --since")
    low = None if since is None else since - margin
    high = None if until is None else until + margin
    ends = [s.start + 1.0 for s in segments[1:]] + [float("inf")]
    chosen = [s for s, end in zip(segments, ends, strict=True)
              if (high is None or s.start <= high + NAME_SLACK_S) and (low is None or end >= low - NAME_SLACK_S)]
    runs: dict[tuple[float, float], _Run] = {}
    notes: list[str] = []
    for segment in chosen:
        try:
            log = read_run_log(segment.path)
        except (RunLogError, FileNotFoundError):  # deleted under us by the writer, or nothing whole in it
            notes.append(f"segment {segment.name} holds no readable event (deleted as it was read, or cut by a crash)")
            continue
        run: _Run | None = None  # each segment is placed in time by its own header, its first line
        unplaced = 0
        for event in log.events:
            if type(event) is ev.RunStarted:
                run = runs.setdefault((event.monotonic_origin, event.wall_clock_origin), _Run(event))
            elif run is None:
                unplaced += 1
            else:
                _place(run, event, low, high, since, until)
        if unplaced:
            notes.append(f"segment {segment.name} has {unplaced} event{'s' if unplaced > 1 else ''} before any "
                         "run_started header: they cannot be placed in time and were left out")
        if run is not None:
            run.torn = run.torn or log.torn_last_line
            run.skipped.extend(f"{segment.name} {s}" for s in log.skipped)
        if log.torn_last_line and segment is not segments[-1]:
            notes.append(f"segment {segment.name} ends with a torn line (the writer was killed mid-write)")
    placed = list(runs.values())
    with_events = [r for r in placed if r.in_range] or placed
    result = RangeLog(path=chosen[0].path if chosen else segments[-1].path, since=since, until=until, margin=margin,
                      segments=[s.name for s in chosen], held=(segments[0].start, segments[-1].start))
    if with_events:
        picked = with_events[-1]
        result.events = [picked.header, *([picked.deployment] if picked.deployment else []), *picked.events]
        result.in_range = picked.in_range
        result.torn_last_line = picked.torn
        result.skipped = picked.skipped
        result.t_since = None if since is None else t_of(picked.header, since)
        result.t_until = None if until is None else t_of(picked.header, until)
        others = [r for r in with_events if r is not picked and r.in_range]
        if others:
            starts = ", ".join(utc_text(r.header.wall_clock_origin) for r in others)
            notes.append(f"the range also covers {len(others)} other run{'s' if len(others) > 1 else ''} of the log "
                         f"(started {starts}), each on its own clock: this covers the latest, started "
                         f"{utc_text(picked.header.wall_clock_origin)}; end the range before it to read an earlier one")
    result.notes = notes
    return result


def _place(run: _Run, event: ev.Event, low: float | None, high: float | None,
           since: float | None, until: float | None) -> None:
    """Keep `event` in `run` if it falls within the range and its margin (a header copy once)."""
    kind = type(event)
    if kind is ev.DeploymentRecorded:
        key = (kind, event.t)
        if key in run.seen:
            return  # a segment's copy of one already kept
        run.seen.add(key)
    wall = wall_of(run.header, event.t)
    if low is not None and wall < low:
        if kind is ev.DeploymentRecorded:
            run.deployment = event  # before the range: the latest is the range's header
        return
    if high is not None and wall > high:
        return
    run.events.append(event)
    if (since is None or wall >= since) and (until is None or wall <= until):
        run.in_range += 1
