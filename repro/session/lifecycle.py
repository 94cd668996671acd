"""What a `repro run` and a `repro bench` share: a session's folder and log, its clock, the path of
an event (recorded, then learnt from), its live judges, its signals and its deadline.

Every event is written to the run log (`emit`) and what the session learns from it (`observe`)
is the same whichever process logged it: a sharded driver's workers log their own events and
stream them to `observe`. A verdict reaches the session one way only, as the ev.VerdictReached
its judge emits: the session keeps it (the summary's verdicts) and shows it (the terminal feed)
when it observes that event.
"""

from __future__ import annotations

import abc
import contextlib
import os
import platform
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console

from probes.deployment import record_deployment
from probes.sampler import Sampler
from repro.core import events as ev
from repro.core.evidence_book import EvidenceBook
from repro.core.hop import Hop
from repro.core.verdict import Verdict
from repro.core.wire_api import Api
from repro.io.runlog import RunLogWriter, merge_segments_or_keep
from repro.live.evidence_wave import fresh_canaries
from repro.live.live_judge import LiveJudge
from repro.load.gc_policy import gc_tuned_for_streaming
from repro.reporting.terminal import VerdictFeed, verdict_tally


def default_run_dir() -> Path:
    return Path("runs") / f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in ("repro", "aiohttp", "httpx", "anyio", "mitmproxy", "prometheus-client", "msgspec"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def redacted(config: dict[str, Any]) -> dict[str, Any]:
    return {key: ("<redacted>" if "key" in key.lower() and value else value) for key, value in config.items()}


class Session(abc.ABC):
    """One session's lifecycle; `main` (each kind of session its own) starts the stack, records
    the start, drives it with `drive`, and ends with `finished`. Everything started is stopped by
    then, and `execute` closes the log last, so that nothing recorded is lost."""

    def __init__(self, *, out: Path | None, console: Console | None, workers: int) -> None:
        self.console = console or Console(stderr=True)
        self.run_dir = Path(out) if out else default_run_dir()
        self.origin = time.monotonic()
        self.log = self.open_log()
        self.workers = workers  # above 1: the drivers' workers log segments, merged in at the end
        self.reason = "completed"  # why it ended, in words; interrupted_by says whether a signal did
        self.interrupted_by: signal.Signals | None = None
        self.books: list[EvidenceBook] = []  # each stack's evidence, fed every observed event
        self.verdicts: list[Verdict] = []  # every ev.VerdictReached observed, in order
        self.feed = VerdictFeed(self.console)
        # Who else reads SSE reads besides the log (a bench's window meter), or None: by far the
        # most frequent event, so no one else sees it.
        self.sse_reader: Callable[[ev.SSEReceived], None] | None = None

    def now(self) -> float:
        return time.monotonic() - self.origin

    def open_log(self) -> RunLogWriter:
        """The session's run log, opened in its folder (a kind of session may keep it otherwise)."""
        return RunLogWriter(self.run_dir)

    # --- events -----------------------------------------------------------------------------

    def emit(self, event: ev.Event) -> None:
        self.log.write(event)
        if type(event) is ev.SSEReceived:
            reader = self.sse_reader
            if reader is not None:
                reader(event)
            # A flagged round's next SSE event: the moment it resumed bounds its evidence
            # (EvidenceBook.resumed). A book flags almost never: one empty-dict check per event.
            for book in self.books:
                if book.flagged and (event.conv, event.round) in book.flagged:
                    book.add(event)
            return
        self.observe(event)

    def observe(self, event: ev.Event) -> None:
        """What the session learns from an event: evidence for its books, verdicts to keep and
        show. Kinds of session add what they count."""
        for book in self.books:
            book.add(event)
        if isinstance(event, ev.VerdictReached):
            self.verdicts.append(event.verdict)
            self.feed_for(event.verdict)(event.verdict)

    def feed_for(self, verdict: Verdict) -> VerdictFeed:
        """Where a verdict is shown as it lands."""
        return self.feed

    # --- the stack --------------------------------------------------------------------------

    def evidence_book(self, hops: list[Hop], *, stall_after: float, api: Api | None = None,
                      samples_kept_s: float | None = None) -> EvidenceBook:
        """A stack's evidence book, fed from now on (`api`: that wire API's canaries only;
        `samples_kept_s`: probe samples kept by age too, EvidenceBook says why)."""
        book = EvidenceBook(hops, stall_after=stall_after, api=api, samples_kept_s=samples_kept_s)
        self.books.append(book)
        return book

    def sampler(self, hops: list[Hop], interval: float) -> Sampler | None:
        """The probe sampler of a stack, or None when no hop has metrics or probing is off."""
        if interval <= 0 or not any(h.metrics_url for h in hops):
            return None
        return Sampler(hops, interval=interval, emit=self.emit, origin=self.origin)

    def live_judge(self, book: EvidenceBook, sampler: Sampler | None, *, model: str, api_key: str | None,
                   canary_timeout: float, driver_in_flight: Callable[[], int], api: Api = "chat") -> LiveJudge:
        return LiveJudge(book, emit=self.emit, now=self.now,
                         sample_all=sampler.sample_now if sampler is not None else None,
                         canary=fresh_canaries(model=model, timeout=canary_timeout, api_key=api_key, api=api),
                         canary_timeout=canary_timeout, driver_in_flight=driver_in_flight)

    def started(self, config: dict[str, Any], hops: list[Hop]) -> None:
        """The log's header: the configuration (secrets redacted), versions, clock origins, hops."""
        self.emit(ev.RunStarted(t=self.now(), config=redacted(config), versions=versions(),
                                monotonic_origin=self.origin, wall_clock_origin=time.time(), hops=hops))

    async def record_deployment(self, hops: list[Hop], *, api_key: str | None,
                                known: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
        """What each hop runs, read once before any load (bounded: 2 s at most, every hop at
        once) and logged, so that `repro diff` and `repro compare` can say what differed."""
        records = await record_deployment(hops, timeout=2.0, api_key=api_key, known=known)
        self.emit(ev.DeploymentRecorded(t=self.now(), hops=records))
        return records

    # --- the session ------------------------------------------------------------------------

    def execute(self) -> Any:
        try:
            return anyio.run(self.main)
        finally:
            self.log.close()
            if self.workers > 1 and (warning := merge_segments_or_keep(self.run_dir)):
                self.console.print(f"[yellow]{warning}[/]")

    @abc.abstractmethod
    async def main(self) -> Any:
        """The session itself, from starting its stack to its result."""

    async def drive(self, body: Callable[[], Awaitable[None]], *, deadline: float, name: str,
                    beside: Sequence[Callable[[], Awaitable[None]]] = ()) -> None:
        """Run `body` (the driving) within `deadline` seconds, with `beside` (samplers, followers)
        running until it ends. SIGINT or SIGTERM stops it. Stalled and failed rounds are judged
        by the drivers' judges (the live judges made here), whose verdicts the driving waits for,
        each bounded by the judge budget, before what runs beside (the samplers) stops."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._watch_signals, tasks.cancel_scope)
            for task in beside:
                tasks.start_soon(task)
            with anyio.move_on_after(deadline) as timer, gc_tuned_for_streaming():
                await body()
            if timer.cancelled_caught:
                self.reason = f"{name} deadline of {deadline:g} s passed"
            tasks.cancel_scope.cancel()

    @abc.abstractmethod
    def stop_driving(self) -> None:
        """Ask the drivers to start no new round (a signal came)."""

    def interrupted(self, signum: int) -> None:
        """A signal ends the session: said in `reason`, kept as the value `interrupted_by`."""
        self.interrupted_by = signal.Signals(signum)
        self.reason = f"interrupted by {self.interrupted_by.name}"

    async def _watch_signals(self, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                self.interrupted(signum)
                self.stop_driving()
                scope.cancel()
                return

    def closing_summary(self) -> dict[str, Any]:
        """What every session's summary ends with: its verdicts and their tally, its folder, why it ended."""
        verdicts = [v.to_dict() for v in self.verdicts]
        return {"verdicts": verdicts, "verdict_tally": verdict_tally(verdicts), "run_dir": str(self.run_dir),
                "reason": self.reason, "interrupted": self.interrupted_by is not None}

    def finished(self, summary: dict[str, Any]) -> None:
        """The log's last event; flushed, so that a reader sees the whole run."""
        self.emit(ev.RunFinished(t=self.now(), summary=summary, reason=self.reason))
        self.log.flush()
