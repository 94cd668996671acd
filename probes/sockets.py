"""TCP connections as the kernel sees them: another process's (`repro triage --pid`) or our own.

`connections_of(pid)` lists the TCP connections (IPv4 and IPv6) a process holds, with the
kernel's figures for each (repro.core.socket_state.SocketState). Two reads make it:
1. the process's socket inodes, from the `socket:[INODE]` links in /proc/PID/fd (the only
   privileged step: another user's process needs that user or root);
2. one sock_diag dump per address family (NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY with an
   inet_diag_req_v2 asking for INET_DIAG_INFO), keeping the sockets whose inode the process holds.
   Each answer is an inet_diag_msg (addresses, state, idiag_rqueue/idiag_wqueue, inode) followed
   by an INET_DIAG_INFO attribute holding the connection's struct tcp_info. Any user may dump.

Why a small netlink reader of our own (about a hundred lines of `struct`), not pyroute2 or `ss`:
- The struct tcp_info decoder (`tcp_info_fields`) is needed anyway for our own socket
  (getsockopt(TCP_INFO) returns the very same struct), so with our reader there is one decoder
  for both, with its offsets written down once below.
- pyroute2 0.9.7 (checked installed): `DiagSocket.get_sock_stats` is marked in its own docstring as
  work in progress whose signature "will be changed before the next release"; its sock_diag
  marshal switches netlink error messages off (`error_type = -1`), so an EPERM or ENOENT from the
  kernel is not reported as one; importing it costs ~0.3 s and 5 MB for what we use of it.
- `ss -tinpH` (iproute2) prints text meant for people: the tcp_info figures are `lastrcv:728`
  tokens whose set and order change between iproute2 versions and are left out when zero; `-p`
  walks every process's /proc/*/fd to name owners (slow on a busy host, and needs root for
  others' processes anyway), and slim containers often ship without iproute2.
- Our reader: no dependency, no subprocess; ~5 ms for both dumps of a host with ~160 TCP sockets
  (pyroute2 took ~25 ms for the IPv4 dump alone, measured on the same host); reads are bounded (a
  deadline on the netlink socket) and every failure is a one-line SocketReadError.

`hop_side_of(conns, harness_pid=PID)` reads the other end of a harness's connections to hops on
this host: the sock_diag dump of every socket finds the one whose addresses mirror ours, /proc/*/fd
its owner (what `ss -p` does; another user's process needs root), and that process's connections
holding bytes (a proxy whose upstream holds an answer it does not read), marked with the harness
connection they serve. Positive evidence for a hop that stopped, where the harness's own socket
alone could be an idle pooled connection.

`own_socket_state(sock)` reads one socket of ours: getsockopt(IPPROTO_TCP, TCP_INFO) and the
SIOCINQ/SIOCOUTQ ioctls (termios FIONREAD/TIOCOUTQ) for the queues. It never raises.

`hop_of(remote, hops)` says which hop a remote host:port belongs to (pure).

Layer: imports only repro.core.* (tests/test_layers.py).
"""

from __future__ import annotations

import errno
import fcntl
import os
import pwd
import socket
import struct
import termios
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import msgspec

from repro.core.errors import ReproError
from repro.core.hop import Hop
from repro.core.socket_state import SocketState


class SocketReadError(ReproError):
    """A process's connections could not be read; the message is one line that says why and what to do."""


class NoSuchProcess(SocketReadError):
    pass


class NotPermitted(SocketReadError):
    pass


class SockDiagUnavailable(SocketReadError):
    pass


# --- struct tcp_info (linux/tcp.h), host byte order --------------------------------------------
# The struct only ever grows at its end, so a field's offset never changes; a shorter answer (an
# older kernel) just lacks the later fields. The offsets used:
#   0  u8  tcpi_state              TCP_ESTABLISHED=1 ... (TCP_STATES below)
#   2  u8  tcpi_retransmits        retransmissions of the current segment
#   24 u32 tcpi_unacked            segments sent and not acknowledged (packets_out)
#   44 u32 tcpi_last_data_sent     ms since data was last sent
#   52 u32 tcpi_last_data_recv     ms since data was last received
#   56 u32 tcpi_last_ack_recv      ms since the last ACK arrived
#   120 u64 tcpi_bytes_acked       our bytes the peer acknowledged (Linux >= 4.1)
#   128 u64 tcpi_bytes_received    bytes received (Linux >= 4.1)
# (Between them: u8 ca_state, probes, backoff, options, wscales, app_limited at 1, 3-7; u32 rto,
# ato, snd_mss, rcv_mss at 8-20; sacked, lost, retrans, fackets at 28-40; last_ack_sent at 48;
# pmtu ... total_retrans at 60-100; u64 pacing_rate, max_pacing_rate at 104, 112.)
TCP_INFO_SIZE = 256  # what we ask getsockopt for: more than any kernel's struct so far (~250 bytes)
TCP_STATES = {
    1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2", 6: "TIME_WAIT",
    7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING", 12: "NEW_SYN_RECV",
}
_U8, _U32, _U64 = struct.Struct("=B"), struct.Struct("=I"), struct.Struct("=Q")


def tcp_info_fields(info: bytes) -> dict[str, Any]:
    """The SocketState fields a struct tcp_info gives, as far as `info` reaches (never raises)."""
    fields: dict[str, Any] = {}
    size = len(info)
    if size >= 1:
        fields["state"] = TCP_STATES.get(info[0], f"STATE_{info[0]}")
    if size >= 3:
        fields["retransmits"] = _U8.unpack_from(info, 2)[0]
    if size >= 28:
        fields["unacked"] = _U32.unpack_from(info, 24)[0]
    for name, offset in (("last_data_sent_s", 44), ("last_data_recv_s", 52), ("last_ack_recv_s", 56)):
        if size >= offset + 4:
            fields[name] = _U32.unpack_from(info, offset)[0] / 1000.0
    if size >= 128:
        fields["bytes_acked"] = _U64.unpack_from(info, 120)[0]
    if size >= 136:
        fields["bytes_received"] = _U64.unpack_from(info, 128)[0]
    return fields


def address_text(host: str, port: int) -> str:
    """host:port, an IPv6 host in brackets: [::1]:8000."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# --- our own socket -----------------------------------------------------------------------------

def own_socket_state(sock: Any) -> SocketState:
    """One of our sockets (a socket.socket, or asyncio's TransportSocket from a transport's
    get_extra_info("socket")): what the kernel says of it. Never raises: what could not be read
    stays None ("?" for an address, "UNKNOWN" for the state), e.g. on a socket already closed."""
    fields: dict[str, Any] = {"local": "?", "remote": "?", "state": "UNKNOWN"}
    for key, method in (("local", "getsockname"), ("remote", "getpeername")):
        try:
            host, port = getattr(sock, method)()[:2]
            fields[key] = address_text(host, port)
        except Exception:
            pass
    try:
        fields.update(tcp_info_fields(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_SIZE)))
    except Exception:
        pass
    try:
        fd = sock.fileno()
    except Exception:
        fd = -1
    if fd >= 0:
        # SIOCINQ (= FIONREAD): received, not yet read; SIOCOUTQ (= TIOCOUTQ): written, not yet
        # acknowledged. The same figures as sock_diag's idiag_rqueue/idiag_wqueue.
        for key, request in (("rqueue", termios.FIONREAD), ("wqueue", termios.TIOCOUTQ)):
            try:
                fields[key] = struct.unpack("i", fcntl.ioctl(fd, request, b"\0\0\0\0"))[0]
            except Exception:  # EINVAL on a listening socket
                pass
        try:
            fields["inode"] = os.fstat(fd).st_ino
        except Exception:
            pass
    return SocketState(**fields)


# --- another process's connections --------------------------------------------------------------

def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process `pid` holds (its /proc/PID/fd links `socket:[INODE]`)."""
    if not isinstance(pid, int) or pid <= 0:
        raise NoSuchProcess(f"pid {pid!r}: not a process id; give a positive number (see `pgrep -f NAME`)")
    fd_dir = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except FileNotFoundError:
        if not os.path.isdir("/proc/self/fd"):
            raise SockDiagUnavailable("/proc is not mounted: cannot see which sockets a process holds; "
                                      "run repro on the Linux host (or container) of the process") from None
        raise NoSuchProcess(f"pid {pid}: no such process (has it exited?); check it with `ps -p {pid}`") from None
    except PermissionError:
        raise NotPermitted(f"pid {pid} belongs to {_owner(pid)}: {fd_dir} is not readable by {_me()}; "
                           f"run repro as that user or as root") from None
    except OSError as exc:
        raise SocketReadError(f"pid {pid}: cannot list {fd_dir} ({exc.strerror or exc})") from None
    inodes = set()
    for name in names:
        try:
            link = os.readlink(f"{fd_dir}/{name}")
        except OSError:  # closed meanwhile
            continue
        if link.startswith("socket:["):
            try:
                inodes.add(int(link[8:-1]))
            except ValueError:
                continue
    return inodes


def _owner(pid: int) -> str:
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return "another user"
    try:
        return f"user {pwd.getpwuid(uid).pw_name}"
    except KeyError:
        return f"uid {uid}"


def _me() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def _same_network_namespace(pid: int) -> bool:
    """sock_diag answers for our network namespace only; a process in a container lives in its own."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
    except OSError:  # not readable: assume the same (the inode match then finds what it finds)
        return True


def process_name(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() or None
    except OSError:
        return None


# netlink and sock_diag constants (linux/netlink.h, linux/sock_diag.h, linux/inet_diag.h)
NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
INET_DIAG_INFO = 2
# Every state but those no process holds a socket in: LISTEN (not a connection), TIME_WAIT and
# SYN_RECV/NEW_SYN_RECV (kernel-only mini sockets, inode 0). Fewer sockets to dump on a busy host.
STATES = sum(1 << s for s in TCP_STATES) & ~((1 << 10) | (1 << 6) | (1 << 3) | (1 << 12))
_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_REQ_V2 = struct.Struct("=BBBxI48x")  # family, protocol, ext, pad, states, inet_diag_sockid (any)
# inet_diag_msg: family, state, timer, retrans; id: sport, dport (big-endian), src[16], dst[16],
# if, cookie[2]; then expires, rqueue, wqueue, uid, inode.
_DIAG_MSG = struct.Struct("=BBBB4s16s16sI8xIIIII")
_PORTS = struct.Struct("!HH")
_RTATTR = struct.Struct("=HH")
_ERRNO = struct.Struct("=i")
RECV_SIZE = 1 << 18
MAX_SOCKETS = 1 << 20  # a dump larger than this is cut short: bounded work whatever the host


def _open_netlink() -> socket.socket:
    return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)


def _no_sock_diag(detail: str) -> SockDiagUnavailable:
    return SockDiagUnavailable(f"this system does not answer Linux sock_diag for TCP ({detail}): needs a Linux kernel "
                               "with inet_diag/tcp_diag (`modprobe tcp_diag`), outside a sandbox that blocks netlink")


def _dump(nl: socket.socket, family: int, deadline: float, keep: set[int] | None, seq: int,
          states: int = STATES) -> list[tuple[Any, ...]]:
    """One SOCK_DIAG_BY_FAMILY dump of TCP sockets of `family` in `states`; the answers whose inode
    is in `keep` (every one when `keep` is None)."""
    request = _REQ_V2.pack(family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), states)
    nl.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0)
            + request)
    found: list[tuple[Any, ...]] = []
    seen = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SocketReadError(f"sock_diag did not finish its dump of TCP sockets in time ({seen} read); "
                                  "the host may hold very many sockets: try again")
        nl.settimeout(remaining)
        try:
            data = nl.recv(RECV_SIZE)
        except TimeoutError:
            continue  # the deadline check above ends it
        offset = 0
        while offset + _NLMSGHDR.size <= len(data):
            length, kind, _flags, msg_seq, _ = _NLMSGHDR.unpack_from(data, offset)
            if length < _NLMSGHDR.size:
                return found  # malformed: stop rather than loop
            body = offset + _NLMSGHDR.size
            end = offset + length
            offset += (length + 3) & ~3
            if msg_seq != seq:
                continue  # a late answer to an earlier request
            if kind == NLMSG_DONE:
                return found
            if kind == NLMSG_ERROR:
                code = -_ERRNO.unpack_from(data, body)[0]
                if code == 0:
                    continue  # an acknowledgement
                raise OSError(code, os.strerror(code))
            if kind != SOCK_DIAG_BY_FAMILY or end - body < _DIAG_MSG.size:
                continue
            seen += 1
            if seen > MAX_SOCKETS:
                return found
            (fam, state, _timer, _retrans, ports, src, dst, _if, _expires, rqueue, wqueue, _uid,
             inode) = _DIAG_MSG.unpack_from(data, body)
            if keep is not None and inode not in keep:
                continue
            info = b""
            at = body + _DIAG_MSG.size
            while at + _RTATTR.size <= end:
                rta_len, rta_type = _RTATTR.unpack_from(data, at)
                if rta_len < _RTATTR.size:
                    break
                if rta_type == INET_DIAG_INFO:
                    info = data[at + _RTATTR.size:at + rta_len]
                at += (rta_len + 3) & ~3
            sport, dport = _PORTS.unpack(ports)  # network byte order inside a native-order message
            found.append((fam, state, src, sport, dst, dport, rqueue, wqueue, inode, info))


# The states in which the peer's FIN has arrived. sock_diag's idiag_rqueue is rcv_nxt - copied_seq,
# and a FIN takes one sequence number: until the process reads the end of the stream (recv() -> 0),
# the FIN counts as 1 byte "unread" (linux net/ipv4/tcp_diag.c). SIOCINQ takes it off (tcp_inq),
# so here too: a closed idle connection is not a reader that stopped reading (issue 31, defect 1).
# Any byte of data unread means the FIN (the last in sequence) is unread too.
PEER_FIN_STATES = frozenset({"CLOSE_WAIT", "LAST_ACK", "CLOSING", "TIME_WAIT"})


def data_unread(state: str, rqueue: int) -> int:
    """Bytes of data unread in a receive queue, from sock_diag's count: the peer's FIN taken off."""
    return max(0, rqueue - 1) if state in PEER_FIN_STATES else rqueue


def _state_of(row: tuple[Any, ...], pid: int | None) -> SocketState:
    fam, state, src, sport, dst, dport, rqueue, wqueue, inode, info = row
    state_name = TCP_STATES.get(state, f"STATE_{state}")
    size = 4 if fam == socket.AF_INET else 16
    fields: dict[str, Any] = tcp_info_fields(info)
    fields.update(
        local=address_text(socket.inet_ntop(fam, src[:size]), sport),
        remote=address_text(socket.inet_ntop(fam, dst[:size]), dport),
        state=state_name,  # inet_diag's state: there even without tcp_info
        rqueue=data_unread(state_name, rqueue), wqueue=wqueue, pid=pid, inode=inode,
    )
    return SocketState(**fields)


def connections_of(pid: int, *, timeout: float = 3.0) -> list[SocketState]:
    """The TCP connections (IPv4 and IPv6, listening sockets left out) process `pid` holds, with
    their kernel state. Bounded by `timeout`. Raises a SocketReadError subclass with one line:
    NoSuchProcess, NotPermitted (another user's process), SockDiagUnavailable."""
    inodes = socket_inodes(pid)
    if not _same_network_namespace(pid):
        raise SocketReadError(f"pid {pid} lives in another network namespace (a container?), whose connections "
                              f"this one cannot see: run repro inside it, e.g. `nsenter -t {pid} -n repro triage ...`")
    return [_state_of(row, pid) for row in _dump_both(inodes, timeout)]


def all_connections(*, timeout: float = 3.0) -> list[SocketState]:
    """Every TCP connection of this network namespace (listening sockets left out), owner unknown
    (pid None): sock_diag answers any user. Raises SocketReadError as connections_of does."""
    return [_state_of(row, None) for row in _dump_both(None, timeout)]


def listening_of(pid: int, *, timeout: float = 3.0) -> list[SocketState]:
    """The TCP sockets process `pid` listens on (state LISTEN): where its clients come in.
    Raises SocketReadError as connections_of does."""
    return [_state_of(row, pid) for row in _dump_both(socket_inodes(pid), timeout, states=1 << 10)]


def _dump_both(inodes: set[int] | None, timeout: float, states: int = STATES) -> list[tuple[Any, ...]]:
    """The IPv4 and IPv6 dumps (only `inodes`, or every socket), bounded by `timeout`."""
    deadline = time.monotonic() + timeout
    try:
        nl = _open_netlink()
    except OSError as exc:
        raise _no_sock_diag(f"netlink socket: {exc.strerror or exc}") from None
    rows: list[tuple[Any, ...]] = []
    try:
        nl.bind((0, 0))
        for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), 1):
            if inodes is not None and not inodes:
                break
            try:
                rows += _dump(nl, family, deadline, inodes, seq, states)
            except OSError as exc:
                if family == socket.AF_INET6 and exc.errno in (errno.ENOENT, errno.EAFNOSUPPORT, errno.EOPNOTSUPP):
                    continue  # no IPv6 on this host: no IPv6 connections either
                raise _no_sock_diag(f"{'IPv4' if family == socket.AF_INET else 'IPv6'} dump: "
                                    f"{exc.strerror or exc}") from None
    finally:
        nl.close()
    return rows


# --- the hop's end of a harness's connection (a hop on this host) ---------------------------------

MAX_PROCESSES = 4096  # processes scanned for a socket's owner: bounded work on a busy host
HOP_SIDE_UNREAD = 1  # a hop process's socket counts as holding bytes from this many unread or unacknowledged


def socket_owners(inodes: set[int], *, skip: set[int] = frozenset()) -> dict[int, int]:
    """{inode: pid} for the processes (other than `skip`) holding these sockets, from /proc/*/fd:
    what `ss -p` does. Processes we may not read (another user's, without root) are passed over."""
    found: dict[int, int] = {}
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return found
    for pid in pids[:MAX_PROCESSES]:
        if pid in skip or pid == os.getpid():
            continue
        try:
            held = socket_inodes(pid) & inodes
        except SocketReadError:
            continue
        for inode in held:
            found.setdefault(inode, pid)
        if len(found) == len(inodes):
            break
    return found


def hop_side_of(conns: list[SocketState], *, harness_pid: int, timeout: float = 3.0) -> list[SocketState]:
    """The hop's side of a harness's connections to hops on this host: for each, the socket of the
    hop's process at the other end, and that process's other connections holding bytes (unread or
    unacknowledged: a proxy's upstream with an answer it has not read), each marked with `serves` (the
    harness connection's local address), `hop` and the owner's `pid`. Empty where the other end is
    not on this host (sock_diag sees this network namespace only) or its owner cannot be read."""
    wanted = {(c.remote, c.local): c for c in conns if c.hop and c.state == "ESTABLISHED"}
    if not wanted:
        return []
    peers = {s.inode: (s, wanted[(s.local, s.remote)]) for s in all_connections(timeout=timeout)
             if (s.local, s.remote) in wanted and s.inode}
    owners = socket_owners(set(peers), skip={harness_pid}) if peers else {}
    found: list[SocketState] = []
    for inode, pid in owners.items():
        peer, conn = peers[inode]
        try:
            theirs = connections_of(pid, timeout=timeout)
        except SocketReadError:
            continue
        for sock in theirs:
            if sock.inode == inode or (sock.rqueue or 0) >= HOP_SIDE_UNREAD or (sock.wqueue or 0) >= HOP_SIDE_UNREAD:
                found.append(msgspec.structs.replace(sock, hop=conn.hop, serves=conn.local))
    return found


# --- the hops behind: a stuck request followed through the processes on this host ---------------

MAX_TRACED_HOPS = 8  # processes deep from the harness: more than any real chain of proxies
MAX_TRACED_OUT = 512  # connections out of one process kept: bounded evidence on a busy proxy


def port_of(address: str) -> int | None:
    found = split_address(address)
    return None if found is None else found[1]


def hop_chain_of(conns: list[SocketState], hops: Iterable[Hop], *, harness_pid: int,
                 timeout: float = 3.0) -> list[SocketState]:
    """The processes on this host behind a harness's connections to hops, hop by hop: for each
    process reached (the owner of the other end of a connection, found in the host's sock_diag
    dump and /proc/*/fd as `ss -p` does), its listening sockets, its ends of the connections it
    was reached by, and its established connections out (those not on a port it listens on),
    each marked `traced` with the process's command name, and `hop` the --hop whose URL is its
    local address (the hop a connection came in to), else its remote one (the hop it goes to). Then the processes those connections out go
    to, up to MAX_TRACED_HOPS deep. Which of them carries the stuck request is the judge's to say
    (repro.core.hop_chain), from their times. Empty where no other end is on this host; a process
    we may not read (another user's, without root) is passed over: the trace ends there."""
    hops = list(hops)
    frontier = {(c.remote, c.local) for c in conns if c.hop and c.state == "ESTABLISHED"}
    if not frontier:
        return []
    deadline = time.monotonic() + timeout
    ends = {(s.local, s.remote): s for s in all_connections(timeout=timeout) if s.inode}
    read: set[int] = {harness_pid}
    found: list[SocketState] = []
    for _ in range(MAX_TRACED_HOPS):
        wanted = {ends[key].inode: key for key in frontier if key in ends}
        owners = socket_owners(set(wanted)) if wanted else {}
        frontier = set()
        for inode, pid in owners.items():
            if pid == harness_pid:
                continue
            name = process_name(pid)
            # `hop`: the hop a connection came in to (its local address is the hop's), else the one it goes to.
            theirs = [msgspec.structs.replace(s, traced=True, process=name,
                                              hop=hop_of(s.local, hops) or hop_of(s.remote, hops))
                      for s in [*(_read_or_none(listening_of, pid, deadline) or []),
                                *(_read_or_none(connections_of, pid, deadline) or [])]]
            found += [s for s in theirs if s.inode == inode]  # its end of the connection it was reached by
            if pid in read:
                continue
            read.add(pid)
            listens = {port_of(s.local) for s in theirs if s.state == "LISTEN"}
            out = [s for s in theirs if s.state == "ESTABLISHED" and port_of(s.local) not in listens]
            found += [s for s in theirs if s.state == "LISTEN"] + out[:MAX_TRACED_OUT]
            frontier |= {(s.remote, s.local) for s in out[:MAX_TRACED_OUT]}
        if not frontier:
            break
    unique: dict[tuple[int | None, int | None, str, str], SocketState] = {}
    for s in found:
        unique.setdefault((s.pid, s.inode, s.local, s.remote), s)
    return list(unique.values())


def _read_or_none(read, pid: int, deadline: float) -> list[SocketState] | None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return None
    try:
        return read(pid, timeout=remaining)
    except SocketReadError:
        return None


# --- which hop a connection goes to ---------------------------------------------------------------

_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_key(host: str) -> str:
    host = host.strip().strip("[]").lower()
    if host.startswith("::ffff:") and "." in host:  # an IPv4 address on an IPv6 socket
        host = host[7:]
    return "loopback" if host in _LOOPBACK else host


def split_address(address: str) -> tuple[str, int] | None:
    """`host:port` or `[v6]:port` -> (host, port); None when it is neither."""
    address = address.strip()
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host, int(port)


def hop_of(remote: str, hops: Iterable[Hop]) -> str | None:
    """The name of the first hop whose URL (host and port; 80/443 by scheme when none is given)
    is `remote`; localhost, 127.0.0.1 and ::1 count as one host. None: no hop matches."""
    address = split_address(remote)
    if address is None:
        return None
    host, port = _host_key(address[0]), address[1]
    for hop in hops:
        try:
            parts = urlsplit(hop.url)
            hop_port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
        except ValueError:
            continue
        if parts.hostname and hop_port == port and _host_key(parts.hostname) == host:
            return hop.name
    return None
