"""probes/sockets.py on real sockets on 127.0.0.1 and ::1: our own socket's state (TCP_INFO and the
queue ioctls), another process's connections from sock_diag, their error cases, and hop_of."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from probes import sockets as probe
from probes.sockets import (
    NoSuchProcess,
    NotPermitted,
    SockDiagUnavailable,
    SocketReadError,
    connections_of,
    hop_of,
    own_socket_state,
    tcp_info_fields,
)
from repro.core.errors import ReproError
from repro.core.hop import Hop

pytestmark = pytest.mark.timeout(30)


@contextmanager
def connected_pair(family: int = socket.AF_INET):
    """(client, server-side) of one TCP connection on the loopback; both closed after."""
    host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    listener = socket.socket(family, socket.SOCK_STREAM)
    sockets = [listener]
    try:
        listener.bind((host, 0))
        listener.listen()
        client = socket.create_connection(listener.getsockname()[:2], timeout=5)
        sockets.append(client)
        server, _ = listener.accept()
        sockets.append(server)
        yield client, server
    finally:
        for s in sockets:
            s.close()


def local_of(sock: socket.socket) -> str:
    return probe.address_text(*sock.getsockname()[:2])


def remote_of(sock: socket.socket) -> str:
    return probe.address_text(*sock.getpeername()[:2])


def wait_until(predicate, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


# --- own_socket_state -------------------------------------------------------------------------------

@pytest.mark.network
def test_bytes_left_unread_show_in_the_receive_queue():
    with connected_pair() as (client, server):
        client.sendall(b"x" * 1000)
        state = wait_until(lambda: (s := own_socket_state(server)).rqueue and s)
        assert state.state == "ESTABLISHED" and state.rqueue == 1000 and state.unread
        assert state.bytes_received == 1000 and state.wqueue == 0
        assert state.local == local_of(server) and state.remote == remote_of(server)
        assert 0 <= state.last_data_recv_s < 5 and state.inode == os.fstat(server.fileno()).st_ino
        # The sender: everything acknowledged, nothing waiting.
        sent = own_socket_state(client)
        assert sent.wqueue == 0 and sent.unacked == 0 and sent.bytes_acked >= 1000 and not sent.request_unacked


@pytest.mark.network
def test_a_peer_that_stopped_reading_leaves_our_bytes_in_the_send_queue():
    with connected_pair() as (client, server):
        client.setblocking(False)
        sent = 0
        deadline = time.monotonic() + 10
        # Fill the peer's receive buffer and then our send buffer: the peer never reads.
        while time.monotonic() < deadline:
            try:
                sent += client.send(b"y" * 65536)
            except BlockingIOError:
                break
        assert sent > 0
        state = own_socket_state(client)
        assert state.state == "ESTABLISHED"
        assert 0 < state.wqueue <= sent, state  # written by us, not acknowledged by the peer (zero window)
        assert state.bytes_acked < sent
        peer = own_socket_state(server)
        assert peer.rqueue > 0 and peer.unread  # what did arrive sits unread on the peer's side


@pytest.mark.network
def test_own_socket_state_on_ipv6():
    with connected_pair(socket.AF_INET6) as (client, server):
        client.sendall(b"z" * 10)
        state = wait_until(lambda: (s := own_socket_state(server)).rqueue and s)
        assert state.local.startswith("[::1]:") and state.remote.startswith("[::1]:") and state.rqueue == 10


@pytest.mark.network
def test_own_socket_state_never_raises_and_says_what_it_could_not_read():
    closed = socket.socket()
    closed.close()
    state = own_socket_state(closed)
    assert (state.local, state.remote, state.state, state.rqueue, state.wqueue) == ("?", "?", "UNKNOWN", None, None)
    assert own_socket_state(object()).state == "UNKNOWN"
    with connected_pair() as (client, _server):
        unconnected_udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            assert own_socket_state(unconnected_udp).state == "UNKNOWN"  # no TCP_INFO on UDP
        finally:
            unconnected_udp.close()
        assert own_socket_state(client).state == "ESTABLISHED"


def test_tcp_info_fields_read_only_as_far_as_the_struct_reaches():
    assert tcp_info_fields(b"") == {}
    assert tcp_info_fields(bytes([1, 0, 3])) == {"state": "ESTABLISHED", "retransmits": 3}
    short = tcp_info_fields(bytes([8]) + bytes(103))  # a pre-4.1 kernel's struct: no byte counters
    assert short["state"] == "CLOSE_WAIT" and "bytes_acked" not in short and "last_ack_recv_s" in short


# --- connections_of -----------------------------------------------------------------------------------

@pytest.mark.network
def test_connections_of_a_process_lists_its_tcp_connections_with_kernel_state():
    with connected_pair() as (client, server), connected_pair(socket.AF_INET6) as (client6, server6):
        client.sendall(b"a" * 300)
        wait_until(lambda: own_socket_state(server).rqueue)
        found = {s.local: s for s in connections_of(os.getpid())}
        ours = found[local_of(server)]
        assert ours.state == "ESTABLISHED" and ours.rqueue == 300 and ours.bytes_received == 300
        assert ours.pid == os.getpid() and ours.inode == os.fstat(server.fileno()).st_ino
        assert ours.remote == local_of(client)
        theirs = found[local_of(client)]
        assert theirs.wqueue == 0 and theirs.unacked == 0 and theirs.bytes_acked >= 300
        assert ours.last_data_recv_s is not None and ours.last_data_recv_s < 5
        assert local_of(client6) in found and local_of(server6) in found
        assert local_of(client6).startswith("[::1]:")
        # Listening sockets are not connections.
        assert all(s.state != "LISTEN" for s in found.values())


@pytest.mark.network
def test_connections_of_another_process():
    code = ("import socket,sys,time; s=socket.create_connection(('127.0.0.1', int(sys.argv[1]))); "
            "print(s.getsockname()[1], flush=True); time.sleep(30)")
    listener = socket.create_server(("127.0.0.1", 0))
    child = subprocess.Popen([sys.executable, "-c", code, str(listener.getsockname()[1])], stdout=subprocess.PIPE, text=True)
    try:
        port = int(child.stdout.readline())
        accepted, _ = listener.accept()
        accepted.sendall(b"hello")
        conns = wait_until(lambda: [c for c in connections_of(child.pid) if c.rqueue])
        (conn,) = conns
        assert conn.local == f"127.0.0.1:{port}" and conn.remote == local_of(listener)
        assert conn.rqueue == 5 and conn.pid == child.pid and conn.state == "ESTABLISHED"
        accepted.close()
    finally:
        child.kill()
        child.wait(5)
        listener.close()


@pytest.mark.network
def test_a_process_without_connections_has_none():
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert connections_of(child.pid) == []
    finally:
        child.kill()
        child.wait(5)


@pytest.mark.network
def test_no_such_process_is_a_one_line_error():
    child = subprocess.Popen(["true"])
    child.wait(5)  # reaped: its pid names no process now
    with pytest.raises(NoSuchProcess, match=rf"^pid {child.pid}: no such process") as caught:
        connections_of(child.pid)
    assert isinstance(caught.value, ReproError) and "\n" not in str(caught.value)
    with pytest.raises(NoSuchProcess):
        connections_of(0)


def test_another_users_process_without_privilege_names_the_fix(monkeypatch):
    """Unit-level (the CLI test runs as nobody for real): /proc/PID/fd refused -> NotPermitted."""
    def refuse(path):
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(probe.os, "listdir", refuse)
    with pytest.raises(NotPermitted, match=r"run repro as that user or as root$"):
        connections_of(1)


@pytest.mark.network
@pytest.mark.parametrize("error", [errno.EPROTONOSUPPORT, errno.EAFNOSUPPORT, errno.EPERM])
def test_a_system_without_sock_diag_is_a_one_line_error(monkeypatch, error):
    def no_netlink():
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(probe, "_open_netlink", no_netlink)
    with connected_pair():
        with pytest.raises(SockDiagUnavailable, match="sock_diag") as caught:
            connections_of(os.getpid())
    assert isinstance(caught.value, SocketReadError) and "\n" not in str(caught.value)


@pytest.mark.network
def test_a_kernel_refusing_the_ipv4_dump_is_unavailable_but_missing_ipv6_is_not(monkeypatch):
    real_dump = probe._dump

    def dump(nl, family, *args):
        if family == socket.AF_INET6:
            raise OSError(errno.ENOENT, "No such file or directory")
        return real_dump(nl, family, *args)

    monkeypatch.setattr(probe, "_dump", dump)
    with connected_pair() as (client, _server):
        assert any(c.local == local_of(client) for c in connections_of(os.getpid()))

    def refuse_all(nl, family, *args):
        raise OSError(errno.ENOENT, "No such file or directory")

    monkeypatch.setattr(probe, "_dump", refuse_all)
    with connected_pair(), pytest.raises(SockDiagUnavailable, match="IPv4 dump"):
        connections_of(os.getpid())


@pytest.mark.network
def test_connections_of_is_bounded_in_time():
    with connected_pair():
        started = time.monotonic()
        connections_of(os.getpid(), timeout=2.0)
        assert time.monotonic() - started < 2.0


# --- closing states: the peer's FIN is not data (issue 31, defect 1) ---------------------------------

def _listed(sock: socket.socket):
    """Our socket as connections_of (sock_diag) lists it, and as own_socket_state (ioctls) reads it."""
    local = local_of(sock)
    found = [c for c in connections_of(os.getpid()) if c.local == local]
    return (found[0] if found else None), own_socket_state(sock)


def _state_is(sock: socket.socket, state: str):
    return wait_until(lambda: (s := _listed(sock))[0] is not None and s[0].state == state and s)


@pytest.mark.network
@pytest.mark.parametrize("data", [b"", b"tail of an answer"])
def test_close_wait_counts_only_data_unread_never_the_fin(data):
    """The server answered (or not) and closed its end; ours sits unread in CLOSE_WAIT. Linux's
    sock_diag counts the FIN as one byte of the receive queue: a closed idle keep-alive connection
    read as '1 bytes wait unread'. Only data counts."""
    with connected_pair() as (client, server):
        if data:
            server.sendall(data)
        server.close()
        listed, own = _state_is(client, "CLOSE_WAIT")
        assert listed.rqueue == len(data) and own.rqueue == len(data), (listed, own)
        assert listed.unread is bool(data)
        assert client.recv(100) == data and client.recv(100) == b""  # the data, then the end of the stream
        listed, own = _listed(client)
        assert listed.state == "CLOSE_WAIT" and listed.rqueue == 0 and own.rqueue == 0, (listed, own)


@pytest.mark.network
@pytest.mark.parametrize("data", [b"", b"12345"])
def test_a_half_closed_connection_counts_its_data_on_both_ends(data):
    """The server half-closes (shutdown SHUT_WR, done sending) and goes on reading: ours is in
    CLOSE_WAIT, theirs in FIN_WAIT2. Our unread is the data only; theirs, what we send them, is
    data with no FIN in it (theirs was sent, not received)."""
    with connected_pair() as (client, server):
        if data:
            server.sendall(data)
        server.shutdown(socket.SHUT_WR)
        ours, own = _state_is(client, "CLOSE_WAIT")
        assert ours.rqueue == len(data) and own.rqueue == len(data), (ours, own)
        client.sendall(b"x" * 9)  # half-closed: we may still send
        theirs, their_own = wait_until(lambda: (s := _state_is(server, "FIN_WAIT2")) and s[0].rqueue and s)
        assert theirs.rqueue == 9 and their_own.rqueue == 9, (theirs, their_own)


@pytest.mark.network
@pytest.mark.parametrize("data", [b"", b"abc"])
def test_fin_wait_counts_the_data_the_peer_sent(data):
    """We closed our sending side first (FIN_WAIT1, then FIN_WAIT2 once acknowledged); the peer may
    still send: what it sends and we have not read is data, and counted as it is."""
    with connected_pair() as (client, server):
        client.shutdown(socket.SHUT_WR)
        if data:
            server.sendall(data)
        ours, own = wait_until(lambda: (s := _listed(client))[0] is not None and s[0].state.startswith("FIN_WAIT")
                               and s[0].rqueue == len(data) and s)
        assert ours.state in ("FIN_WAIT1", "FIN_WAIT2") and own.rqueue == len(data), (ours, own)
        peer, _ = _state_is(server, "CLOSE_WAIT")
        assert peer.rqueue == 0, peer  # our FIN, unread by the server: not data


@pytest.mark.network
def test_time_wait_is_no_process_connection_and_its_fin_is_no_data():
    """A connection we closed first ends in TIME_WAIT: the kernel keeps it, no process holds it,
    so neither a pid's connections nor the host's list it."""
    with connected_pair() as (client, server):
        local = local_of(client)
        client.close()
        server.close()
        wait_until(lambda: not any(c.local == local for c in probe.all_connections()))
        assert not any(c.local == local for c in connections_of(os.getpid()))
        assert not any(c.local == local for c in probe.all_connections())
    assert probe.data_unread("TIME_WAIT", 1) == 0 and probe.data_unread("LAST_ACK", 4) == 3
    assert probe.data_unread("ESTABLISHED", 1) == 1 and probe.data_unread("FIN_WAIT2", 2) == 2
    assert probe.data_unread("CLOSE_WAIT", 0) == 0


# --- hop_of -------------------------------------------------------------------------------------------

HOPS = [
    Hop("proxy", "http://localhost:8080/v1", role="proxy"),
    Hop("router", "http://[::1]:30000", role="router"),
    Hop("engine-0", "http://10.0.0.5:30000", role="engine"),
    Hop("gateway", "https://api.example.com/v1", role="proxy"),
    Hop("plain", "http://Example.org", role="proxy"),
]


@pytest.mark.parametrize("remote, hop", [
    ("127.0.0.1:8080", "proxy"),
    ("[::1]:8080", "proxy"),
    ("[::ffff:127.0.0.1]:8080", "proxy"),
    ("127.0.0.1:30000", "router"),  # localhost, 127.0.0.1 and ::1 alike
    ("[::1]:30000", "router"),
    ("10.0.0.5:30000", "engine-0"),
    ("10.0.0.5:30001", None),
    ("api.example.com:443", "gateway"),
    ("example.org:80", "plain"),
    ("127.0.0.1:80", None),
    ("127.0.0.2:8080", None),
    ("garbage", None),
    ("[::1]", None),
    ("?", None),
])
def test_hop_of_matches_host_and_port(remote, hop):
    assert hop_of(remote, HOPS) == hop


def test_hop_of_takes_the_first_hop_that_matches_and_skips_bad_urls():
    hops = [Hop("broken", "http://127.0.0.1:99999", role="proxy"), Hop("a", "http://127.0.0.1:9000"),
            Hop("b", "http://localhost:9000")]
    assert hop_of("127.0.0.1:9000", hops) == "a"
    assert hop_of("127.0.0.1:9000", []) is None


@pytest.mark.network
def test_the_hop_side_of_a_connection_is_the_relay_process_holding_its_bytes():
    """A relay (socat: one child per connection) between us and a server; its child frozen, the
    server answers: the answer sits unread in the child's upstream socket. hop_side_of finds the
    child by the other end of our connection, and that socket with its bytes, marked with ours."""
    import msgspec

    from repro.lab.stacks import StackUnavailable, socat

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server_port = server.getsockname()[1]
    try:
        with socat(f"http://127.0.0.1:{server_port}") as relay:
            port = int(relay.url.rsplit(":", 1)[1])
            client = socket.create_connection(("127.0.0.1", port), timeout=5)
            client.sendall(b"request")
            server.settimeout(5)
            while True:  # the launcher's own readiness probe came through first, and closed at once
                upstream, _ = server.accept()
                upstream.settimeout(5)
                if upstream.recv(16) == b"request":
                    break
                upstream.close()
            try:
                children = relay.freeze(children_only=True)
                upstream.sendall(b"x" * 3000)  # the answer, into the frozen child's receive queue
                time.sleep(0.3)
                ours = msgspec.structs.replace(own_socket_state(client), hop="relay")
                ends = probe.hop_side_of([ours], harness_pid=os.getpid())
            finally:
                relay.thaw()
                client.close()
                upstream.close()
    except StackUnavailable as exc:
        pytest.skip(str(exc))
    finally:
        server.close()
    assert {e.pid for e in ends} <= set(children) and ends, (ends, children)
    assert all(e.serves == ours.local and e.hop == "relay" for e in ends), ends
    peer = [e for e in ends if e.remote == ours.local]  # its end of our connection
    held = [e for e in ends if e.remote == f"127.0.0.1:{server_port}"]  # its upstream, holding the answer
    assert len(peer) == 1 and [e.rqueue for e in held] == [3000], ends


@pytest.mark.network
def test_a_connection_to_no_hop_or_to_nothing_on_this_host_has_no_hop_side():
    with connected_pair() as (client, _):
        ours = own_socket_state(client)
        assert probe.hop_side_of([ours], harness_pid=os.getpid()) == []  # no hop: not looked for
    gone = probe.SocketState(local="127.0.0.1:1", remote="127.0.0.1:2", state="ESTABLISHED", hop="proxy")
    assert probe.hop_side_of([gone], harness_pid=os.getpid()) == []  # no such other end here


@pytest.mark.network
def test_listening_of_lists_only_listening_sockets():
    with connected_pair() as (client, _server):
        listening = probe.listening_of(os.getpid())
        assert listening and all(s.state == "LISTEN" for s in listening)
        assert remote_of(client) in {s.local for s in listening}


@pytest.mark.network
def test_the_hop_chain_of_a_connection_reads_the_relay_behind_it():
    """A relay (socat: one child per connection) between us and a server: hop_chain_of finds the
    child by the other end of our connection, and reads its end of it and its connection out to
    the server (the server is ours: the harness's own process is not read as a hop)."""
    from repro.lab.stacks import StackUnavailable, socat

    server = socket.create_server(("127.0.0.1", 0))
    server_port = server.getsockname()[1]
    try:
        with socat(f"http://127.0.0.1:{server_port}") as relay:
            port = int(relay.url.rsplit(":", 1)[1])
            client = socket.create_connection(("127.0.0.1", port), timeout=5)
            try:
                client.sendall(b"request")
                server.settimeout(5)
                while True:  # the launcher's readiness probe came through first, and closed at once
                    upstream, _ = server.accept()
                    upstream.settimeout(5)
                    if upstream.recv(16) == b"request":
                        break
                    upstream.close()
                hops = [Hop("relay", relay.url, role="proxy")]
                ours = own_socket_state(client)
                import msgspec

                chain = probe.hop_chain_of([msgspec.structs.replace(ours, hop="relay")], hops, harness_pid=os.getpid())
                upstream.close()
            finally:
                client.close()
    except StackUnavailable as exc:
        pytest.skip(str(exc))
    finally:
        server.close()
    assert chain and all(s.traced and s.process == "socat" for s in chain), chain
    (end,) = [s for s in chain if s.remote == ours.local]
    assert end.local == ours.remote and end.hop == "relay" and end.last_data_recv_s is not None
    out = [s for s in chain if s.remote == f"127.0.0.1:{server_port}" and s.pid == end.pid]
    assert len(out) == 1 and out[0].state == "ESTABLISHED", chain
    assert not [s for s in chain if s.pid == os.getpid()]  # the harness's own process is no hop
