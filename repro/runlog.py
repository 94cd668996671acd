"""The run log: events as JSON Lines, written as they happen, read back even when torn.

Writes go through one buffered file that is flushed every `flush_interval` seconds and at
once for events that matter on their own (round outcomes, stalls, verdicts, the end). A crash
or Ctrl-C loses nothing that was flushed; SIGKILL loses at most the last interval of SSE
events, and the reader tolerates the torn last line it may leave.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import msgspec

from repro import events as ev

LOG_NAME = "events.jsonl"

_URGENT = (
    ev.RunStarted,
    ev.RoundDone,
    ev.RoundFailed,
    ev.RoundStalled,
    ev.RoundAbandoned,
    ev.VerdictReached,
    ev.Note,
    ev.RunFinished,
)


class RunLogWriter:
    def __init__(self, run_dir: Path, *, flush_interval: float = 0.2) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / LOG_NAME
        self._file = open(self.path, "ab", buffering=1 << 16)
        self._encoder = msgspec.json.Encoder()
        self._flush_interval = flush_interval
        self._last_flush = time.monotonic()
        self.count = 0

    def write(self, event: ev.Event) -> None:
        if self._file.closed:
            return
        self._file.write(self._encoder.encode(event) + b"\n")
        self.count += 1
        now = time.monotonic()
        if isinstance(event, _URGENT) or now - self._last_flush >= self._flush_interval:
            self._file.flush()
            self._last_flush = now

    def flush(self) -> None:
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self.flush()
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


class RunLogError(Exception):
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
    return log
