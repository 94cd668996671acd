"""A harness as users write them, run as a child process for `repro triage --pid` to read from
outside: tests/harnesses/openai_chat.py (the official openai SDK, AsyncOpenAI or OpenAI), its JSON
progress lines collected, and `repro triage` run as a user would.

    with harness("async", base_url, think=0.2, extra=("--deadlock-after", "2")) as h:
        h.wait_for("deadlocked", 2)
        code, result, stderr, started, ended = run_triage("--pid", str(h.pid), "--hop", ..., "--json")

The harness is always stopped (SIGCONT first: a stopped process keeps TERM pending, then SIGKILL).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "tests" / "harnesses" / "openai_chat.py"


def stop_all(pids: list[int]) -> None:
    for pid in pids:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break


@dataclass
class Harness:
    process: subprocess.Popen
    lines: queue.Queue = field(default_factory=queue.Queue)
    seen: list[dict] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_for(self, event: str, round_index: int, timeout: float = 20.0) -> dict:
        deadline = time.monotonic() + timeout
        for line in self.seen:
            if (line["event"], line["round"]) == (event, round_index):
                return line
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"harness: no {event} of round {round_index} within {timeout:g} s; "
                                     f"saw {self.seen[-3:]}, exit {self.process.poll()}") from None
            self.seen.append(line)
            if (line["event"], line["round"]) == (event, round_index):
                return line

    def drain(self) -> list[dict]:
        while not self.lines.empty():
            self.seen.append(self.lines.get_nowait())
        return self.seen


@contextmanager
def harness(client: str, base_url: str, *, think: float, max_tokens: int = 8,
            extra: Sequence[str] = ()) -> Iterator[Harness]:
    process = subprocess.Popen([sys.executable, str(HARNESS), "--client", client, "--base-url", base_url,
                                "--think", str(think), "--max-tokens", str(max_tokens), *extra],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    handle = Harness(process)

    def read() -> None:
        for line in process.stdout:
            handle.lines.put(json.loads(line))

    threading.Thread(target=read, daemon=True).start()
    try:
        yield handle
    finally:
        stop_all([process.pid])
        process.wait(10)
        process.stdout.close()


def run_triage(*args: str) -> tuple[int, dict, str, float, float]:
    """`repro triage ARGS` as a user runs it: (exit code, its --json, stderr, wall-clock start and end)."""
    started = time.time()
    out = subprocess.run([sys.executable, "-m", "repro", "triage", *args], capture_output=True, text=True, timeout=60,
                         cwd=ROOT)
    ended = time.time()
    return out.returncode, json.loads(out.stdout or "{}"), out.stderr, started, ended
