"""The run log: events as JSON Lines, written as they happen, read back even when torn.

Writes go through one buffered file that is flushed every `flush_interval` seconds and at
once for events that matter on their own (round outcomes, stalls, verdicts, the end). A crash
or Ctrl-C loses nothing that was flushed; SIGKILL loses at most the last interval of SSE
events, and the reader tolerates the torn last line it may leave.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from repro.core import events as ev
from repro.core.errors import ReproError

LOG_NAME = "events.jsonl"
# A worker process of a sharded run (repro/load/shards.py) writes its own segment, merged into
# LOG_NAME at the end of the run; the reader takes segments a run left unmerged too.
SEGMENT_GLOB = "events.w*.jsonl"


def segment_name(worker: int) -> str:
    return f"events.w{worker}.jsonl"

_URGENT = frozenset((
    ev.RunStarted,
    ev.DeploymentRecorded,
    ev.RoundDone,
    ev.RoundFailed,
    ev.RoundStalled,
    ev.RoundAbandoned,
    ev.VerdictReached,
    ev.Note,
    ev.RunFinished,
))


class RunLogWriter:
    # Events are encoded straight into one bytearray (msgspec encode_into: no bytes object per
    # event, no `+ b"\n"` copy) and written to the file in one call per flush: a per-event
    # record stays cheap enough for every SSE event of a 1000-stream run.
    _SPILL = 1 << 16  # write out at this many buffered bytes even between flushes

    def __init__(self, run_dir: Path, *, flush_interval: float = 0.2, name: str = LOG_NAME) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / name
        self._file = open(self.path, "ab", buffering=0)
        self._written = os.fstat(self._file.fileno()).st_size  # appending: what the file held already
        self._buffer = bytearray()
        self._encode_into = msgspec.json.Encoder().encode_into
        self._flush_interval = flush_interval
        self._last_flush = time.monotonic()
        self._closed = False
        self.count = 0

    def write(self, event: ev.Event) -> None:
        if self._closed:
            return
        buffer = self._buffer
        size = len(buffer)
        try:
            self._encode_into(event, buffer, -1)
        except BaseException:
            del buffer[size:]  # an event that cannot be encoded leaves no half line behind
            raise
        buffer += b"\n"
        self.count += 1
        now = time.monotonic()
        if type(event) in _URGENT or now - self._last_flush >= self._flush_interval or len(buffer) >= self._SPILL:
            self._write_out()
            self._last_flush = now

    def _write_out(self) -> None:
        if self._buffer:
            view = memoryview(self._buffer)
            while view:  # an unbuffered write may be partial
                view = view[self._file.write(view):]
            view.release()
            self._written += len(self._buffer)
            self._buffer.clear()

    @property
    def size(self) -> int:
        """The log's size in bytes once its buffer is written out (a rotating log's measure)."""
        return self._written + len(self._buffer)

    def flush(self) -> None:
        if not self._closed:
            self._write_out()
            os.fsync(self._file.fileno())

    def close(self, *, sync: bool = True) -> None:
        """Write out what is buffered and close; `sync` waits for the disk too (fsync). Without it
        the bytes are in the kernel's page cache: a crash of the process loses none of them, and
        the kernel writes them back within its writeback interval (a rotating log closes its
        segments so: one fsync of a whole segment would stall the writer)."""
        if not self._closed:
            if sync:
                self.flush()
            else:
                self._write_out()
            self._closed = True
            self._file.close()


@dataclass
class RunLog:
    """A run log read back: its events in order, and what could not be read."""

    path: Path
    events: list[ev.Event] = field(default_factory=list)
    torn_last_line: bool = False
    skipped: list[str] = field(default_factory=list)

    @property
    def header(self) -> ev.RunStarted | None:
        for event in self.events:
            if isinstance(event, ev.RunStarted):
                return event
        return None

    def of(self, kind: type[ev.Event]) -> Iterator[ev.Event]:
        return (e for e in self.events if isinstance(e, kind))


class RunLogError(ReproError):
    """A run folder or log that cannot be read; the message is one line for the user."""


def read_run_log(path: Path) -> RunLog:
    """Read a run folder (or its events.jsonl). A torn last line is tolerated and reported;
    a line of an unknown event type (a newer version's) is skipped and reported."""
    path = Path(path)
    if path.is_dir():
        path = path / LOG_NAME
    if not path.exists():
        raise RunLogError(f"no run log at {path}: pass a run folder written by `repro run --out DIR`")
    decoder = msgspec.json.Decoder(ev.EventTypes)
    log = RunLog(path=path)
    raw = path.read_bytes()
    _decode_into(log, raw, decoder, "")
    segments = unmerged_segments(path, raw)
    for segment in segments:
        _decode_into(log, segment.read_bytes(), decoder, f"{segment.name} ")
    if segments:  # a sharded run that ended before its merge: the same order the merge gives
        log.events.sort(key=_t_of)
    if not log.events and (log.skipped or log.torn_last_line):
        raise RunLogError(f"{path} holds no repro events: pass a run folder written by `repro run --out DIR`")
    return log


def _decode_into(log: RunLog, raw: bytes, decoder: msgspec.json.Decoder, where: str) -> None:
    lines = raw.split(b"\n")
    last_index = len(lines) - 1
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            log.events.append(decoder.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            if index == last_index:
                log.torn_last_line = True
            else:
                log.skipped.append(f"{where}line {index + 1}: {exc}")


def _t_of(event: ev.Event) -> float:
    return event.t


def unmerged_segments(log_path: Path, log_bytes: bytes | None = None) -> list[Path]:
    """The worker segments beside a run log that are not in it yet. A merge copies every line
    byte for byte, and a line is unique (its `t` and round), so a segment whose first line is in
    the log was merged (a merge cut short after replacing the log, before removing the segment)."""
    log_path = Path(log_path)
    if log_path.name != LOG_NAME:
        return []
    found = []
    for segment in sorted(log_path.parent.glob(SEGMENT_GLOB)):
        with open(segment, "rb") as f:
            first = f.readline()
        if not first.endswith(b"\n"):
            if first:  # one torn line and nothing else: still the segment's own
                found.append(segment)
            continue
        if log_bytes is None:
            log_bytes = log_path.read_bytes() if log_path.exists() else b""
        if not (log_bytes.startswith(first) or b"\n" + first in log_bytes):
            found.append(segment)
    return found


class _Stamp(msgspec.Struct):
    t: float


def merge_segments(run_dir: Path) -> int:
    """Merge a sharded run's worker segments into its run log, ordered by `t`, and remove them.

    The merged log is written beside the log and replaces it in one rename once it is on disk, so a
    merge that fails (or is killed) leaves the log and every segment as they were; readers merge
    unmerged segments themselves. Returns the number of lines merged in from the segments.

    Streamed, in bounded memory: a worker stamps each event when it writes it, on one thread, so
    its segment is in time order already. The parent's own log is small (no SSE reads) and may
    hold events stamped before they were written (the proxy's flows), so it is sorted whole.
    Should a segment still be out of order, the merge sorts everything in memory instead: never a
    wrong order (benchmarks/workers.py measures both).
    """
    log_path = Path(run_dir) / LOG_NAME
    log_bytes = log_path.read_bytes() if log_path.exists() else b""
    segments = unmerged_segments(log_path, log_bytes)
    if not segments:
        return 0
    partial = log_path.with_name(LOG_NAME + ".merging")
    try:
        try:
            merged_in = _write_merged(partial, log_bytes, segments)
        except _OutOfOrder:
            merged_in = _write_merged(partial, log_bytes, segments, in_memory=True)
        os.replace(partial, log_path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    for segment in segments:
        segment.unlink(missing_ok=True)
    return merged_in


class _OutOfOrder(Exception):
    pass


def _stamped(lines: Iterable[bytes], source: int, torn: list[tuple[int, bytes]]) -> Iterator[tuple[float, int, int, bytes]]:
    """(t, source, line number, line): ties in t keep the files' order, and each file's own."""
    stamp = msgspec.json.Decoder(_Stamp).decode
    for number, line in enumerate(lines):
        line = line.rstrip(b"\n")
        if not line.strip():
            continue
        try:
            yield stamp(line).t, source, number, line
        except (msgspec.DecodeError, msgspec.ValidationError):
            torn.append((source, line))  # a torn last line (a process killed mid-write): kept, at the end


def _write_merged(partial: Path, log_bytes: bytes, segments: list[Path], *, in_memory: bool = False) -> int:
    torn: list[tuple[int, bytes]] = []
    merged_in = 0
    with contextlib.ExitStack() as files:
        sources = [iter(sorted(_stamped(log_bytes.split(b"\n"), 0, torn)))]
        for index, segment in enumerate(segments, start=1):
            sources.append(_stamped(files.enter_context(open(segment, "rb")), index, torn))
        if in_memory:  # the fallback: everything in memory, one sort
            sources = [iter(sorted(item for source in sources for item in source))]
        out = files.enter_context(open(partial, "wb"))
        last = -math.inf
        for t, source, _, line in heapq.merge(*sources):
            if t < last:
                raise _OutOfOrder
            last = t
            merged_in += source > 0
            out.write(line + b"\n")
        # The last one unterminated, as the torn line it was: a reader tolerates it there.
        out.write(b"\n".join(line for _, line in torn))
        out.flush()
        os.fsync(out.fileno())
    return merged_in + sum(1 for source, _ in torn if source > 0)


def merge_segments_or_keep(run_dir: Path) -> str | None:
    """Merge a sharded run's segments once its log is closed (not bounded by a Ctrl-C's 2 s: the
    workers are stopped by then). None when merged; else one line for the user: nothing is lost,
    the segments stay and readers merge them themselves."""
    try:
        merge_segments(run_dir)
    except Exception as exc:  # whatever went wrong, the segments are intact: say so, lose nothing
        return (f"the workers' run-log segments in {run_dir} were not merged ({exc}); "
                "they are kept, and `repro report` reads them")
    return None
