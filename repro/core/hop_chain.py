"""Where a stuck request stopped, followed through the hops' own sockets (triage --pid).

A chain of proxies (harness -> LiteLLM -> a company proxy -> router -> engines) shows the harness
only its connection to the first hop: a hop further down that holds the request leaves that
connection exactly as stuck. When the hops run on this host their sockets say more
(probes.sockets.hop_chain_of reads them): each hop received the request on its end of a
connection (`inbound`, its last byte in N s ago) and, if it passed it on, sent it on a connection
out within moments (a proxy forwards within milliseconds). `follow` matches them by time and
direction, hop by hop, until one of:
- unread: the request waits unread in the hop's receive queue (a frozen or stopped process);
- not-forwarded: the hop read it and sent nothing out since it came in (nothing came back either);
- answer-held: the hop's connection out has the answer back (or unread), after the last byte the
  hop passed to its client: the answer came back and was not passed on;
- not-visible: the hop's connection out goes to no process this host shows (another host, or
  another user's process without root): the trace ends; what is beyond is not known.
A connection out that waits (request sent, nothing back) or whose every byte back was passed on
leads to the next hop. Pure: the sockets in (SocketState, `traced`), a ChainTrace out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from repro.core.socket_state import SocketState
from repro.core.text import number

# Times are compared only between sockets of one process, read in one sock_diag dump: the same
# instant, up to tcp_info's granularity (ms, counted in jiffies: 10 ms at HZ=100). Wider, and a
# hop's previous request, sent just before ours came in, would pass for ours.
SAME_MOMENT_S = 0.02
FORWARD_WITHIN_S = 1.0  # a hop passes a request on within this long of receiving it, else it held it
HELD_FOR_S = 1.0  # bytes kept this long (unread, or not passed on) are held, not in passing
MAX_STEPS = 16


@dataclass(frozen=True)
class HopStep:
    """One hop the request reached: its end of the connection it came in on, and the connection
    it went out on (None: it did not go out)."""

    name: str  # the --hop whose URL it came in to, else its process and port ("haproxy:41000")
    inbound: SocketState
    outbound: SocketState | None


@dataclass(frozen=True)
class ChainTrace:
    steps: tuple[HopStep, ...]  # the hops reached, the first hop first; the last is where it stopped
    stop: str  # unread | not-forwarded | answer-held | not-visible
    beyond: str | None = None  # not-visible: where the last hop sent it (a --hop's name, else host:port)

    @property
    def where(self) -> str:
        """The hop that holds the request: where it stopped; out of sight, where it was sent."""
        return self.beyond if self.stop == "not-visible" and self.beyond else self.steps[-1].name

    @property
    def seen_to_the_end(self) -> bool:
        return self.stop != "not-visible"


def _port(address: str) -> str:
    return address.rsplit(":", 1)[-1]


def hop_name(inbound: SocketState) -> str:
    if inbound.hop:
        return inbound.hop
    return f"{inbound.process or f'pid {inbound.pid}'}:{_port(inbound.local)}"


def _waits(sock: SocketState) -> bool:
    """Its last bytes went out after the last came in (or nothing came): a request outstanding."""
    if not sock.bytes_received:
        return bool(sock.bytes_acked and sock.bytes_acked > 1) or bool(sock.wqueue)
    sent, received = sock.last_data_sent_s, sock.last_data_recv_s
    return sent is not None and received is not None and sent < received


def _carrier(inbound: SocketState, outs: Sequence[SocketState]) -> SocketState | None:
    """The connection out that carries the request that came in on `inbound`: sent on at, or just
    after, the moment the request came in (the nearest), by a hop that forwards at once."""
    arrived = inbound.last_data_recv_s
    if arrived is None:
        return None
    after = [s for s in outs if s.last_data_sent_s is not None and s.last_data_sent_s <= arrived + SAME_MOMENT_S]
    if not after:
        return None
    nearest = max(after, key=lambda s: s.last_data_sent_s or 0.0)
    # Sent on well after the request came in, and answered: another request's (a canary's), not ours.
    if arrived - (nearest.last_data_sent_s or 0.0) > FORWARD_WITHIN_S and not _waits(nearest):
        return None
    return nearest


def follow(start: SocketState, traced: Sequence[SocketState]) -> ChainTrace | None:
    """The hops behind `start` (a stuck connection to the first hop) that the request went
    through, and where it stopped; None when not even the first hop's end is among `traced`."""
    ends = {(s.local, s.remote): s for s in traced if s.state != "LISTEN"}
    listening = {(s.pid, _port(s.local)) for s in traced if s.state == "LISTEN"}
    steps: list[HopStep] = []
    conn = start
    for _ in range(MAX_STEPS):
        inbound = ends.get((conn.remote, conn.local))
        if inbound is None or inbound.pid is None:
            if not steps:
                return None
            return ChainTrace(tuple(steps), "not-visible", conn.hop or conn.remote)
        name = hop_name(inbound)
        if inbound.rqueue and (inbound.last_data_recv_s or 0.0) >= HELD_FOR_S:
            return ChainTrace((*steps, HopStep(name, inbound, None)), "unread")
        outs = [s for s in traced if s.pid == inbound.pid and s.state == "ESTABLISHED"
                and (s.pid, _port(s.local)) not in listening and s is not inbound]
        out = _carrier(inbound, outs)
        if out is None:
            return ChainTrace((*steps, HopStep(name, inbound, None)), "not-forwarded")
        steps.append(HopStep(name, inbound, out))
        if out.rqueue and (out.last_data_recv_s or 0.0) >= HELD_FOR_S:
            return ChainTrace(tuple(steps), "answer-held")
        if not _waits(out) and inbound.last_data_sent_s is not None and out.last_data_recv_s is not None \
                and out.last_data_recv_s + SAME_MOMENT_S < inbound.last_data_sent_s \
                and out.last_data_recv_s >= HELD_FOR_S:
            return ChainTrace(tuple(steps), "answer-held")
        conn = out
    return ChainTrace(tuple(steps), "not-forwarded")


def _ago(seconds: float | None) -> str:
    return "not read" if seconds is None else f"{seconds:.1f} s ago"


def step_text(step: HopStep) -> str:
    """One hop's socket facts, for an evidence entry."""
    i = step.inbound
    said = (f"pid {i.pid}" + (f" ({i.process})" if i.process else "") + f" {i.local} <- {i.remote}: "
            f"request in {_ago(i.last_data_recv_s)}, last byte out {_ago(i.last_data_sent_s)}, "
            f"unread {number(i.rqueue)} B")
    o = step.outbound
    if o is None:
        return said + "; no connection out sent anything since"
    return said + (f"; out {o.local} -> {o.remote}: sent {_ago(o.last_data_sent_s)}, "
                   f"last byte back {_ago(o.last_data_recv_s if o.bytes_received else None)}, "
                   f"unread {number(o.rqueue)} B, unacknowledged {number(o.wqueue)} B")


FOLLOWED = "followed through the hops' sockets"  # the evidence entry's signal


def stop_text(trace: ChainTrace) -> str:
    """Where the request stopped, in words, after the hops it went through (each hop's socket facts
    are in an evidence entry of their own): the value of the FOLLOWED entry."""
    last = trace.steps[-1]
    path = " -> ".join(s.name for s in trace.steps)
    if trace.stop == "unread":
        said = (f"the request waits unread in {last.name}'s receive queue ({number(last.inbound.rqueue)} B, "
                f"there {_ago(last.inbound.last_data_recv_s)}): {last.name} does not read")
    elif trace.stop == "not-forwarded":
        said = (f"the request went into {last.name} {_ago(last.inbound.last_data_recv_s)} and nothing "
                f"went out of it since, nor came back")
    elif trace.stop == "answer-held":
        out = last.outbound
        said = f"the answer came back to {last.name}" + (
            f" on {out.local} -> {out.remote} {_ago(out.last_data_recv_s)}" if out is not None else "") \
            + " and was not passed on"
    else:
        said = (f"{last.name} passed it on to {trace.beyond}; beyond {last.name}: not visible from here "
                f"(no process this host shows holds the other end: another host, or a process "
                f"repro may not read)")
    return f"{path}: {said}"
