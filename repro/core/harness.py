"""The harness's side as the kernel shows it: the driver's own socket at a stall, or a harness's
connections and threads read from outside (triage --pid), as evidence entries and the facts a
verdict takes from them.

What each connection of a harness says (`use_of`), from its kernel figures and its threads:
- unread: bytes wait in its receive queue: the harness is not reading (client side, the harness);
- unacked: our bytes sit unacknowledged: the hop stopped reading them (names the hop);
- waiting: its last bytes went out after the last ones came in (a request), acknowledged, and
  nothing came back: a request outstanding on it (names the hop);
- read: an answer began after the request, and a thread of the harness is blocked reading this
  very socket (read/recv/poll/select on its fd): the harness waits on it (names the hop);
- answered: an answer came after the request and nobody is seen reading it: an idle pooled
  connection whose last request was answered, or an answer that stopped mid-way; alone, the
  kernel cannot tell which, so it never names a hop. The hop's side can (a hop on this host):
  its process serving the connection holding bytes unread for over a second stopped (names the
  hop). An event loop watching it (epoll) leaves it unsure: awaited, or kept watched while idle
  (aiohttp and plain asyncio streams do; httpx on anyio does not); it then names nobody;
- unused (opened, nothing sent), closing (the hop or the harness closed it), connecting (SYN sent).

A hop is named only on positive evidence: unacked, waiting, read, bytes held on the hop's side.
A harness whose every connection is idle (answered and not watched or read, unused, closing; or
none open) has no request outstanding on the network: with every hop serving, it waits in its
own code (`harness-idle`), and its threads (wait channel, system call, Python stack) show where.

A harness seen in use during triage's window is not stuck, and neither named nor idle: a byte
in or out on a connection within the window (a request just sent is no wedge), a connection gone
between triage's looks, or its threads woken between them (context switches counted up: a harness
blocked in its own code wakes for nothing; one running rounds between the looks does).

What triage observed of the stuck request comes from here too (`phase`, `stalled_for_s`): the
connection the verdict names (before the first byte: nothing came after the request; after it:
the kernel cannot tell mid-stream from after the last event, so the phase stays unknown), or
how long an idle harness has used none of its connections.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from repro.core import events as ev
from repro.core.evidence import Evidence, Fact, fact
from repro.core.hop_chain import FOLLOWED, ChainTrace, follow, step_text, stop_text
from repro.core.socket_state import SocketState
from repro.core.text import number
from repro.core.thread_state import ProcessThreads, ThreadState

HARNESS = "harness"  # a verdict's `where` when the harness itself holds the stall (triage --pid)
NAMING_USES = ("unacked", "waiting", "read")  # the connection uses that name the hop it goes to
HOP_UNREAD = "hop-unread"  # named too: the hop's process serving it holds bytes it does not read
IDLE_USES = ("answered", "unused", "closing")
UNACKED_FOR_S = 1.0  # our bytes unacknowledged at least this long: not a send still in progress
UNREAD_FOR_S = 1.0  # bytes unread in a harness's receive queue with nothing new for this long: it is not reading
CONFIDENCE_ORDER = ("low", "medium", "high")


@dataclass
class HarnessIdle:
    """The harness has no request outstanding on any connection: what its verdict says."""

    confidence: str
    text: str  # what it holds and where its threads wait
    stalled_for_s: float | None  # no byte in or out on any of its connections for this long; None: none open


@dataclass
class SocketReading:
    facts: list[Fact]
    unread: str | None = None  # why the reader is not reading, when bytes wait in its receive queue
    waiting_hop: str | None = None  # the hop a harness's connections wait on, on positive evidence (triage --pid)
    waiting: str = ""
    # The hop the harness's stuck connections go to (the first hop); waiting_hop differs from it when
    # the request was followed through the hops' sockets to a hop behind it (repro.core.hop_chain).
    waiting_on: str | None = None
    chain: ChainTrace | None = None
    stuck: SocketState | None = None  # the harness's connection stuck longest, to the hop named
    # What was observed of the stuck request on the connection named (triage --pid); None: unknown.
    phase: str | None = None
    stalled_for_s: float | None = None
    idle: HarnessIdle | None = None  # set when the harness has no request outstanding anywhere
    moved: str | None = None  # a harness's connections carried bytes during the window: in use, not stuck
    # A harness's request outstanding on a connection to no hop given (a tool server, a database):
    # it waits on the network, outside the stack; no hop is named for it.
    elsewhere: str | None = None
    # A connection to a hop whose answer began and stopped, that the harness's event loop watches:
    # the rest of an answer awaited, or an idle pooled connection the loop keeps watched (aiohttp and
    # plain asyncio streams do; httpx on anyio does not). Neither the hop nor the harness is named.
    unsure: str | None = None


def ago(seconds: float) -> str:
    return f"{seconds:.1f} s"


def times_text(sock: SocketState) -> str:
    """When its last bytes came in and went out, each as the kernel reported it; one it did not
    report is left out (never `?`)."""
    said = ([f"last byte received {ago(sock.last_data_recv_s)} ago"] if sock.last_data_recv_s is not None else []) + \
           ([f"sent {ago(sock.last_data_sent_s)} ago"] if sock.last_data_sent_s is not None else [])
    return ", ".join(said) + "; " if said else ""


def sent_after_received(sock: SocketState) -> bool:
    """Its last bytes went out after the last ones came in (or something went out and nothing
    ever came): a request that has no answer yet."""
    if sock.bytes_received == 0:
        return (sock.bytes_acked or 0) > 1 or bool(sock.wqueue)  # 1: the SYN alone, nothing sent
    sent, received = sock.last_data_sent_s, sock.last_data_recv_s
    return sent is not None and received is not None and sent < received


def readers_of(sock: SocketState, threads: ProcessThreads | None) -> tuple[list[ThreadState], list[ThreadState]]:
    """(threads blocked reading this socket, threads whose event loop watches it) of its process."""
    if threads is None or sock.inode is None:
        return [], []
    holding = [t for t in threads.threads if sock.inode in t.sockets]
    return [t for t in holding if not t.via_epoll], [t for t in holding if t.via_epoll]


def use_of(sock: SocketState, threads: ProcessThreads | None) -> str:
    """What one connection of a harness is doing (see the module's docstring)."""
    if sock.rqueue:
        return "unread"
    if sock.state == "SYN_SENT":
        return "connecting"
    if sock.state != "ESTABLISHED":
        return "closing"
    if sock.wqueue and (sock.last_ack_recv_s is None or sock.last_ack_recv_s >= UNACKED_FOR_S):
        return "unacked"
    if sent_after_received(sock):
        return "waiting"
    if sock.bytes_received == 0:
        return "unused"
    blocked, _ = readers_of(sock, threads)
    return "read" if blocked else "answered"


def quiet_for(sock: SocketState) -> float | None:
    """Seconds since any byte went in or out on it (None: the kernel did not say)."""
    times = [s for s in (sock.last_data_sent_s, sock.last_data_recv_s if sock.bytes_received else None) if s is not None]
    return min(times) if times else None


def connection_key(sample: ev.SocketSample) -> tuple:
    sock = sample.socket
    return (sample.conv, sample.round, sock.pid, sock.inode, sock.local, sock.remote)


def latest_per_socket(samples: Sequence[ev.SocketSample]) -> list[ev.SocketSample]:
    """One sample per connection, the latest: triage reads a pid's sockets more than once."""
    latest: dict[tuple, ev.SocketSample] = {}
    for sample in samples:
        latest[connection_key(sample)] = sample
    return sorted(latest.values(), key=lambda s: s.t)


@dataclass
class LastLook:
    """A harness's connections at triage's last read of each pid, and what changed since the earlier reads."""

    current: list[ev.SocketSample]  # the last read's connections
    earlier: dict[tuple, ev.SocketSample]  # the latest earlier sample of each connection
    gone: list[ev.SocketSample]  # connections an earlier read saw and the last one did not: closed meanwhile


def last_look(samples: Sequence[ev.SocketSample], threads: dict[int, ProcessThreads]) -> LastLook:
    """Split a harness's socket samples at each pid's last read: the one its threads were read
    with (same `t`), else its latest sample's time (a last read that found no connection is then
    not seen)."""
    by_pid: dict[int | None, list[ev.SocketSample]] = {}
    for sample in samples:
        by_pid.setdefault(sample.socket.pid, []).append(sample)
    look = LastLook([], {}, [])
    for pid, found in by_pid.items():
        read = threads.get(pid) if pid is not None else None
        last_t = read.t if read is not None and read.read else max(s.t for s in found)
        current = latest_per_socket([s for s in found if s.t >= last_t])
        before = latest_per_socket([s for s in found if s.t < last_t])
        keys = {connection_key(s) for s in current}
        look.current += current
        look.earlier.update((connection_key(s), s) for s in before)
        look.gone += [s for s in before if connection_key(s) not in keys]
    look.current.sort(key=lambda s: s.t)
    return look


def unread_for_long(sample: ev.SocketSample, earlier: ev.SocketSample | None) -> bool:
    """Bytes unread in a harness's receive queue that stay: unread at an earlier read too, or
    nothing new for UNREAD_FOR_S (a reading harness drains its queue within milliseconds)."""
    sock = sample.socket
    return bool(sock.rqueue) and ((earlier is not None and bool(earlier.socket.rqueue))
                                  or (sock.last_data_recv_s or 0.0) >= UNREAD_FOR_S)


def thread_text(thread: ThreadState, depth: int = 3) -> str:
    """'S in futex (futex_do_wait); Python: acquire (lock.py:3) <- main (h.py:9)' for one thread."""
    call = ("system call not read" if thread.syscall is None else "running" if thread.syscall == "running"
            else "not in a system call" if thread.syscall == "none" else f"in {thread.syscall}")
    text = (f"{thread.state} " if thread.state else "") + call + (f" ({thread.wchan})" if thread.wchan else "")
    if thread.stack:
        text += "; Python: " + " <- ".join(thread.stack[:depth]) + (" <- ..." if len(thread.stack) > depth else "")
    return text


def thread_label(pid: int, thread: ThreadState) -> str:
    return f"pid {pid} thread {thread.tid}" + (f" ({thread.name})" if thread.name else "")


def _shown_threads(read: ProcessThreads, limit: int = 6, quiet: int = 2) -> list[ThreadState]:
    """The threads worth showing, up to `limit`: those waiting on a socket, then those with a Python
    stack; of the others (a runtime's pool and JIT threads parked in futex), the first `quiet` by tid
    only, as they say nothing of where a request waits."""
    telling = sorted((t for t in read.threads if t.sockets or t.stack), key=lambda t: (not t.sockets, not t.stack, t.tid))
    quiet_ones = sorted((t for t in read.threads if not (t.sockets or t.stack)), key=lambda t: t.tid)
    return (telling + quiet_ones[:max(0, quiet - len(telling))])[:limit]


def thread_facts(reads: Sequence[ProcessThreads]) -> list[Fact]:
    facts = []
    for read in reads:
        if not read.read:
            facts.append(fact(HARNESS, f"pid {read.pid} threads", f"not read: {read.error or 'none listed'}", read.t))
            continue
        for thread in _shown_threads(read):
            facts.append(fact(HARNESS, thread_label(read.pid, thread), thread_text(thread), read.t))
        if len(read.threads) > len(_shown_threads(read)):
            facts.append(fact(HARNESS, f"pid {read.pid} threads", f"{len(read.threads)} in all, "
                              f"{len(_shown_threads(read))} shown", read.t))
        if read.stacks_error:
            facts.append(fact(HARNESS, f"pid {read.pid} Python stacks", f"not read: {read.stacks_error}", read.t))
    return facts


def _use_words(sock: SocketState, use: str, blocked: Sequence[ThreadState] = (), watched: Sequence[ThreadState] = (),
               threads: ProcessThreads | None = None) -> str:
    if use == "waiting":
        return "request sent and acknowledged, nothing received since"
    if use == "unacked":
        return f"{number(sock.wqueue)} B of ours unacknowledged"
    if use == "unused":
        return "opened, nothing sent on it"
    if use == "closing":
        return f"{sock.state}: closed by one side"
    if use == "read":
        return (f"an answer began after the request; thread {', '.join(str(t.tid) for t in blocked)} is blocked "
                "reading it")
    # answered
    quiet = quiet_for(sock)
    words = ("its last request answered (bytes came after it), nothing queued either way"
             + (f", quiet {ago(quiet)}" if quiet is not None else ""))
    if watched:
        return words + (f"; the event loop of thread {', '.join(str(t.tid) for t in watched)} watches it for reading "
                        "(waiting for the rest of an answer, or an idle pooled connection: a loop may keep those "
                        "watched; the kernel cannot tell)")
    if threads is not None and threads.syscalls_read:
        return words + "; no thread reads it"
    return words + "; its threads were not read, so a stalled answer is not ruled out"


def hop_side(samples: Sequence[ev.SocketSample]) -> list[ev.SocketSample]:
    """The hops' side of a harness's connections (SocketState.serves set), as triage's last read saw it."""
    side = [s for s in samples if s.socket.serves is not None]
    last_t = max((s.t for s in side), default=None)
    return [s for s in side if s.t == last_t]


def traced_side(samples: Sequence[ev.SocketSample]) -> list[ev.SocketSample]:
    """The hops' processes behind a harness's connections (SocketState.traced), at their last read."""
    side = [s for s in samples if s.socket.traced]
    last_t = max((s.t for s in side), default=None)
    return [s for s in side if s.t == last_t]


def _in_an_engine(trace: ChainTrace, evidence: Evidence) -> bool:
    """The request stopped in an engine that answers fresh requests: which kind of fault that is
    (the engine lost it? a client-side wedge cannot hold it there) is not decided here, so such a
    trace names nothing and the verdict stays as the hops in front of the engine make it."""
    return trace.where in {h.name for h in evidence.hops if h.role == "engine"}


def _follow_the_request(reading: SocketReading, traced: Sequence[ev.SocketSample], evidence: Evidence) -> None:
    """The stuck request followed from the harness's connection through the hops on this host
    (repro.core.hop_chain): the hop where it stopped holds it, not the first hop in front of it.
    Each hop's socket facts go in as evidence; a trace that went out of sight says so."""
    if reading.stuck is None or not traced:
        return
    trace = follow(reading.stuck, [s.socket for s in traced])
    if trace is None or _in_an_engine(trace, evidence):
        return
    _record_trace(reading, trace, traced[0].t)
    reading.waiting += f"; {FOLLOWED}, {stop_text(trace)}"
    reading.waiting_hop = trace.where


def _record_trace(reading: SocketReading, trace: ChainTrace, t: float) -> None:
    """Each hop's socket facts, and where the request stopped, as evidence entries."""
    for step in trace.steps:
        reading.facts.append(fact(step.name, "socket", step_text(step), t, pid=step.inbound.pid))
    reading.facts.append(fact(trace.where, FOLLOWED, stop_text(trace), t))
    reading.chain = trace


def held_by_hop(sock: SocketState, side: Sequence[ev.SocketSample]) -> str | None:
    """Bytes that the hop process serving this harness connection holds unread, and has for at least
    UNREAD_FOR_S (a working proxy reads within milliseconds): the hop stopped, positive evidence.
    Its end of our connection holding our request, or its upstream holding the answer."""
    for end in side:
        theirs = end.socket
        if theirs.serves == sock.local and theirs.rqueue and (theirs.last_data_recv_s or 0.0) >= UNREAD_FOR_S:
            what = "of our request" if theirs.remote == sock.local else f"from {theirs.remote}"
            return (f"{sock.hop}'s process (pid {theirs.pid}) serving {sock.local} has {number(theirs.rqueue)} B "
                    f"{what} unread, the last of them received {ago(theirs.last_data_recv_s)} ago")
    return None


def quiet_enough(evidence: Evidence) -> float:
    """How long a harness's connection must have carried no byte to count as stuck: the window
    triage watched (its stall_after), less a little for the reads' own timing; at least a second."""
    return max(1.0, evidence.stall_after - 0.2)


def _socket_fact(sample: ev.SocketSample, hop: str, who: str, pid: int | None = None) -> Fact:
    """`pid`: the process `who` names first, when it is one triage read (not the driver)."""
    sock = sample.socket
    return fact(hop, "socket", (
        f"{who} {sock.local} -> {sock.remote} {sock.state}: {times_text(sock)}unread {number(sock.rqueue)} B, unacknowledged "
        f"{number(sock.wqueue)} B"), sample.t, pid=pid)


def woke(reads: Sequence[ProcessThreads]) -> list[str]:
    """How each pid's threads changed between its first and last read: woken (context switches
    counted up), started or ended. A harness blocked in its own code does none of these; one
    running rounds between triage's looks does (a timer, a connection opened and closed)."""
    first: dict[int, ProcessThreads] = {}
    last: dict[int, ProcessThreads] = {}
    for read in reads:
        if read.read:
            first.setdefault(read.pid, read)
            last[read.pid] = read
    said = []
    for pid, end in last.items():
        begin = first[pid]
        if begin is end:
            continue
        before = {t.tid: t.switches for t in begin.threads}
        after = {t.tid: t.switches for t in end.threads}
        wakeups = sum(after[tid] - before[tid] for tid in after.keys() & before.keys()
                      if after[tid] is not None and before[tid] is not None)
        changed = before.keys() ^ after.keys()
        if wakeups > 0 or changed:
            said.append(f"pid {pid}'s threads woke {wakeups} time(s)" + (f", {len(changed)} started or ended"
                                                                         if changed else "")
                        + f" between triage's looks ({end.t - begin.t:.1f} s apart)")
    return said


def socket_facts(evidence: Evidence, first_hop: str) -> SocketReading:
    """What the sockets say: the driver's own at the stall (a run), then a harness's connections
    and threads as triage's last look saw them (triage --pid)."""
    reading = SocketReading([])
    own = latest_per_socket([s for s in evidence.sockets if s.conv is not None and not s.socket.traced])
    for sample in own:
        reading.facts.append(_socket_fact(sample, first_hop, "the driver"))
        if sample.socket.rqueue and reading.unread is None:
            reading.unread = (f"{number(sample.socket.rqueue)} bytes wait unread in the driver's receive queue on its "
                              f"connection to {first_hop} ({sample.socket.local}): the driver is not reading what arrived")
    _follow_the_round(reading, evidence, own, first_hop)
    _harness_side(reading, evidence)
    return reading


def _follow_the_round(reading: SocketReading, evidence: Evidence, own: Sequence[ev.SocketSample],
                      first_hop: str) -> None:
    """`repro run`: the stalled round's own connection followed through the hops on this host (the
    live judge reads them at the stall, marked with the round). Named only when the request
    stopped behind the first hop: at the first hop, the round's verdict says so already."""
    key = (evidence.stall.conv, evidence.stall.round)
    mine = [s for s in own if (s.conv, s.round) == key]
    traced = traced_side([s for s in evidence.sockets if s.socket.traced and (s.conv, s.round) == key])
    if not mine or not traced:
        return
    stuck = msgspec.structs.replace(mine[-1].socket, hop=first_hop)
    trace = follow(stuck, [s.socket for s in traced])
    if trace is None or trace.where == first_hop or _in_an_engine(trace, evidence):
        return
    _record_trace(reading, trace, traced[0].t)
    reading.waiting_hop, reading.waiting_on, reading.waiting = trace.where, first_hop, f"{FOLLOWED}, {stop_text(trace)}"


def _harness_side(reading: SocketReading, evidence: Evidence) -> None:
    """A harness read from outside: each connection's use, then one reading of them all: a hop
    named, in use, unsure, or idle."""
    threads = {read.pid: read for read in evidence.threads}  # the last read of each pid
    last_reads = list(threads.values())
    look = last_look([s for s in evidence.sockets if s.conv is None and s.socket.serves is None
                      and not s.socket.traced], threads)
    side = hop_side(evidence.sockets)
    traced = traced_side([s for s in evidence.sockets if s.conv is None])
    stuck_in_hop: dict[str, str] = {}  # harness connection's local address -> the bytes its hop holds
    still = quiet_enough(evidence)
    named: dict[str, list[tuple[str, SocketState]]] = {}
    harness_socks: list[tuple[str, SocketState, str]] = []
    moved: list[str] = []
    for sample in look.current:
        sock = sample.socket
        hop = sock.hop or "client"
        who = f"pid {sock.pid}"
        reading.facts.append(_socket_fact(sample, hop, who, pid=sock.pid))
        # Unread bytes count on a connection of the stack only: a harness's database connection
        # with bytes waiting says nothing about its LLM calls.
        if reading.unread is None and sock.hop and unread_for_long(sample, look.earlier.get(connection_key(sample))):
            reading.unread = (f"{number(sock.rqueue)} bytes wait unread in {who}'s receive queue on its connection to "
                              f"{hop} ({sock.local}): {who} is not reading what arrived")
        use = use_of(sock, threads.get(sock.pid))
        harness_socks.append((hop, sock, use))
        quiet = quiet_for(sock)
        if quiet is not None and quiet < still:
            # A byte in or out within the window watched: in use, not stuck (a request just sent
            # is not a wedge; an idle-looking one just answered is not idle for long).
            moved.append(f"{who} {sock.local} to {hop} carried a byte {ago(quiet)} ago")
        elif sock.hop and (use in NAMING_USES or held_by_hop(sock, side)):
            held = held_by_hop(sock, side)
            if held:
                stuck_in_hop[sock.local] = held
                for end in side:
                    if end.socket.serves == sock.local and (end.socket.rqueue or end.socket.wqueue):
                        reading.facts.append(_socket_fact(end, sock.hop, f"{sock.hop}'s pid {end.socket.pid}"))
            named.setdefault(sock.hop, []).append((use if use in NAMING_USES else HOP_UNREAD, sock))
        elif use in NAMING_USES and reading.elsewhere is None:
            how = _use_words(sock, use, readers_of(sock, threads.get(sock.pid))[0])
            received = ("no byte received on it" if not sock.bytes_received
                        else f"no byte received for {ago(sock.last_data_recv_s)}" if sock.last_data_recv_s is not None
                        else None)
            reading.elsewhere = (f"{who} waits on {sock.remote}, no hop of the stack ({how})"
                                 + (f", {received}" if received else ""))
    for sample in look.gone:
        moved.append(f"pid {sample.socket.pid} {sample.socket.local} to {sample.socket.hop or 'client'} closed during "
                     "the window")
    if not look.current and not look.gone and not evidence.threads:
        return
    reading.facts.extend(thread_facts(last_reads))
    moved += woke(evidence.threads)
    if moved:
        reading.moved = "; ".join(moved[:4]) + (f" (and {len(moved) - 4} more)" if len(moved) > 4 else "")
        reading.facts.append(fact(HARNESS, "moved during the window", reading.moved, evidence.stall.t
                                  if not look.current else look.current[-1].t))
    watched = [(hop, sock, readers_of(sock, threads.get(sock.pid))[1]) for hop, sock, use in harness_socks
               if use == "answered" and sock.hop]
    watched = [(hop, sock, loops) for hop, sock, loops in watched if loops]
    if named:
        _name_the_hop(reading, named, stuck_in_hop)
        _follow_the_request(reading, traced, evidence)
    elif moved:
        pass
    elif watched:
        reading.unsure = "; ".join(
            f"pid {sock.pid}'s connection {sock.local} to {hop}: {_use_words(sock, 'answered', (), loops, None)}"
            for hop, sock, loops in watched)
        reading.facts.append(fact(HARNESS, "watched by its event loop", reading.unsure, look.current[-1].t))
        reading.stalled_for_s = max((quiet_for(sock) or 0.0) for _, sock, _ in watched)  # its last byte, N s ago
    else:
        reading.idle = _idle(harness_socks, last_reads, threads)


def _name_the_hop(reading: SocketReading, named: dict[str, list[tuple[str, SocketState]]],
                  stuck_in_hop: dict[str, str]) -> None:
    """The hop most of the harness's outstanding requests wait on, and what was observed of them."""
    hop, entries = max(named.items(), key=lambda item: len(item[1]))
    socks = [s for _, s in entries]
    longest = max((s.last_data_recv_s or 0.0) for s in socks)
    pids = sorted({s.pid for s in socks if s.pid is not None})
    reasons = []
    for use, words in (("waiting", "wait (request sent and acknowledged, nothing received since)"),
                       ("unacked", "hold our bytes unacknowledged (the hop stopped reading them)"),
                       ("read", "are read by a blocked thread after an answer began and stopped"),
                       (HOP_UNREAD, "go to a hop process that holds bytes it does not read")):
        count = sum(1 for u, _ in entries if u == use)
        if count:
            reasons.append(f"{count} connection(s) {words}")
    held = [stuck_in_hop[s.local] for s in socks if s.local in stuck_in_hop]
    if held:
        reasons.append("; ".join(held[:2]))
    reading.waiting_hop = reading.waiting_on = hop
    reading.waiting = (f"pid {', '.join(map(str, pids)) or '?'}: {'; '.join(reasons)}; no byte received for up to "
                       f"{ago(longest)}, nothing unread in its own receive queue")
    # What triage saw of the stuck request: on the connection stuck longest.
    use, sock = max(entries, key=lambda e: quiet_for(e[1]) or 0.0)
    reading.stuck = sock
    reading.stalled_for_s = quiet_for(sock)
    reading.phase = "before-first-byte" if use in ("waiting", "unacked") or sent_after_received(sock) else None


def _idle(harness_socks: list[tuple[str, SocketState, str]], reads: Sequence[ProcessThreads],
          threads: dict[int, ProcessThreads]) -> HarnessIdle | None:
    """The harness with no request outstanding on any connection, or None when one may be."""
    confidence = "high"
    parts = []
    for hop, sock, use in harness_socks:
        if use not in IDLE_USES:
            return None  # connecting, or waiting on a connection to no hop of the stack: not idle
        read = threads.get(sock.pid)
        blocked, watched = readers_of(sock, read)
        if use == "answered":
            if watched:  # a connection outside the stack (one to a hop makes the reading unsure instead)
                confidence = _lower(confidence, "medium")
            elif read is None or not read.syscalls_read:
                confidence = _lower(confidence, "low")
        if sock.hop:
            parts.append(f"{hop} {sock.local}: {_use_words(sock, use, blocked, watched, read)}")
    # A thread blocked on any TCP connection of the harness (a database, an API outside the stack)
    # is waiting on the network: not idle.
    tcp = {s.inode for _, s, _ in harness_socks if s.inode is not None}
    for read in reads:
        for thread in read.threads:
            if not thread.via_epoll and tcp.intersection(thread.sockets):
                return None
    pids = sorted({r.pid for r in reads} | {s.pid for _, s, _ in harness_socks if s.pid is not None})
    who = f"pid {', '.join(map(str, pids))}"
    to_stack = [s for _, s, _ in harness_socks if s.hop]
    holds = (f"{who} has no request outstanding on any of its {len(to_stack)} connection(s) to the stack ("
             + "; ".join(parts) + ")") if to_stack else f"{who} has no connection open to any hop"
    waits = _where_threads_wait(reads)
    quiet = [q for q in (quiet_for(s) for s in to_stack) if q is not None]
    return HarnessIdle(confidence, f"{holds}: it is not waiting on the network; {waits}",
                       min(quiet) if quiet else None)


def _lower(current: str, to: str) -> str:
    return to if CONFIDENCE_ORDER.index(to) < CONFIDENCE_ORDER.index(current) else current


def _where_threads_wait(reads: Sequence[ProcessThreads]) -> str:
    said = []
    for read in reads:
        if not read.read:
            said.append(f"pid {read.pid}'s threads were not read ({read.error or 'none listed'})")
            continue
        shown = _shown_threads(read, 3)
        said.append(f"where pid {read.pid}'s threads wait: " + "; ".join(
            f"thread {t.tid}" + (f" ({t.name})" if t.name else "") + f" {thread_text(t, 2)}" for t in shown)
            + (f" (and {len(read.threads) - len(shown)} more thread(s))" if len(read.threads) > len(shown) else ""))
    return "; ".join(said) if said else "its threads were not read"
