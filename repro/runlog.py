"""The run log: events as JSON Lines, written as they happen, read back even when torn.

Writes go through one buffered file that is flushed every `flush_interval` seconds and at
once for events that matter on their own (round outcomes, stalls, verdicts, the end). A crash
or Ctrl-C loses nothing that was flushed; SIGKILL loses at most the last interval of SSE
events, and the reader tolerates the torn last line it may leave.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from repro.core import events as ev
from repro.core.errors import ReproError

LOG_NAME = "events.jsonl"

_URGENT = frozenset((
    ev.RunStarted,
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

    def __init__(self, run_dir: Path, *, flush_interval: float = 0.2) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / LOG_NAME
        self._file = open(self.path, "ab", buffering=0)
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
            self._buffer.clear()

    def flush(self) -> None:
        if not self._closed:
            self._write_out()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._closed:
            self.flush()
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
                log.skipped.append(f"line {index + 1}: {exc}")
    if not log.events and (log.skipped or log.torn_last_line):
        raise RunLogError(f"{path} holds no repro events: pass a run folder written by `repro run --out DIR`")
    return log
