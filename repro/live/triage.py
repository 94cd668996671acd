"""Triage a live hang without generating load: watch every hop for a window, send one canary
per hop, and judge where requests are stuck with the same classify as `repro run`.

Triage cannot see the harness's own stuck request, so it judges the stack as a whole: engines
hung, saturated or losing requests (server side); a hop that fails a fresh request or holds
requests while every engine sits idle (client side, at that hop); or nothing found, which is
itself evidence: every fresh path works, so a harness still stuck is stuck on its own reused
connections (a connection-level wedge).

Given the harness's process ids (`pids`), triage also reads that process's TCP connections from
the kernel (probes/sockets.py) at the evidence wave and once more at the end of the window, names
the hop each goes to by its remote address, and gives them to the verdict as ev.SocketSample
(conv None): a harness connection to a hop, established, its request acknowledged and nothing
received since, points at that hop even when every fresh path through it works. With them it
reads the process's threads (probes/threads.py: /proc's wait channels and system calls, py-spy's
Python stacks): a harness with no request outstanding on any connection, while every hop serves,
waits in its own code (`harness-idle`), and its threads show where.

Behind the harness's connections, the hops that run on this host are read too (probes/sockets.py
`hop_chain_of`: each process found by the other end of a connection, its connections out), so that a
stuck request is followed hop by hop to the hop that holds it (repro.core.hop_chain), not blamed on
the first hop in front of it (issue 31).

Triage watches no round of its own: a verdict's phase and stalled_for_s are what the harness's
sockets showed (the connection named: nothing received since its request, or the last byte N s
ago), or null, never the length of triage's window.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec

from probes.deployment import record_deployment
from probes.sampler import Sampler
from probes.sockets import SocketReadError, connections_of, hop_chain_of, hop_of, hop_side_of, process_name
from probes.threads import STACK_TIMEOUT_S, process_threads
from repro.core import events as ev
from repro.core.classify import classify
from repro.core.evidence_book import EvidenceBook
from repro.core.harness_outcome import mask_secrets
from repro.core.hop import Hop
from repro.core.thread_state import ProcessThreads
from repro.core.verdict import Verdict
from repro.core.wire_api import Api
from repro.live.evidence_wave import EvidenceWave, fresh_canaries


@dataclass
class PidSockets:
    """One read of a process's TCP connections: when (`t`, on triage's clock), what, or why not."""

    pid: int
    t: float
    connections: list[ev.SocketSample] = field(default_factory=list)
    error: str | None = None
    name: str | None = None  # the process's command name (/proc/PID/comm)
    # The hops' side of these connections (hops on this host): each one's end and its process's
    # connections holding bytes, marked with the harness connection they serve.
    hop_side: list[ev.SocketSample] = field(default_factory=list)
    # The hops' processes behind these connections on this host, hop by hop (probes.sockets.hop_chain_of):
    # what a stuck request is followed through (repro.core.hop_chain).
    chain: list[ev.SocketSample] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "t": round(self.t, 3), "error": self.error,
                "connections": [s.socket.to_dict() for s in self.connections],
                "hop_side": [s.socket.to_dict() for s in self.hop_side],
                "chain": [s.socket.to_dict() for s in self.chain]}


@dataclass
class TriageResult:
    hops: list[Hop]
    latest: dict[str, ev.ProbeSample]  # hop name -> last probe sample
    canaries: dict[str, ev.CanaryResult]  # hop name -> last canary
    verdict: Verdict | None  # None: nothing stuck that triage can see
    ruled_out: list[str]
    window_s: float
    sockets: list[PidSockets] = field(default_factory=list)  # the last read of each --pid, in the order given
    deployment: dict[str, dict[str, Any]] = field(default_factory=dict)  # hop -> probes.deployment record
    threads: list[ProcessThreads] = field(default_factory=list)  # the last read of each --pid's threads
    # With more than one wire API canaried: each API's own judgement (the fields above are the
    # first API's), from the same samples and sockets and that API's canaries.
    by_api: dict[str, ApiJudgement] = field(default_factory=dict)

    @property
    def verdicts(self) -> list[Verdict]:
        """Every verdict reached, the first API's first: what the exit status is made of."""
        if not self.by_api:
            return [self.verdict] if self.verdict else []
        return [j.verdict for j in self.by_api.values() if j.verdict is not None]

    def to_dict(self) -> dict[str, Any]:
        by_api = {"by_api": {api: j.to_dict() for api, j in self.by_api.items()}} if self.by_api else {}
        return {**self._fields(), **by_api}

    def _fields(self) -> dict[str, Any]:
        return {
            "window_s": self.window_s,
            "hops": [{**h.to_dict(), "sample": _builtins(self.latest.get(h.name)),
                      "canary": _builtins(self.canaries.get(h.name))} for h in self.hops],
            "verdicts": [self.verdict.to_dict()] if self.verdict else [],
            "ruled_out": self.ruled_out,
            "sockets": [p.to_dict() for p in self.sockets],
            "deployment": self.deployment,
            "threads": [t.to_dict() for t in self.threads],
        }


@dataclass
class ApiJudgement:
    """One wire API's canaries and verdict in a triage of several (`--api chat,messages`)."""

    canaries: dict[str, ev.CanaryResult]
    verdict: Verdict | None
    ruled_out: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"canaries": {hop: _builtins(c) for hop, c in self.canaries.items()},
                "verdicts": [self.verdict.to_dict()] if self.verdict else [], "ruled_out": self.ruled_out}


def _builtins(event: ev.ProbeSample | ev.CanaryResult | None) -> dict[str, Any] | None:
    if event is None:
        return None
    payload = event.snapshot if isinstance(event, ev.ProbeSample) else event.outcome
    return {**payload.to_dict(), "t": event.t}


def read_pid_sockets(pid: int, hops: Sequence[Hop], t: float,
                     read: Callable[[int], list[Any]] = connections_of) -> PidSockets:
    """One read of a process's connections, each named by the hop it goes to (None: no known hop).
    A process that cannot be read (gone since, say) is recorded with its error, never raised."""
    try:
        found = read(pid)
    except SocketReadError as exc:
        return PidSockets(pid, t, error=str(exc), name=process_name(pid))
    samples = [ev.SocketSample(t=t, socket=msgspec.structs.replace(s, hop=hop_of(s.remote, hops))) for s in found]
    # Connections to a hop first, in the hops' order; the others after them.
    order = {h.name: i for i, h in enumerate(hops)}
    samples.sort(key=lambda s: (order.get(s.socket.hop, len(order)), s.socket.remote))
    return PidSockets(pid, t, samples, name=process_name(pid))


def read_hop_side(read: PidSockets) -> list[ev.SocketSample]:
    """The hops' side of one read's connections, stamped with its time; none when it cannot be read."""
    try:
        ends = hop_side_of([s.socket for s in read.connections], harness_pid=read.pid)
    except SocketReadError:
        return []
    return [ev.SocketSample(t=read.t, socket=end) for end in ends]


def read_hop_chain(read: PidSockets, hops: Sequence[Hop]) -> list[ev.SocketSample]:
    """The hops' processes behind one read's connections, stamped with its time; none when unreadable."""
    try:
        found = hop_chain_of([s.socket for s in read.connections], hops, harness_pid=read.pid)
    except SocketReadError:
        return []
    return [ev.SocketSample(t=read.t, socket=s) for s in found]


def judging_failure(exc: BaseException) -> str:
    """One line for a judgement that raised: triage runs its reads in a task group, so the first
    real error is said, not the group, with how many more there were (secrets masked)."""
    more = 0
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        more += len(exc.exceptions) - 1
        exc = exc.exceptions[0]
    said = mask_secrets(" ".join(f"{type(exc).__name__}: {exc}".split()))
    return f"judging failed: {said}" + (f" (and {more} more)" if more else "")


async def triage(hops: list[Hop], *, model: str, window: float = 5.0, interval: float = 1.0,
                 canary_timeout: float = 3.0, api_key: str | None = None, pids: Sequence[int] = (),
                 apis: Sequence[Api] = ("chat",), api_keys: dict[str, str | None] | None = None) -> TriageResult:
    """`apis`: the wire APIs to canary on every hop, the harness's first. Each gets its own
    evidence book (the same samples and sockets, its own canaries) and its own judgement, so a
    path that fails on one API while another works through the same hop is a verdict of its own."""
    origin = time.monotonic()
    books = {api: EvidenceBook(hops, stall_after=window) for api in apis}
    book = books[apis[0]]

    def add(event: ev.Event) -> None:  # a sample or a socket read is evidence for every API
        for each in books.values():
            each.add(event)

    def now() -> float:
        return time.monotonic() - origin

    reads: dict[int, PidSockets] = {}
    threads: dict[int, list[ProcessThreads]] = {}  # every read of each pid's threads, in order
    stack_timeout = min(STACK_TIMEOUT_S, canary_timeout)

    async def read_sockets() -> None:
        for pid in pids:
            # In a worker thread: /proc and netlink reads are short and bounded, but not ours to block the loop on.
            t = now()
            read = await anyio.to_thread.run_sync(read_pid_sockets, pid, hops, t)
            read.hop_side = await anyio.to_thread.run_sync(read_hop_side, read)
            read.chain = await anyio.to_thread.run_sync(read_hop_chain, read, hops)
            reads[pid] = read
            for sample in [*read.connections, *read.hop_side, *read.chain]:
                add(sample)
            # Its threads right after its connections, stamped with the same `t` (one look: the judge
            # tells the last look's connections from earlier ones by it). py-spy is bounded by its own
            # deadline (a subprocess timeout), within the canary's.
            threads.setdefault(pid, []).append(await anyio.to_thread.run_sync(
                lambda pid=pid, t=t: process_threads(pid, t, stack_timeout=stack_timeout)))

    sampler = Sampler(hops, interval=interval, emit=add, origin=origin) if any(h.metrics_url for h in hops) else None

    async def sample_all() -> None:
        async with anyio.create_task_group() as tasks:
            if sampler is not None:
                tasks.start_soon(sampler.sample_now)
            if pids:
                tasks.start_soon(read_sockets)

    # One evidence wave, as the live judge gathers: an extra sample, the harness's connections, and
    # one bounded canary per hop.
    # Every API's canaries in that one wave (the extra sample and socket read once, with the first).
    keys = api_keys or {}
    waves = [EvidenceWave(hops, emit=books[api].add, now=now,
                          sample_all=sample_all if i == 0 and (sampler is not None or pids) else None,
                          canary=fresh_canaries(model=model, timeout=canary_timeout, api_key=keys.get(api, api_key),
                                                api=api),
                          canary_timeout=canary_timeout) for i, api in enumerate(apis)]

    async def gather_waves() -> None:
        since = now()
        async with anyio.create_task_group() as each:
            for wave in waves:
                each.start_soon(lambda wave=wave: wave.gather(since=since))

    deployment: dict[str, dict[str, Any]] = {}

    async def read_deployment() -> None:
        # Triage writes no run log: the record travels in its result (and --json).
        deployment.update(await record_deployment(hops, timeout=min(2.0, 0.8 * window), api_key=api_key))

    async with anyio.create_task_group() as tasks:
        if sampler is not None:
            tasks.start_soon(sampler.run)
        tasks.start_soon(read_deployment)  # within the window: bounded by its own deadline, well inside it
        # One canary per hop, in the middle of the window: never more than one per hop per interval.
        await anyio.sleep(window / 2)
        await gather_waves()
        await anyio.sleep(max(0.0, window - now()))
        tasks.cancel_scope.cancel()
    if sampler is not None or pids:
        with anyio.move_on_after(canary_timeout):
            await sample_all()  # the last look: metrics, and the harness's connections once more

    until = now()
    # The hang triage looks at is the stack's, not one of ours: a stand-in round that 'stalled' at
    # the window's start, judged as before any byte, on no particular connection. Its phase and
    # duration were not observed (round_watched=False): the verdict's come from the harness's sockets, or are null.
    stall = ev.RoundStalled(t=0.0, conv=0, round=0, phase="before-first-byte", stalled_for_s=round(until, 3),
                            started_t=0.0, last_progress_t=0.0)
    judged = {api: _judge(each, stall, until, tuple(read for pid in pids for read in threads.get(pid, ())))
              for api, each in books.items()}
    first = judged[apis[0]]
    latest = {name: samples[-1] for name, samples in book.samples.items() if samples}
    return TriageResult(hops, latest, first.canaries, first.verdict, first.ruled_out, window,
                        [reads[pid] for pid in pids if pid in reads], deployment,
                        [threads[pid][-1] for pid in pids if threads.get(pid)],
                        by_api=judged if len(apis) > 1 else {})


def _judge(book: EvidenceBook, stall: ev.RoundStalled, until: float,
           threads: tuple[ProcessThreads, ...]) -> ApiJudgement:
    """One API's judgement of the window: its book's evidence, classified."""
    evidence = dataclasses.replace(book.evidence_for(stall, until=until, driver_in_flight=0), threads=threads,
                                   round_watched=False)
    verdict = classify(evidence)
    canaries = {name: history[-1] for name, history in book.canaries.items() if history}
    # Every fresh path works and no hop holds anything: nothing triage can pin down, unless the
    # harness's own connection looks stuck (its event loop watches an answer that stopped).
    nothing_found = (verdict.kind == "connection-wedged" and verdict.where == "connection"
                     and not any(e["signal"] == "watched by its event loop" for e in verdict.evidence))
    return ApiJudgement(canaries, None if nothing_found else verdict, verdict.ruled_out)
