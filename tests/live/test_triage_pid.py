"""`repro triage --pid`: a real openai-SDK harness stuck behind a real socat, judged from outside.

The stack: the harness (tests/harnesses/openai_chat.py, AsyncOpenAI or OpenAI) -> socat
(TCP-LISTEN,fork: one child process per connection) -> the simulated engine. A hang is made by
freezing (SIGSTOP) socat's child that serves the harness's connection, or the whole socat; then
`repro triage --pid HARNESS --hop socat --hop engine-0 --window 2 --json` runs from outside, and its
JSON is checked: the harness's connection figures as the kernel has them, and the verdict.

Every process started here is stopped in a finally (SIGCONT first: a stopped process keeps TERM
pending), and every test has a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from probes.sockets import connections_of
from repro.core import events as ev
from repro.sim import SimConfig, serve_in_thread
from tests.support.harness_process import ROOT, harness, run_triage, stop_all

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]

WINDOW = 2.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:  # field 4, after the command name in parentheses
            found.append(int(entry))
    return found


def process_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def freeze(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while any(process_state(p) not in ("T", "t", "Z", "gone") for p in pids):  # Z: a child that just exited
        assert time.monotonic() < deadline, "SIGSTOP did not take"
        time.sleep(0.01)


@contextmanager
def socat(port: int, engine_url: str):
    engine_port = engine_url.rsplit(":", 1)[1]
    process = subprocess.Popen(["socat", f"TCP-LISTEN:{port},fork,reuseaddr,bind=127.0.0.1",
                                f"TCP:127.0.0.1:{engine_port}"], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:  # listening once a connection is accepted (the child it forks just closes)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "socat did not start"
                time.sleep(0.05)
        yield process
    finally:
        stop_all(children_of(process.pid) + [process.pid])
        process.wait(10)


def connection_to(pid: int, port: int) -> str:
    """The local address of pid's established connection to 127.0.0.1:port (waits for it)."""
    deadline = time.monotonic() + 10
    while True:
        found = [c.local for c in connections_of(pid) if c.remote == f"127.0.0.1:{port}" and c.state == "ESTABLISHED"]
        if found:
            return found[-1]
        assert time.monotonic() < deadline, f"pid {pid} has no connection to port {port}"
        time.sleep(0.02)


def child_serving(socat_pid: int, client_local: str) -> int:
    """socat's per-connection child whose accepted socket is the client's connection."""
    deadline = time.monotonic() + 10
    while True:
        for child in children_of(socat_pid):
            try:
                if any(c.remote == client_local for c in connections_of(child)):
                    return child
            except Exception:  # a child exiting meanwhile
                continue
        assert time.monotonic() < deadline, f"no socat child serves {client_local}"
        time.sleep(0.02)


@dataclass
class Stuck:
    """A harness stuck behind socat, and what triage said about it."""

    code: int
    result: dict
    stderr: str
    harness_pid: int
    socat_port: int
    stuck_since: float  # wall clock: no byte can have arrived since
    last_byte_before: float  # wall clock: the harness's last byte arrived before this
    triage_started: float
    triage_ended: float

    @property
    def verdict(self) -> dict | None:
        return self.result["verdicts"][0] if self.result.get("verdicts") else None

    def harness_connections(self) -> list[dict]:
        (read,) = [r for r in self.result["sockets"] if r["pid"] == self.harness_pid]
        assert read["error"] is None, read
        return read["connections"]

    def to_socat(self) -> list[dict]:
        return [c for c in self.harness_connections() if c["hop"] == "socat"]


def stuck_behind_socat(client: str, freeze_what: str, *, engine: SimConfig | None = None) -> Stuck:
    """Make the hang, triage it, undo it all."""
    with serve_in_thread(engine or SimConfig(keepalive=60)) as sim:
        port = free_port()
        with socat(port, sim.url) as proxy, harness(client, f"http://127.0.0.1:{port}/v1", think=1.0) as h:
            if freeze_what == "child-between-rounds":
                # The async client reuses its one connection: freeze its socat child while the harness
                # thinks; the next round's request lands in the frozen child's receive buffer.
                h.wait_for("done", 2)
                last_byte_before = time.time()
                freeze([child_serving(proxy.pid, connection_to(h.pid, port))])
                stuck_since = h.wait_for("start", 3)["t"]
            elif freeze_what == "child-after-headers":
                # The async client's reused connection: round 2's response headers come at once, its
                # first token after a slow prefill (1.5 s); freeze the child in between.
                h.wait_for("start", 2)
                time.sleep(0.4)
                freeze([child_serving(proxy.pid, connection_to(h.pid, port))])
                stuck_since = last_byte_before = time.time()
            elif freeze_what == "child-before-first-token":
                # The sync client opens a new connection per completion: freeze the child serving this
                # round's connection after it forwarded the request and the response headers (the
                # engine sends them at once), before the first token (a slow prefill: 1.5 s). The
                # engine then answers into the frozen child and idles.
                start = h.wait_for("start", 2)
                local = connection_to(h.pid, port)
                freeze([child_serving(proxy.pid, local)])
                stuck_since = start["t"]
                last_byte_before = time.time()
            else:  # the whole socat: the listener and every child
                h.wait_for("done", 2)
                last_byte_before = time.time()
                freeze([proxy.pid, *children_of(proxy.pid)])
                stuck_since = h.wait_for("start", 3)["t"]
            time.sleep(1.0)
            code, result, err, started, ended = run_triage(
                "--pid", str(h.pid), "--hop", f"name=socat,url=http://127.0.0.1:{port}/v1,role=proxy",
                "--hop", f"name=engine-0,url={sim.url},role=engine", "--window", str(WINDOW), "--json")
            stuck_round = 2 if freeze_what in ("child-before-first-token", "child-after-headers") else 3
            assert not [line for line in h.drain() if line["event"] == "done" and line["round"] >= stuck_round], \
                "the harness was not stuck"
            return Stuck(code, result, err, h.pid, port, stuck_since, last_byte_before, started, ended)


def assert_waiting_on_socat(stuck: Stuck, *, received_anything: bool) -> dict:
    """The harness's connection to socat: established, its request acknowledged, nothing unread,
    and no byte received for about as long as it has been stuck."""
    assert stuck.result.get("sockets"), stuck.stderr
    (conn,) = [c for c in stuck.to_socat() if c["state"] == "ESTABLISHED"]
    assert conn["remote"] == f"127.0.0.1:{stuck.socat_port}" and conn["pid"] == stuck.harness_pid
    assert conn["rqueue"] == 0, conn  # nothing waits unread: the harness reads all that came
    assert conn["wqueue"] == 0 and conn["unacked"] == 0 and conn["bytes_acked"] > 0, conn  # request acknowledged
    assert conn["retransmits"] == 0
    assert (conn["bytes_received"] > 0) is received_anything, conn
    # No byte for as long as it has been stuck (read at the last look, near the end of the window)...
    assert conn["last_data_recv_s"] >= stuck.triage_started - stuck.stuck_since - 0.2, conn
    # ...and not much longer: the last byte came just before.
    assert conn["last_data_recv_s"] <= stuck.triage_ended - stuck.last_byte_before + 1.5, conn
    return conn


# --- a frozen per-connection child: fresh connections work, the harness's own one is wedged -------

@pytest.fixture(scope="module")
def async_child_frozen() -> Stuck:
    return stuck_behind_socat("async", "child-between-rounds")


@pytest.fixture(scope="module")
def sync_child_frozen() -> Stuck:
    return stuck_behind_socat("sync", "child-before-first-token", engine=SimConfig(keepalive=60, ttft=1.5))


@pytest.mark.network
def test_async_sdk_stuck_on_its_reused_connection_shows_in_its_socket(async_child_frozen):
    stuck = async_child_frozen
    conn = assert_waiting_on_socat(stuck, received_anything=True)  # rounds 1 and 2 came on this connection
    assert conn["last_data_sent_s"] < conn["last_data_recv_s"]  # round 3's request went out after the last byte in
    # One connection to socat: the async client reuses it for every round.
    assert len(stuck.to_socat()) == 1
    # Fresh paths work: socat's canary got a new child, the engine answers and idles.
    hops = {h["name"]: h for h in stuck.result["hops"]}
    assert hops["socat"]["canary"]["ok"] and hops["engine-0"]["canary"]["ok"], stuck.stderr


@pytest.mark.network
def test_sync_sdk_stuck_before_its_first_token_shows_in_its_socket(sync_child_frozen):
    stuck = sync_child_frozen
    conn = assert_waiting_on_socat(stuck, received_anything=True)
    # A new connection (round 2's own): the request, acknowledged by the frozen child's kernel; only
    # the response headers came back, right after it.
    assert conn["bytes_acked"] > 200 and conn["bytes_received"] < 400, conn
    assert conn["last_data_recv_s"] <= conn["last_data_sent_s"], conn
    hops = {h["name"]: h for h in stuck.result["hops"]}
    assert hops["socat"]["canary"]["ok"] and hops["engine-0"]["canary"]["ok"], stuck.stderr


def _assert_wedged_at_socat(stuck: Stuck) -> None:
    verdict = stuck.verdict
    assert stuck.code == 10, stuck.stderr
    assert (verdict["side"], verdict["where"], verdict["kind"]) == ("client", "socat", "connection-wedged"), verdict


@pytest.mark.network
def test_async_sdk_frozen_socat_child_is_a_connection_wedge_at_socat(async_child_frozen):
    stuck = async_child_frozen
    _assert_wedged_at_socat(stuck)
    # What triage saw, not its window: round 3's request went out and nothing came since.
    verdict = stuck.verdict
    assert verdict["phase"] == "before-first-byte" and verdict["confidence"] == "high", verdict
    assert stuck.triage_started - stuck.stuck_since - 0.3 <= verdict["stalled_for_s"] \
        <= stuck.triage_ended - stuck.stuck_since + 0.5, (verdict["stalled_for_s"], stuck)
    assert "1 connection(s) wait (request sent and acknowledged, nothing received since)" in verdict["summary"]


@pytest.mark.network
def test_sync_sdk_frozen_socat_child_is_a_connection_wedge_at_socat(sync_child_frozen):
    """The response headers came, then nothing: the socket alone looks like an idle pooled
    connection; the harness's thread blocked in poll on that very socket is what names socat."""
    stuck = sync_child_frozen
    _assert_wedged_at_socat(stuck)
    verdict = stuck.verdict
    assert "are read by a blocked thread after an answer began and stopped" in verdict["summary"], verdict
    (conn,) = [c for c in stuck.to_socat() if c["state"] == "ESTABLISHED"]
    (read,) = stuck.result["threads"]
    (reader,) = [t for t in read["threads"] if conn["inode"] in t["sockets"]]
    assert reader["syscall"] in ("poll", "ppoll", "recvfrom", "read") and not reader["via_epoll"], reader
    # An answer began: mid-stream or after its last event, the kernel cannot tell; the stall is
    # counted from the connection's last byte received.
    assert verdict["phase"] is None, verdict
    assert abs(verdict["stalled_for_s"] - conn["last_data_recv_s"]) < 0.01, (verdict["stalled_for_s"], conn)


# --- the whole socat frozen: nothing gets through it ---------------------------------------------

@pytest.mark.network
@pytest.mark.parametrize("client", ["sync", "async"])
def test_a_frozen_socat_is_client_side_at_socat(client):
    stuck = stuck_behind_socat(client, "whole")
    # sync: round 3 opened a new connection, which the frozen socat never accepted (the kernel did:
    # it is established and its request acknowledged), so not one byte came on it. async: its
    # reused connection, to a frozen child.
    assert_waiting_on_socat(stuck, received_anything=client == "async")
    hops = {h["name"]: h for h in stuck.result["hops"]}
    assert not hops["socat"]["canary"]["ok"] and hops["engine-0"]["canary"]["ok"], stuck.stderr
    assert stuck.code == 10, stuck.stderr
    verdict = stuck.verdict
    assert (verdict["side"], verdict["where"]) == ("client", "socat"), verdict


@pytest.mark.network
def test_the_sync_sdk_opens_a_new_connection_for_every_streamed_completion():
    """Counted, not assumed: OpenAI (sync) stops reading at data: [DONE] and closes the response
    without draining the chunked body's end, so httpx cannot reuse the connection; AsyncOpenAI drains
    it on HTTP/1.1 and keeps one connection."""
    with serve_in_thread(SimConfig(keepalive=60)) as sim:
        counts = {}
        for client in ("sync", "async"):
            port = free_port()
            with socat(port, sim.url) as proxy, harness(client, f"http://127.0.0.1:{port}/v1", think=0.2) as h:
                seen: set[str] = set()
                for round_index in (1, 2, 3, 4):
                    h.wait_for("start", round_index)
                    seen.add(connection_to(h.pid, port))
                    h.wait_for("done", round_index)
                counts[client] = len(seen)
                assert proxy.poll() is None
    assert counts == {"sync": 4, "async": 1}


# --- the error cases: one line, exit 2 ------------------------------------------------------------

def triage_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "repro", "triage", *args], capture_output=True, text=True, timeout=30,
                          cwd=ROOT)


@pytest.mark.network
def test_a_pid_that_does_not_exist_is_a_one_line_error():
    gone = subprocess.Popen(["true"])
    gone.wait(5)
    out = triage_cli("--pid", str(gone.pid), "--hop", "name=engine-0,url=http://127.0.0.1:9")
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and f"pid {gone.pid}: no such process" in out.stderr, out.stderr


@pytest.mark.network
def test_pid_without_hops_is_a_usage_error():
    out = triage_cli("--pid", str(os.getpid()))
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "--pid needs the stack's hops" in out.stderr, out.stderr


def _run_cli_as(user: str, argv: list[str], timeout: float = 20.0) -> tuple[int, str]:
    """repro's CLI in a forked child that dropped to `user`: the interpreter lives under /root (0700),
    which another user could not exec; a fork keeps the modules already loaded."""
    import netrc  # noqa: F401  (httpx reads ~/.netrc lazily: the child could not import it)
    import pwd

    import probes.sockets  # noqa: F401  (loaded before the fork: the child may not read /root)
    import repro.cli
    import repro.commands.options  # noqa: F401
    import repro.commands.run  # noqa: F401
    import repro.commands.triage  # noqa: F401
    import repro.live.triage  # noqa: F401
    import repro.reporting.terminal  # noqa: F401

    repro.cli.build_parser()  # every command's module (harness's pulls in mitmproxy, cryptography, hmac)
    account = pwd.getpwnam(user)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        code = 99
        try:
            os.close(read_end)
            os.dup2(write_end, 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            sys.stderr = os.fdopen(2, "w", buffering=1)  # pytest's capture replaced the object, not fd 2
            sys.stdout = os.fdopen(1, "w")
            os.setgroups([])
            os.setgid(account.pw_gid)
            os.setuid(account.pw_uid)
            code = repro.cli.main(argv)
        except BaseException as exc:
            os.write(2, f"child failed: {exc!r}\n".encode())
        finally:
            sys.stderr.flush()
            os._exit(code)
    os.close(write_end)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode()


@pytest.mark.network
def test_another_users_process_needs_that_user_or_root():
    hop = "name=engine-0,url=http://127.0.0.1:9"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("nobody")
        except KeyError:
            pytest.skip("no user 'nobody' to drop to")
        target = subprocess.Popen(["sleep", "30"])  # root's process, read by nobody
        try:
            code, err = _run_cli_as("nobody", ["triage", "--pid", str(target.pid), "--hop", hop])
        finally:
            target.kill()
            target.wait(5)
        assert code == 2, err
        assert err.count("\n") == 1 and f"pid {target.pid} belongs to user root" in err, err
        assert err.rstrip().endswith("run repro as that user or as root"), err
    else:
        if os.stat("/proc/1").st_uid == os.geteuid():
            pytest.skip("pid 1 is ours: no process of another user to read")
        out = triage_cli("--pid", "1", "--hop", hop)
        assert out.returncode == 2 and "run repro as that user or as root" in out.stderr, out.stderr


# --- the plumbing, without processes ----------------------------------------------------------------

def test_each_connection_is_named_by_its_hop_and_the_unknown_ones_kept_and_marked():
    from probes.sockets import NoSuchProcess
    from repro.commands.triage import NO_HOP, socket_table
    from repro.core.hop import Hop
    from repro.core.socket_state import SocketState
    from repro.live.triage import read_pid_sockets

    hops = [Hop("proxy", "http://localhost:8080/v1", role="proxy"), Hop("engine-0", "http://127.0.0.1:30000")]
    found = [SocketState(local="127.0.0.1:5", remote="10.1.1.1:5432", state="ESTABLISHED", pid=42),
             SocketState(local="127.0.0.1:6", remote="127.0.0.1:30000", state="ESTABLISHED", pid=42),
             SocketState(local="127.0.0.1:7", remote="[::1]:8080", state="CLOSE_WAIT", pid=42)]
    read = read_pid_sockets(42, hops, 1.5, read=lambda pid: found)
    assert [s.socket.hop for s in read.connections] == ["proxy", "engine-0", None]  # hops' order, unknown last
    assert all(s.conv is None and s.round is None and s.t == 1.5 for s in read.connections)
    as_json = read.to_dict()
    assert as_json["error"] is None and [c["hop"] for c in as_json["connections"]] == ["proxy", "engine-0", None]
    assert as_json["connections"][2]["remote"] == "10.1.1.1:5432"
    rendered = socket_table(read)
    assert [c.header for c in rendered.columns][:3] == ["remote", "hop", "state"]
    assert NO_HOP in list(rendered.columns[1].cells)

    def gone(pid):
        raise NoSuchProcess(f"pid {pid}: no such process (has it exited?)")

    failed = read_pid_sockets(42, hops, 2.0, read=gone)  # exited during the window: recorded, not raised
    assert failed.connections == [] and failed.error.startswith("pid 42: no such process")
    assert "connections not read" in socket_table(failed)


@pytest.mark.network
def test_a_harness_that_stopped_reading_is_client_side_the_harness_itself():
    """The harness is frozen (SIGSTOP) mid-stream while the engine goes on sending: bytes pile up
    unread in its own receive queue. The harness, not the stack: client side, at the client."""
    with serve_in_thread(SimConfig(keepalive=60, itl=0.001)) as sim, \
            harness("async", sim.url + "/v1", think=0.5, max_tokens=20000) as h:
        h.wait_for("start", 1)
        time.sleep(0.5)  # the stream is flowing
        os.kill(h.pid, signal.SIGSTOP)
        try:
            time.sleep(1.0)  # the engine's tokens land in the frozen harness's receive queue
            out = triage_cli("--pid", str(h.pid), "--hop", f"name=engine-0,url={sim.url},role=engine",
                             "--window", "1.5", "--json")
        finally:
            os.kill(h.pid, signal.SIGCONT)
    assert out.returncode == 10, out.stderr
    result = json.loads(out.stdout)
    (read,) = [r for r in result["sockets"] if r["pid"] == h.pid]
    assert any(c["hop"] == "engine-0" and c["rqueue"] > 0 for c in read["connections"]), read
    verdict = result["verdicts"][0]
    assert (verdict["side"], verdict["where"], verdict["kind"]) == ("client", "client", "client-overloaded"), verdict
    assert f"wait unread in pid {h.pid}'s receive queue" in verdict["summary"]


def test_threads_are_printed_with_the_connections_they_wait_on_and_why_stacks_are_missing():
    from rich.console import Console

    from repro.commands.triage import thread_table
    from repro.core.socket_state import SocketState
    from repro.core.thread_state import ProcessThreads, ThreadState
    from repro.core.verdict import Verdict
    from repro.live.triage import PidSockets
    from repro.reporting.terminal import verdict_panel

    sockets = PidSockets(42, 2.0, [ev.SocketSample(t=2.0, socket=SocketState(
        local="127.0.0.1:5", remote="127.0.0.1:8080", state="ESTABLISHED", pid=42, inode=77, hop="nginx"))])
    read = ProcessThreads(pid=42, t=2.0, stacks_error="py-spy failed: Permission Denied", threads=[
        ThreadState(tid=42, name="MainThread", state="S", syscall="poll", wchan="poll_schedule_timeout", sockets=[77]),
        ThreadState(tid=43, name="worker", state="S", syscall="futex", stack=["acquire (h.py:3)", "run (h.py:9)"])])
    console = Console(width=140, record=True)
    console.print(thread_table(read, sockets))
    text = console.export_text()
    assert "poll (poll_schedule_timeout)" in text and "127.0.0.1:8080 (nginx)" in text
    assert "acquire (h.py:3)" in text and "Python stacks not read: py-spy failed: Permission Denied" in text
    assert "threads not read" in thread_table(ProcessThreads(pid=42, t=2.0, error="pid 42: no such process"))
    # A verdict whose phase and stall were not observed says so, never a number it did not see.
    verdict = Verdict(side="client", where="nginx", kind="request-withheld", confidence="high", phase=None,
                      conversation=0, round=0, stalled_for_s=None, evidence=[], ruled_out=[], summary="s")
    console = Console(width=140, record=True)
    console.print(verdict_panel(verdict))
    assert "phase unknown, stalled for an unknown time" in console.export_text()


@pytest.mark.network
def test_async_sdk_stuck_after_its_response_headers_is_named_by_the_bytes_socat_holds():
    """AsyncOpenAI's reused connection, its answer begun (headers) and stopped at a frozen socat child.
    Its own socket looks like an idle pooled one, and its event loop watches it (some clients keep
    idle ones watched too): that alone names nobody. The hop's side does: socat's child serving
    this very connection holds the engine's tokens unread in its upstream socket."""
    stuck = stuck_behind_socat("async", "child-after-headers", engine=SimConfig(keepalive=60, ttft=1.5))
    (conn,) = [c for c in stuck.to_socat() if c["state"] == "ESTABLISHED"]
    assert conn["rqueue"] == 0 and conn["wqueue"] == 0 and conn["last_data_recv_s"] <= conn["last_data_sent_s"], conn
    (read,) = stuck.result["threads"]
    (loop,) = [t for t in read["threads"] if conn["inode"] in t["sockets"]]
    assert loop["via_epoll"] and loop["syscall"] in ("epoll_wait", "epoll_pwait"), loop
    (pid_read,) = stuck.result["sockets"]
    upstream = [s for s in pid_read["hop_side"] if s["serves"] == conn["local"] and s["rqueue"] > 0]
    assert upstream and upstream[0]["remote"] != conn["local"] and upstream[0]["hop"] == "socat", pid_read["hop_side"]
    verdict = stuck.verdict
    assert stuck.code == 10, stuck.stderr
    assert (verdict["side"], verdict["where"], verdict["kind"], verdict["confidence"]) == \
        ("client", "socat", "connection-wedged", "high"), verdict["summary"]
    assert f"socat's process (pid {upstream[0]['pid']}) serving {conn['local']} has " in verdict["summary"]
    assert verdict["phase"] is None  # an answer began: the kernel cannot tell mid-stream from after the last event
