"""One worker process of a sharded run (`python -m repro.load.shard_worker`, started by repro/load/shards.py).

It runs a Driver over its share of the conversations, under the run's global conversation
numbers and the run's clock origin, with its own event loop, garbage-collector policy, watchdog
and run-log segment. Its stalls are judged by the parent: the watchdog's judge here only forwards
the stall (and the early `prepare`) and waits for the parent's answer, bounded as any judge is.
Its failed rounds too, from the RoundFailed events it streams: the judge here leaves them alone.

It stops when the parent says so, when its stdin reaches EOF (the parent is gone, even by
SIGKILL: no orphan keeps driving a stack), or on SIGTERM. SIGINT it ignores: the parent starts it
in a session of its own, away from a terminal's Ctrl-C, and decides how its workers stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import os
import signal
import sys

import anyio
import msgspec

from repro.core import events as ev
from repro.io.runlog import RunLogWriter
from repro.load.driver import Driver
from repro.load.gc_policy import gc_tuned_for_streaming
from repro.load.shard_protocol import (
    STREAMED,
    Drain,
    Finished,
    Judged,
    JudgeRequest,
    PrepareRequest,
    Ready,
    ResumeWatch,
    Start,
    Stop,
    ToWorker,
    encoder,
)

_F_SETPIPE_SZ = 1031  # Linux: a larger pipe absorbs a burst of events while the parent is busy
_DRAIN_S = 1.0  # how long the last messages may take to leave once the driver stopped


class ParentChannel:
    """The worker's messages to the parent: buffered within a loop iteration, written by a
    non-blocking pipe transport, so a busy parent never blocks the driver's loop."""

    def __init__(self, transport: asyncio.WriteTransport) -> None:
        self._transport = transport
        self._buffer = bytearray()
        self._scheduled = False
        self._encode_into = encoder.encode_into
        self._loop = asyncio.get_running_loop()

    def send(self, message: msgspec.Struct) -> None:
        self._encode_into(message, self._buffer, -1)
        self._buffer += b"\n"
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        if self._transport.is_closing():  # the parent is gone: nobody to tell
            self._buffer.clear()
            return
        self._transport.write(bytes(self._buffer))
        self._buffer.clear()

    async def drain(self, timeout: float) -> None:
        self._flush()
        with anyio.move_on_after(timeout):
            while not self._transport.is_closing() and self._transport.get_write_buffer_size():
                await anyio.sleep(0.01)


class ParentJudge:
    """The worker driver's Judge (repro.load.watchdog.Judge): the parent judges. A stall is sent and
    waited for; a failure is not: the parent sees every RoundFailed on the pipe and judges it there."""

    def __init__(self, channel: ParentChannel, lead_s: float, budget: float) -> None:
        self.lead_s = lead_s
        self._channel = channel
        self._budget = budget
        self._ids = itertools.count()
        self._waiting: dict[int, anyio.Event] = {}
        self._closed = False

    async def prepare(self, t: float) -> None:
        # The watchdog bounds the judge call by the judge budget, but not prepare: bound it here.
        with anyio.move_on_after(self._budget):
            await self._ask(lambda id_: PrepareRequest(id_, t))

    async def stalled(self, stall: ev.RoundStalled) -> None:
        await self._ask(lambda id_: JudgeRequest(id_, stall))

    async def failed(self, failure: ev.RoundFailed) -> None:
        pass

    async def _ask(self, request) -> None:
        if self._closed:
            return
        id_ = next(self._ids)
        answered = self._waiting[id_] = anyio.Event()
        try:
            self._channel.send(request(id_))
            await answered.wait()
        finally:
            self._waiting.pop(id_, None)

    def answered(self, id_: int) -> None:
        event = self._waiting.get(id_)
        if event is not None:
            event.set()

    def close(self) -> None:
        """No answer will come (the parent stopped us or is gone): release every waiting stall."""
        self._closed = True
        for event in self._waiting.values():
            event.set()


async def _pipes(stdin_fd: int, stdout_fd: int) -> tuple[asyncio.StreamReader, asyncio.WriteTransport]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 28)  # the Start message carries the prompts
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(stdin_fd, "rb", buffering=0))
    with contextlib.suppress(OSError):
        fcntl.fcntl(stdout_fd, _F_SETPIPE_SZ, 1 << 20)
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(stdout_fd, "wb", buffering=0))
    return reader, transport


async def serve(stdin_fd: int, stdout_fd: int) -> None:
    reader, transport = await _pipes(stdin_fd, stdout_fd)
    decode = msgspec.json.Decoder(ToWorker).decode
    first = await reader.readline()
    if not first:
        return  # the parent went away before it said what to run
    start = decode(first)
    if not isinstance(start, Start):
        raise SystemExit(f"repro worker: expected a start message first, got {type(start).__name__}")
    channel = ParentChannel(transport)
    config = start.config
    log = RunLogWriter(start.run_dir, name=start.segment)
    judge = ParentJudge(channel, start.judge_lead_s, config.judge_budget) if start.judge_lead_s is not None else None
    write, send = log.write, channel.send
    streamed = STREAMED | {ev.SSEReceived} if start.forward_sse else STREAMED
    resumes = ResumeWatch()

    index = start.index
    replace = msgspec.structs.replace

    def emit(event: ev.Event) -> None:
        kind = type(event)
        if kind is ev.RoundStarted or kind is ev.LoopLag:  # whose loop drives the round, whose loop lagged
            event = replace(event, worker=index)
        write(event)
        if kind in streamed:
            send(event)
            resumes.sent(event)
        elif resumes.wanted(event):
            send(event)

    driver = Driver(config, start.prompts, emit, origin=start.origin, judge=judge)
    try:
        async with anyio.create_task_group() as tasks:

            def stop() -> None:
                driver.stop_requested = True
                if judge is not None:
                    judge.close()
                tasks.cancel_scope.cancel()

            def drain() -> None:
                driver.stop_requested = True  # the Driver's own stop: rounds in flight run to their end

            tasks.start_soon(_follow_parent, reader, decode, judge, stop, drain)
            tasks.start_soon(_stop_on_sigterm, stop)
            channel.send(Ready())
            with gc_tuned_for_streaming():
                await driver.run()
            tasks.cancel_scope.cancel()
        # Rounds cut by a stop have no outcome here; the parent saw them start and counts them.
        channel.send(Finished(driver.outcomes))
        await channel.drain(_DRAIN_S)
    finally:
        log.close()
        transport.close()


async def _follow_parent(reader: asyncio.StreamReader, decode, judge: ParentJudge | None, stop, drain) -> None:
    while line := await reader.readline():
        message = decode(line)
        if isinstance(message, Judged):
            if judge is not None:
                judge.answered(message.id)
        elif isinstance(message, Drain):
            drain()
        elif isinstance(message, Stop):
            break
    stop()  # told to, or EOF: the parent is gone


async def _stop_on_sigterm(stop) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM) as signals:
        async for _ in signals:
            stop()
            return


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # stdout is the channel to the parent: keep it for the messages and point fd 1 at stderr, so
    # a stray print from any library cannot corrupt the stream.
    stdout_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    anyio.run(serve, 0, stdout_fd, backend="asyncio")


if __name__ == "__main__":
    main()
