"""The harness's side as the kernel shows it: the driver's own socket at a stall, or a harness's
connections read from outside (triage --pid), as evidence entries and the two facts a verdict
takes from them (bytes left unread; connections waiting on one hop)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from repro.core import events as ev
from repro.core.evidence import Evidence, Fact, fact
from repro.core.text import number

# --- the harness's sockets and failed rounds --------------------------------------------------


@dataclass
class SocketReading:
    facts: list[Fact]
    unread: str | None = None  # why the reader is not reading, when bytes wait in its receive queue
    waiting_hop: str | None = None  # the hop a harness's connections wait on (triage --pid)
    waiting: str = ""
    waiting_sure: bool = True  # False: the connections are silent, maybe idle, not seen waiting


def ago(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds:.1f} s"


def is_waiting(sock) -> bool:
    """Established, nothing queued either way, and its last bytes went out after the last ones
    came in (or none ever came): a request that was sent and acknowledged, with no answer since."""
    if sock.state != "ESTABLISHED" or sock.rqueue or sock.wqueue:
        return False
    if sock.bytes_received == 0:
        return True
    sent, received = sock.last_data_sent_s, sock.last_data_recv_s
    return sent is not None and received is not None and sent < received


def is_silent(sock, at_least: float) -> bool:
    """Established, nothing queued, no byte in for a long time, its last bytes in after its last out:
    stuck mid-answer or idle between requests; the kernel cannot tell which."""
    return (sock.state == "ESTABLISHED" and not sock.rqueue and not sock.wqueue
            and sock.last_data_recv_s is not None and sock.last_data_recv_s >= at_least)


def latest_per_socket(samples: Sequence[ev.SocketSample]) -> list[ev.SocketSample]:
    """One sample per connection, the latest: triage reads a pid's sockets more than once."""
    latest: dict[tuple, ev.SocketSample] = {}
    for sample in samples:
        sock = sample.socket
        latest[(sample.conv, sample.round, sock.pid, sock.inode, sock.local, sock.remote)] = sample
    return sorted(latest.values(), key=lambda s: s.t)


def socket_facts(evidence: Evidence, first_hop: str) -> SocketReading:
    reading = SocketReading([])
    waiting: dict[str, list] = {}
    silent: dict[str, list] = {}
    for sample in latest_per_socket(evidence.sockets):
        sock = sample.socket
        ours = sample.conv is not None
        hop = first_hop if ours else (sock.hop or "client")
        who = "the driver" if ours else f"pid {sock.pid}"
        reading.facts.append(fact(hop, "socket", (
            f"{who} {sock.local} -> {sock.remote} {sock.state}: last byte received {ago(sock.last_data_recv_s)} ago, "
            f"sent {ago(sock.last_data_sent_s)} ago; unread {number(sock.rqueue)} B, unacknowledged "
            f"{number(sock.wqueue)} B"), sample.t))
        # Unread bytes count on a connection of the stack only: a harness's database connection
        # with bytes waiting says nothing about its LLM calls.
        if sock.rqueue and reading.unread is None and (ours or sock.hop):
            reading.unread = (f"{number(sock.rqueue)} bytes wait unread in {who}'s receive queue on its connection to "
                              f"{hop} ({sock.local}): {who} is not reading what arrived")
        if not ours and sock.hop:
            if is_waiting(sock):
                waiting.setdefault(sock.hop, []).append(sock)
            elif is_silent(sock, max(1.0, evidence.stall_after)):  # silent through the whole window watched
                silent.setdefault(sock.hop, []).append(sock)
    for group, words in ((waiting, "wait"), (silent, "are silent")):
        if not group:
            continue
        hop, socks = max(group.items(), key=lambda item: len(item[1]))
        longest = max((s.last_data_recv_s or 0.0) for s in socks)
        pids = sorted({s.pid for s in socks if s.pid is not None})
        reading.waiting_hop = hop
        reading.waiting = (f"pid {', '.join(map(str, pids)) or '?'}: {len(socks)} connection(s) {words}, no byte "
                           f"received for up to {longest:.0f} s, nothing queued either way"
                           + ("" if group is waiting else " (stuck mid-answer, or idle between requests: the kernel "
                              "cannot tell which)"))
        reading.waiting_sure = group is waiting
        break
    return reading
