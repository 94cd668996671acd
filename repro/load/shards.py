"""`--workers N`: the conversations sharded across worker processes, for users with many cores.

ShardedDriver has the Driver's public shape (repro/load/driving.py's RoundDriver: `run()`,
`outcomes`, `in_flight`, `stop_requested`, `cpu_seconds()`), so a run or a bench picks one or the
other at one place. Each worker (repro/load/shard_worker.py) is a child
process, `python -m repro.load.shard_worker`, that runs a Driver over its round-robin share of the
conversation numbers with its own event loop and writes its own run-log segment; the parent
merges the segments into the one run log at the end (repro.io.runlog.merge_segments).

Why a plain child process and not multiprocessing: its stdin and stdout are the two pipes of the
protocol (repro/load/shard_protocol.py), non-blocking on our side through anyio; stdin reaching EOF
tells a worker its parent is gone even after a SIGKILL, as for the simulated engine; and
nothing of the parent is pickled or re-imported (the spawn context would re-import the caller's
`__main__`, a user's script or pytest).

The parent judges: a worker's watchdog sends its stall (and the early `prepare`) and waits,
bounded by the judge budget, for the parent's answer, so a verdict reads the parent's evidence
book, probe samples and canaries, and counts the rounds in flight in every worker. A failed round
the parent judges as its RoundFailed arrives (the worker's judge leaves failures alone), bounded
alike; `run()` returns once those judgements have ended. The events the parent needs
(repro.load.shard_protocol.STREAMED) arrive on the pipe and go to `observe`: the caller's book
and counters, not its log (they are in the worker's segment already). `repro bench` also asks
for the SSE reads (`forward_sse`): it counts tokens by their arrival, in the parent.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import anyio
import anyio.abc
import msgspec

from repro.core import events as ev
from repro.io.runlog import segment_name
from repro.load.connection_policy import parse_connections
from repro.load.driver import DriverConfig
from repro.load.prompts import PromptSource
from repro.load.round import RoundOutcome
from repro.load.shard_protocol import (
    Drain,
    Finished,
    FromWorker,
    Judged,
    JudgeRequest,
    PrepareRequest,
    Ready,
    Start,
    Stop,
    encoder,
)
from repro.load.watchdog import Judge, measure_loop_lag

Observe = Callable[[ev.Event], None]

# Stopping a worker: asked (it cuts its rounds, closes its sockets, reports its outcomes and
# flushes its segment), then SIGTERM, then SIGKILL, each bounded: every worker is gone within
# about 1.7 s of the stop, inside the 2 s a Ctrl-C is allowed.
STOP_GRACE_S = 1.0
TERM_GRACE_S = 0.4
KILL_WAIT_S = 0.3


class InFlightRound(NamedTuple):
    """A round a worker started and has not ended, as the parent knows it from the worker's events."""

    conv: int
    round: int
    started: float
    worker: int


def conversation_ids(config: DriverConfig) -> tuple[int, ...]:
    """The conversation numbers a config drives: its own list, else 0 .. conversations - 1."""
    return tuple(range(config.conversations)) if config.conversation_ids is None else tuple(config.conversation_ids)


def share_of(ids: tuple[int, ...], index: int, count: int) -> tuple[int, ...]:
    """The index-th of `count` round-robin slices of the conversation numbers (conversations ramp
    up in order, so each slice gets early and late ones alike). One split for the worker
    processes of `--workers` and the separate runs of `--shard K/N`: N shards drive what one run
    would, each conversation once."""
    return ids[index::count]


def shares(config: DriverConfig, workers: int) -> list[tuple[int, ...]]:
    """Each worker's conversation numbers (share_of); no empty shares."""
    ids = conversation_ids(config)
    return [share for share in (share_of(ids, w, workers) for w in range(workers)) if share]


def pool_shares(connections: str, workers: int) -> list[str]:
    """Each worker's --connections: a shared pool of N is shared out (each worker is a process with a
    pool of its own), so the run holds N connections in all, as asked; other policies are per round."""
    policy, size = parse_connections(connections)
    if policy != "pool":
        return [connections] * workers
    return [f"pool={max(1, size // workers + (1 if w < size % workers else 0))}" for w in range(workers)]


@dataclasses.dataclass(eq=False)
class _Worker:
    index: int
    conversation_ids: tuple[int, ...]
    process: anyio.abc.Process | None = None
    pending: bytearray = dataclasses.field(default_factory=bytearray)
    eof: bool = False
    final: list[RoundOutcome] | None = None  # the worker's own outcomes, once it reported them
    derived: list[RoundOutcome] = dataclasses.field(default_factory=list)  # from its events, in case it never does
    send_lock: anyio.Lock = dataclasses.field(default_factory=anyio.Lock)
    started: bool = False  # its Start was sent
    ready: bool = False  # it said Ready, or ended
    drain: bool = False


class ShardedDriver:
    def __init__(
        self,
        config: DriverConfig,
        prompts: PromptSource,
        observe: Observe,
        *,
        workers: int,
        run_dir: Path,
        origin: float,
        judge: Judge | None = None,
        emit: Callable[[ev.Event], None] | None = None,
        forward_sse: bool = False,
    ) -> None:
        """`observe` sees every event a worker streams (already in its segment), the SSE reads too
        with `forward_sse`; `emit` gets the few events the parent makes itself (a worker that
        ended badly), for the run log."""
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.config = config
        self.prompts = prompts
        self.observe = observe
        self.emit = emit
        self.origin = origin
        self.judge = judge
        self.forward_sse = forward_sse
        self.run_dir = Path(run_dir)
        self.workers = [_Worker(index, share) for index, share in enumerate(shares(config, workers))]
        self._connections = pool_shares(config.connections, len(self.workers))
        self.in_flight: dict[tuple[int, int], InFlightRound] = {}
        self._stop = anyio.Event()
        # Set once every worker has made its driver (or ended): a bench window starts its clock then.
        self.ready = anyio.Event()
        self._tasks: anyio.abc.TaskGroup | None = None
        self._failure_judgements: anyio.abc.TaskGroup | None = None  # in run(): failed rounds being judged
        self._decode = msgspec.json.Decoder(FromWorker)

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    @stop_requested.setter
    def stop_requested(self, value: bool) -> None:
        # Stops every worker: unlike the Driver's flag it also cuts rounds in flight (they stay in
        # `in_flight`, for the caller to count), as a Ctrl-C does to a Driver's run.
        if value:
            self._stop.set()

    @property
    def outcomes(self) -> list[RoundOutcome]:
        return [o for w in self.workers for o in (w.final if w.final is not None else w.derived)]

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self.workers if w.process is not None]

    def drain(self) -> None:
        """What `stop_requested = True` is to a Driver: no new round starts anywhere, the rounds in
        flight run to their end, and `run()` returns once every worker has ended. A later stop
        still cuts them."""
        for worker in self.workers:
            worker.drain = True
            if worker.started and self._tasks is not None:  # else it is told right after its Start
                self._tasks.start_soon(self._send, worker, Drain())

    def cpu_seconds(self) -> list[float | None]:
        """Each worker's CPU time so far (user + system, from /proc: Linux), None where not read."""
        return [process_cpu_seconds(w.process.pid) if w.process is not None else None for w in self.workers]

    async def run(self) -> list[RoundOutcome]:
        try:
            # Outside the workers' group: a failure judged as the last worker ends is waited for
            # (each judgement bounded by the judge budget), not cut with the workers' tasks.
            async with anyio.create_task_group() as self._failure_judgements:
                async with anyio.create_task_group() as self._tasks:
                    async with anyio.create_task_group() as workers:
                        if self.emit is not None:  # the judge's own loop: its lag makes its readings late
                            self._tasks.start_soon(measure_loop_lag, self._report_own_lag)
                        for worker in self.workers:
                            workers.start_soon(self._run_worker, worker)
                    self._tasks.cancel_scope.cancel()
        finally:
            self._failure_judgements = None
        return self.outcomes

    def _report_own_lag(self, max_ms: float, p99_ms: float) -> None:
        assert self.emit is not None
        self.emit(ev.LoopLag(t=time.monotonic() - self.origin, max_ms=max_ms, p99_ms=p99_ms,
                             in_flight=len(self.in_flight), judge=True))

    async def _run_worker(self, worker: _Worker) -> None:
        start = Start(
            index=worker.index,
            config=dataclasses.replace(self.config, conversation_ids=worker.conversation_ids,
                                       connections=self._connections[worker.index]),
            prompts=self.prompts, origin=self.origin, segment=segment_name(worker.index),
            run_dir=str(self.run_dir), judge_lead_s=None if self.judge is None else float(self.judge.lead_s),
            forward_sse=self.forward_sse,
        )
        try:
            # Its own session: a terminal's Ctrl-C goes to the parent alone, which stops the workers
            # in order (told, then signalled), even while a worker is still importing.
            worker.process = await anyio.open_process([sys.executable, "-m", "repro.load.shard_worker"], stdin=subprocess.PIPE,
                                                      stdout=subprocess.PIPE, stderr=None, start_new_session=True)
            await self._send(worker, start)
            worker.started = True
            if worker.drain:
                await self._send(worker, Drain())
            async with anyio.create_task_group() as judging:
                judging.start_soon(self._stop_when_asked, worker)
                await self._pump(worker, judging)
                judging.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self._stop_worker(worker)
            self._mark_ready(worker)  # a worker that ended is not waited for

    async def _stop_when_asked(self, worker: _Worker) -> None:
        await self._stop.wait()
        await self._send(worker, Stop())

    async def _send(self, worker: _Worker, message: msgspec.Struct) -> None:
        """A message on the worker's stdin; one that cannot go (the worker is gone) is dropped."""
        process = worker.process
        if process is None or process.stdin is None:
            return
        async with worker.send_lock:
            try:
                await process.stdin.send(encoder.encode(message) + b"\n")
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass

    async def _pump(self, worker: _Worker, judging: anyio.abc.TaskGroup | None) -> None:
        """Read the worker's messages until its stdout ends. Judge requests start in `judging`
        (None while stopping: the worker releases its own waits then)."""
        stdout = worker.process.stdout
        pending = worker.pending
        while not worker.eof:
            try:
                pending += await stdout.receive(1 << 16)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                worker.eof = True
                break
            end = pending.rfind(b"\n") + 1
            if end:
                messages = self._decoded(bytes(pending[:end]))
                del pending[:end]
                for message in messages:
                    self._handle(worker, message, judging)

    def _decoded(self, lines: bytes) -> list:
        try:
            return self._decode.decode_lines(lines)
        except (msgspec.DecodeError, msgspec.ValidationError):
            # One bad line must not cost the others; the worker's segment has the full record.
            messages = []
            for line in lines.splitlines():
                try:
                    messages.append(self._decode.decode(line))
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
            return messages

    def _handle(self, worker: _Worker, message, judging: anyio.abc.TaskGroup | None) -> None:
        kind = type(message)
        if kind is ev.SSEReceived:  # by far the most frequent, when forwarded at all
            self.observe(message)
            return
        if kind is JudgeRequest or kind is PrepareRequest:
            if judging is not None and self.judge is not None:
                judging.start_soon(self._judge, worker, message)
            return
        if kind is Ready:
            self._mark_ready(worker)
            return
        if kind is Finished:
            worker.final = message.outcomes
            return
        if kind is ev.RoundStarted:
            self.in_flight[(message.conv, message.round)] = InFlightRound(message.conv, message.round, message.t,
                                                                          worker.index)
        elif kind in _ENDS:
            self.in_flight.pop((message.conv, message.round), None)
            worker.derived.append(outcome_of(message))
        self.observe(message)
        if kind is ev.RoundFailed and self.judge is not None and self._failure_judgements is not None:
            self._failure_judgements.start_soon(self._judge_failure, message)

    def _mark_ready(self, worker: _Worker) -> None:
        worker.ready = True
        if all(w.ready for w in self.workers):
            self.ready.set()

    async def _judge(self, worker: _Worker, request: JudgeRequest | PrepareRequest) -> None:
        try:
            with anyio.move_on_after(self.config.judge_budget):
                if type(request) is JudgeRequest:
                    await self.judge.stalled(request.stall)
                else:
                    await self.judge.prepare(request.t)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
                await self._send(worker, Judged(request.id))

    async def _judge_failure(self, failed: ev.RoundFailed) -> None:
        with anyio.move_on_after(self.config.judge_budget):
            await self.judge.failed(failed)

    async def _stop_worker(self, worker: _Worker) -> None:
        """Ask, then SIGTERM, then SIGKILL, each bounded; read what the worker still says meanwhile
        (its outcomes). Its segment stays on disk whatever happens."""
        process = worker.process
        if process is None:
            return
        if process.returncode is None:
            with anyio.move_on_after(STOP_GRACE_S):
                await self._send(worker, Stop())
                await self._pump(worker, None)
                await process.wait()
        for escalate, wait in ((process.terminate, TERM_GRACE_S), (process.kill, KILL_WAIT_S)):
            if process.returncode is None:
                try:
                    escalate()
                except ProcessLookupError:
                    pass
                with anyio.move_on_after(wait):
                    await process.wait()
        with anyio.move_on_after(0.2):
            await process.aclose()
        if worker.final is None and self.emit is not None:
            self.emit(ev.Note(t=time.monotonic() - self.origin, level="warning",
                              message=f"worker {worker.index} (conversations {_ids_text(worker.conversation_ids)}) "
                                      f"ended with status {process.returncode} before reporting its rounds; "
                                      "its rounds are counted from its events"))


_ENDS = frozenset((ev.RoundDone, ev.RoundFailed, ev.RoundAbandoned))


def outcome_of(end: ev.RoundDone | ev.RoundFailed | ev.RoundAbandoned) -> RoundOutcome:
    """A round's outcome from its last event: what the parent counts for a worker that ended
    without reporting its own, and `repro report` for the rounds of several shards (those carry a little more, such as the mean inter-token latency)."""
    if type(end) is ev.RoundDone:
        return RoundOutcome(end.conv, end.round, "completed", ttft_s=end.ttft_s, duration_s=end.duration_s,
                            max_gap_s=end.max_gap_s, events=end.events)
    if type(end) is ev.RoundFailed:
        return RoundOutcome(end.conv, end.round, "failed", duration_s=end.duration_s, events=end.events, error=end.error)
    return RoundOutcome(end.conv, end.round, "stalled", duration_s=end.duration_s, events=end.events,
                        error=f"stalled {end.phase}")


def process_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process from /proc/PID/stat (Linux); None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _ids_text(ids: tuple[int, ...]) -> str:
    return ", ".join(map(str, ids[:5])) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
