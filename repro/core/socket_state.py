"""A TCP connection as the kernel sees it: typed, so the verdict reads figures, not text.

Read from Linux's sock_diag with tcp_info (another process's connections, `repro triage --pid`)
or with getsockopt(TCP_INFO) and the SIOCINQ/SIOCOUTQ ioctls (the driver's own socket at a
stall). What the figures tell apart:
- bytes waiting unread in our receive queue (`rqueue` > 0): the reader is not reading (client side);
- request bytes sent and not acknowledged (`wqueue` > 0, `unacked` > 0): the peer stopped reading;
- everything acknowledged and nothing received for a long time: the request sits in a hop or the engine.
"""

from __future__ import annotations

from typing import Any

import msgspec


class SocketState(msgspec.Struct, kw_only=True):
    local: str  # host:port
    remote: str  # host:port
    state: str  # ESTABLISHED, CLOSE_WAIT, SYN_SENT, ...
    rqueue: int | None = None  # bytes received by the kernel, not yet read by the process
    wqueue: int | None = None  # bytes written by the process, not yet acknowledged by the peer
    unacked: int | None = None  # segments sent and not acknowledged (tcpi_unacked)
    retransmits: int | None = None  # retransmissions of the current segment (tcpi_retransmits)
    last_data_recv_s: float | None = None  # seconds since the last data arrived (tcpi_last_data_recv)
    last_data_sent_s: float | None = None  # seconds since data was last sent (tcpi_last_data_sent)
    last_ack_recv_s: float | None = None  # seconds since the last ACK arrived (tcpi_last_ack_recv)
    bytes_received: int | None = None  # tcpi_bytes_received (Linux >= 4.1)
    bytes_acked: int | None = None  # tcpi_bytes_acked: our bytes the peer acknowledged
    pid: int | None = None  # the process that holds it, when read from outside
    inode: int | None = None
    hop: str | None = None  # the hop its remote address belongs to, when one matches
    # Read on the hop's side (triage --pid, a hop on this host): a socket of the hop's process that
    # serves the harness's connection with this local address (its end of it, or the process's other
    # connections, upstream). None: a socket of the harness (or the driver) itself.
    serves: str | None = None
    # Read while following a stuck request through the hops on this host (triage --pid,
    # probes.sockets.hop_chain_of; judged by repro.core.hop_chain): a socket of a hop's process,
    # listening, the end of a connection a request may have come in on, or one it sends on.
    traced: bool = False
    process: str | None = None  # its process's command name (/proc/PID/comm), when traced

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)

    @property
    def unread(self) -> bool:
        return bool(self.rqueue)

    @property
    def request_unacked(self) -> bool:
        return bool(self.wqueue) and bool(self.unacked)
