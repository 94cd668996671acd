"""A real harness watched for its whole life (`repro wrap`): its rounds read from the kernel, its
stalls judged live.

The harness runs as our child (repro.io.harness_child: its own process group, its descendants
followed, SIGINT/SIGTERM passed to it first, stopped by pid), or is attached to by pid (`--pid`:
not ours to signal or stop). With `--inject FAULT`, repro's fault proxy runs in front of the first
hop and the harness is pointed at it (repro.session.harness_injection): the proxy becomes the
first hop, named `proxy`.

Every POLL_S seconds a watcher thread reads the TCP connections of the harness and its
descendants to the hops (probes.sockets.connections_of: the kernel's tcp_info) and turns each
connection's byte counters into rounds:

- a request: the bytes the peer acknowledged (`bytes_acked`) grew while no request was open (or
  the open one had been answered: HTTP/1.1 sends the next request only after the last answer);
- its first byte: the bytes received grew after it (a send newer than the last receive, within one
  poll, is a request still unanswered);
- its last byte: the last time they grew; the round ends when the next request on that
  connection begins, or the connection closes, or the harness ends.

Each is a run-log event (RoundStarted, FirstByte, RoundDone; RoundFailed for a connection closed
on a request with no answer, RoundAbandoned for a stall still stuck when its connection went: one
with no byte of its answer, or a stream a verdict judged stopped), so `repro report` draws
the harness's timeline, one lane a connection. The times are the kernel's (`last_data_sent/recv`
ages) to within a poll, and two rounds within one poll are seen as one; what the bytes carried
(HTTP status, tokens) is not read, so a RoundDone's status and counts are None (left out).

A stall: a connection with a request outstanding and no byte either way for `stall_after`.
Outstanding means sent with nothing received since; or bytes received and the connection still
watched by a thread of the harness (blocked reading it, or in its event loop's set), read from
/proc (probes.threads) only when a connection has gone quiet: an answer the harness finished
reading may leave the socket unwatched (httpx), and that round is done. Each stall is judged once,
in a judge thread, one after another, by triage (repro.live.triage: a window of hop metrics,
fresh canaries per hop and per API, the harness family's sockets and threads); its verdicts are
recorded with the evidence they came from (so `repro report` re-judges them alike) and printed as
panels at once. A quiet answer is only a stall if a hop is found holding it (Bun and Node keep an
idle connection watched, so an answer read to its end looks the same) and the harness has not sent
a request since, on that connection (its next) or on another (what it waits on now: a verdict is
not told apart by connection, so it goes to the latest request); a stall with no verdict is
recorded as a note. With --stop-on-verdict, stalls still queued once a verdict stops the harness
are left unjudged: the stop itself changes what a judgement would see.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import msgspec
from rich.console import Console

from probes.sockets import SocketReadError, connections_of, hop_of
from probes.threads import process_threads
from repro.core import events as ev
from repro.core.exits import EXIT_INTERRUPTED, exit_for_sides
from repro.core.hop import Hop, origin_of, unique_hops
from repro.core.socket_state import SocketState
from repro.core.verdict import Verdict
from repro.core.wire_api import Api
from repro.io.harness_child import STOP_GRACE_S, ChildEnd, HarnessChild, alive, descendants, run_bounded
from repro.io.runlog import RunLogWriter
from repro.live.triage import TriageResult, judging_failure, triage
from repro.reporting.terminal import verdict_panel
from repro.session.harness_injection import Injection, rendered_config
from repro.session.lifecycle import default_run_dir, redacted, versions

POLL_S = 0.25  # how often the harness's sockets are read: the bound, at most every 250 ms
INJECTED_PROXY = "proxy"  # the hop name of the fault proxy --inject puts in front (as `repro run`)
EXIT_BOUND = 124  # wrap's own bound ended the harness (as timeout(1) says it)
JUDGE_SLACK_S = 10.0  # beyond a judgement's window and canaries: its socket and thread reads


@dataclass(frozen=True)
class WrapSettings:
    hops: tuple[Hop, ...]
    argv: tuple[str, ...] = ()  # the harness command; empty with `attach`
    attach: int | None = None  # --pid: a running harness, watched, never signalled
    stall_after: float = 30.0
    inject: str | None = None  # a proxy fault spec (proxies.spec), already checked
    config_template: Path | None = None
    cwd: Path | None = None  # the harness's working folder (the rendered config goes there)
    apis: tuple[Api, ...] = ("chat",)
    api_keys: dict[str, str | None] = field(default_factory=dict)
    model: str = "default"  # the canaries' model
    bound: float | None = None  # --max-time: the harness stopped after this long
    stop_on_verdict: bool = False  # stop the harness once a stall has a verdict
    window: float = 2.0  # each judgement's window (triage's)
    canary_timeout: float = 3.0
    out: Path | None = None


@dataclass
class Round:
    """One request on one connection, as its byte counters showed it."""

    number: int
    started_t: float
    first_byte_t: float | None = None
    last_byte_t: float | None = None
    judged: bool = False  # its stall has been handed to the judge (once a round)
    stall: Stall | None = None  # that stall


@dataclass
class Connection:
    """One TCP connection of the harness family to a hop, by its local address."""

    conv: int  # its lane: connections numbered as first seen, from 1
    local: str
    remote: str
    hop: str | None
    pid: int
    acked: int = 0
    received: int = 0
    rounds: int = 0
    last_request_t: float | None = None  # when its latest request began
    open: Round | None = None  # the round in progress, if any
    socket: SocketState | None = None  # the last read

    def to_dict(self) -> dict[str, Any]:
        return {"conv": self.conv, "local": self.local, "remote": self.remote, "hop": self.hop, "pid": self.pid,
                "rounds": self.rounds}


@dataclass
class Stall:
    conv: int
    round: int
    hop: str | None
    phase: str
    stalled_for_s: float
    t: float
    started_t: float = 0.0  # when its request began
    verdicts: list[Verdict] = field(default_factory=list)
    judged: bool = False
    result: TriageResult | None = None
    error: str | None = None  # the judgement that could not be made, and why
    not_judged: str | None = None  # why it was left unjudged (the harness stopped on an earlier verdict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"conv": self.conv, "round": self.round, "hop": self.hop, "phase": self.phase,
                               "stalled_for_s": round(self.stalled_for_s, 3), "t": round(self.t, 3),
                               "verdicts": [v.to_dict() for v in self.verdicts]}
        if self.result is not None:
            out["ruled_out"] = self.result.ruled_out
            out["canaries"] = {hop: c.outcome.to_dict() for hop, c in self.result.canaries.items()}
        if self.error:
            out["error"] = self.error
        if self.not_judged:
            out["not_judged"] = self.not_judged
        return out


@dataclass
class WrapResult:
    exit: int
    harness_pid: int
    harness_exit: int | None  # None: attached, its code is not ours to read
    bounded: bool
    interrupted: int | None
    stalls: list[Stall]
    connections: list[Connection]
    run_dir: Path
    hops: list[Hop]

    @property
    def verdicts(self) -> list[Verdict]:
        return [v for s in self.stalls for v in s.verdicts]

    def to_dict(self) -> dict[str, Any]:
        return {"exit": self.exit, "harness_pid": self.harness_pid, "harness_exit": self.harness_exit, "bounded": self.bounded,
                "interrupted": self.interrupted, "run_dir": str(self.run_dir),
                "hops": [h.to_dict() for h in self.hops],
                "verdicts": [v.to_dict() for v in self.verdicts], "stalls": [s.to_dict() for s in self.stalls],
                "connections": [c.to_dict() for c in self.connections]}


SECRET_NAME = re.compile(r"key|token|secret|passw|auth", re.IGNORECASE)
SECRET_VALUE = re.compile(r"^(sk-|Bearer\s)", re.IGNORECASE)


def redacted_argv(argv: Sequence[str]) -> list[str]:
    """The command as the run log records it: the value of a flag or variable named like a secret
    (`--api-key X`, `--api-key=X`, `ANTHROPIC_API_KEY=X`, `-H 'Authorization: ...'`) and anything
    that looks like a key (`sk-...`) replaced, so that no key reaches the log."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        name, eq, _value = arg.partition("=")
        header, colon, _ = arg.partition(":")
        if i > 0 and argv[i - 1].startswith("-") and SECRET_NAME.search(argv[i - 1]) and "=" not in argv[i - 1]:
            out.append("<redacted>")
        elif eq and SECRET_NAME.search(name):
            out.append(f"{name}=<redacted>")
        elif colon and SECRET_NAME.search(header) and " " not in header:
            out.append(f"{header}: <redacted>")
        elif SECRET_VALUE.search(arg):
            out.append("<redacted>")
        else:
            out.append(arg)
    return out


def exit_of(end: ChildEnd | None, verdicts: Sequence[Verdict]) -> int:
    """Interrupted: 130; else a verdict's side, as `repro run` says it (10/11/12); else our bound: 124;
    else the harness's own code (attached: 0, its code is not ours to read)."""
    if end is not None and end.interrupted is not None:
        return EXIT_INTERRUPTED
    if verdicts:
        return exit_for_sides([v.side for v in verdicts], trouble=True)
    if end is not None and end.bounded:
        return EXIT_BOUND
    return end.code if end is not None else 0


class WrappedHarness:
    """One `repro wrap` (see the module's docstring): `run()` returns its WrapResult."""

    def __init__(self, settings: WrapSettings, *, console: Console | None = None) -> None:
        self.s = settings
        self.console = console or Console(stderr=True)
        self.run_dir = Path(settings.out) if settings.out else default_run_dir()
        self.origin = time.monotonic()
        self.log = RunLogWriter(self.run_dir)
        self._log_lock = threading.Lock()
        self.hops: list[Hop] = list(settings.hops)
        self.harness_pid = settings.attach or 0
        self.connections: dict[str, Connection] = {}
        self.stalls: list[Stall] = []
        self._stalls: queue.Queue[tuple[Stall, list[int]] | None] = queue.Queue()
        self._judging = threading.Thread(target=self._judge_each, name="wrap-judge", daemon=True)
        self._done = threading.Event()
        self._verdict = threading.Event()
        self._interrupt = threading.Event()  # SIGINT/SIGTERM heard by us (not by run_bounded's forwarding)
        self._signalled: signal.Signals | None = None  # the first of them

    def now(self) -> float:
        return time.monotonic() - self.origin

    def emit(self, event: ev.Event) -> None:
        with self._log_lock:
            self.log.write(event)

    # --- the run -------------------------------------------------------------------------------

    def run(self) -> WrapResult:
        try:
            with ExitStack() as stack:
                stack.enter_context(self._hearing_signals())
                injection = self._inject(stack)
                self._judging.start()
                self.emit(ev.RunStarted(t=self.now(), config=redacted(self._config()), versions=versions(),
                                        monotonic_origin=self.origin, wall_clock_origin=time.time(), hops=self.hops))
                end, code = self._watch(stack, injection)
                verdicts = [v for s in self.stalls for v in s.verdicts]
                result = WrapResult(exit_of(end, verdicts), self.harness_pid, code, end.bounded if end else False,
                                    end.interrupted if end else None, self.stalls,
                                    sorted(self.connections.values(), key=lambda c: c.conv), self.run_dir, self.hops)
                reason = (f"interrupted by {signal.Signals(result.interrupted).name}" if result.interrupted
                          else "bound" if result.bounded else "harness ended")
                self.emit(ev.RunFinished(t=self.now(), summary={**result.to_dict(), "rounds_stalled": len(self.stalls)},
                                         reason=reason))
                return result
        finally:
            self._stalls.put(None)  # the judge thread ends, whatever ended the run
            self.log.close()

    def _config(self) -> dict[str, Any]:
        return {"command": "wrap", "argv": redacted_argv(self.s.argv), "attach": self.s.attach,
                "stall_after": self.s.stall_after, "inject": self.s.inject, "apis": list(self.s.apis),
                "model": self.s.model, "window": self.s.window, "bound": self.s.bound}

    def _inject(self, stack: ExitStack) -> Injection | None:
        """With --inject: the fault proxy in front of the first hop, made the first hop itself."""
        if not self.s.inject:
            return None
        from proxies import start_proxy

        first = self.hops[0]
        proxy = start_proxy(origin_of(first.url), self.s.inject, flow_log=self.run_dir / "proxy-flows.jsonl")
        stack.callback(proxy.stop)
        self.hops = unique_hops([Hop(INJECTED_PROXY, proxy.url + urlsplit(first.url).path, proxy.metrics_url, "proxy"),
                                 *self.hops], "--inject")
        self.console.print(f"fault proxy {proxy.url} ({self.s.inject}) in front of {first.name}", highlight=False)
        return Injection(proxy.url)

    @contextmanager
    def _hearing_signals(self) -> Iterator[None]:
        """SIGINT and SIGTERM end the watch cleanly, what was seen recorded: attached, for the
        whole watch (the harness is not ours: it never hears them from us); with a harness we
        start, before it starts and after it ended (while it runs, run_bounded passes them to it
        first). Only the main thread may set handlers; elsewhere this does nothing."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def heard(number: int, _frame: Any) -> None:
            if self._signalled is None:
                self._signalled = signal.Signals(number)
            self._interrupt.set()

        before = {sig: signal.signal(sig, heard) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)

    def _watch(self, stack: ExitStack, injection: Injection | None) -> tuple[ChildEnd | None, int | None]:
        if self.s.attach is not None:
            pid = self.s.attach

            def family() -> list[int]:
                return [pid, *descendants(pid)]

            watcher = threading.Thread(target=self._poll, args=(family,), name="wrap-watch", daemon=True)
            watcher.start()
            end = self._wait_attached()
            self._finish(watcher)
            return end, None
        argv, env = list(self.s.argv), dict(os.environ)
        if self.s.cwd is not None:
            env["PWD"] = str(Path(self.s.cwd).resolve())  # as a shell sets it: opencode finds its project by it
        if injection is not None:
            argv, env = injection.command(argv), injection.environment(env)
            if self.s.config_template is not None:
                stack.enter_context(rendered_config(self.s.config_template, self.s.cwd or Path.cwd(), injection))
        if self._interrupt.is_set():  # a signal while the proxy started: the harness is not started at all
            return ChildEnd(0, interrupted=self._signalled), None
        child = HarnessChild.start(argv, env=env, cwd=self.s.cwd)
        self.harness_pid = child.pid
        watcher = threading.Thread(target=self._poll, args=(child.family,), name="wrap-watch", daemon=True)
        watcher.start()
        with self._stopping_on_verdict(child):
            end = run_bounded(child, self.s.bound)
        self._finish(watcher)
        if end.interrupted is None and self._signalled is not None:  # heard after the harness ended
            end = ChildEnd(end.code, bounded=end.bounded, interrupted=self._signalled)
        return end, end.code

    def _wait_attached(self) -> ChildEnd:
        """Until the attached process is gone, our bound passes, SIGINT or SIGTERM comes (heard by
        `_hearing_signals`, never passed on: the harness runs on), or (asked) a verdict lands.
        Its exit code is not ours to read: 0 stands for it."""
        pid = self.s.attach
        deadline = None if self.s.bound is None else self.origin + self.s.bound
        while alive(pid) and not (self.s.stop_on_verdict and self._verdict.is_set()):
            if self._interrupt.wait(0.05):
                self.console.print(f"{self._signalled.name if self._signalled else 'a signal'}: the watch ends; "
                                   f"pid {pid} runs on (attached: not ours to signal)", highlight=False)
                return ChildEnd(0, interrupted=self._signalled)
            if deadline is not None and time.monotonic() >= deadline:
                return ChildEnd(0, bounded=True)
        return ChildEnd(0)

    @contextmanager
    def _stopping_on_verdict(self, child: HarnessChild) -> Iterator[None]:
        """With --stop-on-verdict: the harness stopped (by pid, bounded) once a verdict is in."""
        if not self.s.stop_on_verdict:
            yield
            return
        stop = threading.Event()

        def stopper() -> None:
            while not stop.is_set():
                if self._verdict.wait(0.1):
                    child.stop(min(STOP_GRACE_S, 2.0))
                    return

        thread = threading.Thread(target=stopper, name="wrap-stop-on-verdict", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(STOP_GRACE_S * 2 + 1)

    def _finish(self, watcher: threading.Thread) -> None:
        """The watcher stopped, the rounds still open closed, a judgement under way waited for (bounded)."""
        self._done.set()
        watcher.join(5.0)
        self._stalls.put(None)
        # Each stall still queued or being judged gets its judgement, each bounded.
        waiting = sum(1 for s in self.stalls if not s.judged and s.error is None)
        self._judging.join(max(1, waiting) * (self.s.window + self.s.canary_timeout * 2 + JUDGE_SLACK_S))
        t = self.now()
        for conn in self.connections.values():
            self._close_round(conn, t, gone=True)

    # --- reading the sockets ------------------------------------------------------------------

    def _poll(self, family: Callable[[], list[int]]) -> None:
        last_failure: str | None = None
        while not self._done.is_set():
            started = time.monotonic()
            try:
                self._read(family())
            except Exception as exc:  # a read that fails is said (once while it fails alike), never the watcher's end
                said = f"socket read failed: {type(exc).__name__}: {exc}"
                if said != last_failure:
                    self.emit(ev.Note(t=self.now(), level="warning", message=said))
                last_failure = said
            self._done.wait(max(0.0, POLL_S - (time.monotonic() - started)))

    def _read(self, pids: list[int]) -> None:
        t = self.now()
        seen: set[str] = set()
        for pid in pids:
            try:
                found = connections_of(pid, timeout=1.0)
            except SocketReadError:
                continue  # gone since, or a descendant of another user: its sockets are not read
            for sock in found:
                hop = hop_of(sock.remote, self.hops)
                if hop is None or sock.state != "ESTABLISHED" or sock.bytes_acked is None:
                    continue
                seen.add(sock.local)
                self._update(self._connection(sock, hop, pid), sock, t)
        for local, conn in self.connections.items():
            if local not in seen:
                self._close_round(conn, t, gone=True)

    def _connection(self, sock: SocketState, hop: str, pid: int) -> Connection:
        conn = self.connections.get(sock.local)
        if conn is None or conn.remote != sock.remote:  # a port reused by a new connection: a new lane
            conn = Connection(len(self.connections) + 1, sock.local, sock.remote, hop, pid)
            self.connections[sock.local] = conn
        return conn

    def _update(self, conn: Connection, sock: SocketState, t: float) -> None:
        """One read of a connection: a new request, a first byte, a last byte. Within one poll the
        kernel's ages order them: a send after the last receive is a request still unanswered."""
        conn.socket = sock
        acked, received = sock.bytes_acked or 0, sock.bytes_received or 0
        sent_t = min(t, t - (sock.last_data_sent_s or 0.0))
        recv_t = min(t, t - (sock.last_data_recv_s or 0.0))
        sent, got = acked > conn.acked, received > conn.received
        conn.acked, conn.received = acked, received
        answered_then_asked = sent and got and sent_t > recv_t  # an answer came, then the next request
        if answered_then_asked:
            # The bytes are the open round's (its first, or its tail); with none open (a connection
            # first seen now: its first answer and next request fell within one poll), an earlier
            # round's, never the new request's: it has no byte of an answer yet.
            self._byte(conn, recv_t)
            got = False
        if sent and (conn.open is None or conn.open.first_byte_t is not None):
            self._close_round(conn, t, gone=False)
            conn.rounds += 1
            conn.open = Round(conn.rounds, sent_t)
            conn.last_request_t = sent_t
            self.emit(ev.RoundStarted(t=sent_t, conv=conn.conv, round=conn.rounds, prompt_chars=0, messages=0))
        if got and conn.open is not None:
            self._byte(conn, recv_t)
        self._check_stall(conn, sock, t)

    def _byte(self, conn: Connection, recv_t: float) -> None:
        r = conn.open
        if r is None:
            return
        if r.first_byte_t is None:
            # The kernel dates only the last byte: the first came after the request, by then.
            r.first_byte_t = max(r.started_t, recv_t)
            self.emit(ev.FirstByte(t=r.first_byte_t, conv=conn.conv, round=r.number, status=0))
        r.last_byte_t = max(r.started_t, recv_t)

    def _close_round(self, conn: Connection, t: float, *, gone: bool) -> None:
        """The open round ends: done with its last byte; abandoned, a stall still stuck when its
        connection went (a stream judged stopped, by a verdict, with no byte since); or, a request
        answered by no byte on a connection that closed, failed."""
        r = conn.open
        if r is None:
            return
        conn.open = None
        stuck_mid_stream = (gone and r.stall is not None and bool(r.stall.verdicts) and r.first_byte_t is not None
                            and (r.last_byte_t or r.first_byte_t) <= r.stall.t)
        if stuck_mid_stream:
            last = r.last_byte_t or r.first_byte_t or r.started_t
            self.emit(ev.RoundAbandoned(t=t, conv=conn.conv, round=r.number, phase="mid-stream",
                                        stalled_for_s=round(t - last, 3), duration_s=round(t - r.started_t, 3)))
        elif r.first_byte_t is not None:
            end = r.last_byte_t or r.first_byte_t
            self.emit(ev.RoundDone(t=end, conv=conn.conv, round=r.number, status=None, reply_chars=None,
                                   duration_s=round(end - r.started_t, 3), events=None, max_gap_s=None,
                                   ttfb_s=round(r.first_byte_t - r.started_t, 3)))
        elif r.judged:  # a stall, still stuck when the connection went (a harness stopped, or gave up)
            self.emit(ev.RoundAbandoned(t=t, conv=conn.conv, round=r.number, phase="before-first-byte",
                                        stalled_for_s=round(t - r.started_t, 3), duration_s=round(t - r.started_t, 3)))
        elif gone:
            self.emit(ev.RoundFailed(t=t, conv=conn.conv, round=r.number, phase="before-first-byte",
                                     error="the connection ended with no byte of an answer",
                                     duration_s=round(t - r.started_t, 3), local=conn.local))

    # --- stalls ------------------------------------------------------------------------------

    def _check_stall(self, conn: Connection, sock: SocketState, t: float) -> None:
        r = conn.open
        if r is None or r.judged:
            return
        quiet = min(sock.last_data_recv_s if sock.last_data_recv_s is not None else float("inf"),
                    sock.last_data_sent_s if sock.last_data_sent_s is not None else float("inf"))
        if quiet < self.s.stall_after or quiet == float("inf"):
            return
        if r.first_byte_t is not None and (self._asked_since(conn, r.started_t) or not _watched(conn.pid, sock.inode)):
            # Read to its end and left, or the harness has sent a request since, on another of its
            # connections (opencode's title request, answered beside its first rounds): the answer
            # is complete, the connection idles in its pool.
            self._close_round(conn, t, gone=False)
            return
        r.judged = True
        phase = "before-first-byte" if r.first_byte_t is None else "mid-stream"
        stall = Stall(conn.conv, r.number, conn.hop, phase, quiet, t, started_t=r.started_t)
        r.stall = stall
        self.stalls.append(stall)
        self.emit(ev.RoundStalled(t=t, conv=conn.conv, round=r.number, phase=phase, stalled_for_s=round(quiet, 3),
                                  started_t=r.started_t, last_progress_t=r.last_byte_t or r.started_t,
                                  last_byte_t=r.last_byte_t, local=conn.local))
        self.emit(ev.SocketSample(t=t, socket=sock, conv=conn.conv, round=r.number))
        self.console.print(f"stall: connection {conn.conv} to {conn.hop}, round {r.number}, {phase}: no byte "
                           f"for {quiet:.1f} s", highlight=False)
        # The family's processes that hold connections to the hops and still run: theirs are the
        # sockets and threads the judgement reads.
        pids = sorted(pid for pid in {c.pid for c in list(self.connections.values())} if alive(pid))
        self._stalls.put((stall, pids or [conn.pid]))

    def _asked_since(self, conn: Connection, t: float) -> bool:
        """The harness began a request on another of its connections after `t`: what it waits on
        now is that one. A quiet answer older than the harness's latest request is not what it
        waits on (its stalls' verdicts, engine-wide or a hop's, are not told apart by connection:
        they go to the latest)."""
        return any(c.last_request_t is not None and c.last_request_t > t
                   for c in list(self.connections.values()) if c is not conn)

    def _record_evidence(self, stall: Stall, result: TriageResult, started: float) -> None:
        """What the judgement saw, into the run log, so that `repro report` re-judges the stall from
        the same evidence: each hop's last sample and canary, the family's sockets (the stalled
        connection's marked with its round) and the hops' side of them."""
        local = next((c.local for c in list(self.connections.values()) if c.conv == stall.conv), None)
        for sample in result.latest.values():
            self.emit(_shifted(sample, started))
        for canary in result.canaries.values():
            self.emit(_shifted(canary, started))
        for read in result.sockets:
            for sample in read.connections:
                own = sample.socket.local == local
                self.emit(_shifted(sample, started, conv=stall.conv if own else None,
                                   round=stall.round if own else None))
            for sample in [*read.hop_side, *read.chain]:
                self.emit(_shifted(sample, started))

    def _judge_each(self) -> None:
        """The judge thread: the stalls one after another, as they come, until the watch ends."""
        while True:
            item = self._stalls.get()
            if item is None:
                return
            stall = item[0]
            if self.s.stop_on_verdict and self._verdict.is_set():
                # The harness is being stopped: its connections close, the hops drop what they held,
                # so a judgement now would judge the stop, not the stall.
                stall.not_judged = "not judged: the harness was stopped on an earlier verdict (--stop-on-verdict)"
                self.emit(ev.Note(t=self.now(), level="info",
                                  message=f"connection {stall.conv} round {stall.round}: {stall.not_judged}"))
                continue
            self._judge(*item)

    def _judge(self, stall: Stall, pids: list[int]) -> None:
        """Triage of the stack with the harness family's sockets and threads, for this one stall."""
        started = self.now()
        try:
            result = anyio.run(lambda: triage(self.hops, model=self.s.model, window=self.s.window,
                                              interval=min(1.0, self.s.window / 2),
                                              canary_timeout=self.s.canary_timeout, pids=pids, apis=self.s.apis,
                                              api_key=self.s.api_keys.get(self.s.apis[0]), api_keys=self.s.api_keys))
        except Exception as exc:  # the judge's own failure is said, the watch goes on
            stall.error = judging_failure(exc)
            self.emit(ev.Note(t=self.now(), level="error", message=stall.error))
            self.console.print(f"[red]{stall.error}[/]", highlight=False)
            return
        stall.result, stall.judged = result, True
        self._record_evidence(stall, result, started)
        # An answer read to its end and a stream that stopped look the same from a socket: a quiet
        # answer is a stall only if a hop is found holding it (an engine not serving, a proxy with it
        # in flight), and not if the harness has since sent a request, on that connection (its next)
        # or on another (what it waits on now, which the verdict is about: `_asked_since`).
        conn = next((c for c in list(self.connections.values()) if c.conv == stall.conv), None)
        moved_on = stall.phase == "mid-stream" and conn is not None and (
            conn.rounds > stall.round or self._asked_since(conn, stall.started_t))
        hops = {h.name for h in self.hops}
        for verdict in result.verdicts:
            if stall.phase == "mid-stream" and (moved_on or verdict.where not in hops):
                continue
            own = msgspec.structs.replace(verdict, conversation=stall.conv, round=stall.round,
                                          stalled_for_s=verdict.stalled_for_s or round(stall.stalled_for_s, 3))
            stall.verdicts.append(own)
            self.emit(ev.VerdictReached(t=self.now(), verdict=own))
            self.console.print(verdict_panel(own))
        if not stall.verdicts:
            line = (f"connection {stall.conv} round {stall.round}: the harness has sent a request since: "
                    "its answer was read, no stall judged" if moved_on and result.verdicts else
                    f"connection {stall.conv} round {stall.round}: no hop holds it and every fresh path "
                    "answers: no stall judged")
            self.emit(ev.Note(t=self.now(), level="info", message=line))
            self.console.print(line, highlight=False)
        else:
            self._verdict.set()


def _shifted(event: ev.Event, by: float, **changes: Any) -> ev.Event:
    """A judgement's event on wrap's clock (triage's starts at its own start)."""
    return msgspec.structs.replace(event, t=round(by + event.t, 3), **changes)


def _watched(pid: int, inode: int | None) -> bool:
    """A thread of `pid` waits to read this socket (blocked on it, or in an event loop's set)."""
    if inode is None:
        return True  # not told apart: counted as awaited, so a stall is never missed
    threads = process_threads(pid, 0.0, stacks=False)
    return any(inode in thread.sockets for thread in threads.threads)
