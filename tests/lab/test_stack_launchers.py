"""The real-proxy launchers of repro.lab.stacks: each streams a request to the engine behind it, lists
the processes a fault freezes, freezes and thaws, talks to 127.0.0.1 only, and leaves nothing
behind (no process in its group, no listening port)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from repro.lab.stacks import process_group, slow_upload
from repro.sim import SimConfig, start_sim_process
from tests.support.stacks import buffering_mitmdump, caddy, haproxy, nginx, socat, started

pytestmark = [pytest.mark.network, pytest.mark.timeout(60), pytest.mark.slow]

LAUNCHERS = {"nginx": nginx, "haproxy": haproxy, "socat": socat, "caddy": caddy, "mitmdump": buffering_mitmdump}
BODY = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}


@pytest.fixture(scope="module")
def engine():
    with start_sim_process(SimConfig(itl=0.002)) as sim:
        yield sim


def stream(url: str, timeout: float = 5.0) -> str:
    with httpx.Client(trust_env=False, timeout=timeout) as client:
        response = client.post(url + "/v1/chat/completions", json=BODY)
        assert response.status_code == 200, response.text[:200]
        return response.text


def listening(url: str) -> bool:
    parts = urlsplit(url)
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((parts.hostname, parts.port)) == 0


def socket_addresses(pids: list[int]) -> set[str]:
    """Every local and remote IPv4/IPv6 address of the TCP sockets these processes hold."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = fd.readlink().as_posix()
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    addresses = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                for end in (fields[1], fields[2]):
                    hex_ip = end.split(":")[0]
                    if len(hex_ip) == 8:
                        addresses.add(socket.inet_ntop(socket.AF_INET, bytes.fromhex(hex_ip)[::-1]))
                    else:  # /proc/net/tcp6: four little-endian 32-bit words
                        raw = b"".join(bytes.fromhex(hex_ip[i:i + 8])[::-1] for i in range(0, 32, 8))
                        addresses.add(socket.inet_ntop(socket.AF_INET6, raw))
    return addresses


@pytest.mark.parametrize("kind", sorted(LAUNCHERS))
def test_launcher_streams_freezes_thaws_and_leaves_nothing(kind, engine, tmp_path):
    with started(LAUNCHERS[kind], engine.url, tmp_path) as proxy:
        assert "data: [DONE]" in stream(proxy.url)
        pids = proxy.pids()
        assert pids and pids[0] == proxy.process.pid
        if kind in ("nginx", "haproxy"):
            assert proxy.children(), f"{kind}: master and workers expected, got {pids}"
        if proxy.metrics_url:
            assert httpx.get(proxy.metrics_url, timeout=5, trust_env=False).status_code == 200
        # Only 127.0.0.1 (or a listener's unspecified peer): nothing leaves the machine.
        addresses = socket_addresses(proxy.pids())
        assert addresses <= {"127.0.0.1", "0.0.0.0", "::", "::ffff:127.0.0.1"}, addresses
        proxy.freeze()
        with pytest.raises(httpx.TimeoutException):
            stream(proxy.url, timeout=0.5)
        proxy.thaw()
        assert "data: [DONE]" in stream(proxy.url)
        group = proxy.process.pid
    assert proxy.process.poll() is not None
    assert not process_group(group), f"{kind} left processes behind"
    assert not listening(proxy.url)
    assert proxy.metrics_url is None or not listening(proxy.metrics_url)


def test_a_frozen_launcher_still_stops(engine, tmp_path):
    started_at = time.monotonic()
    with started(nginx, engine.url, tmp_path) as proxy:
        proxy.freeze()
    assert proxy.process.poll() is not None and not process_group(proxy.process.pid)
    assert time.monotonic() - started_at < 10


def test_socat_forks_a_child_per_connection_and_freezing_them_spares_fresh_ones(engine, tmp_path):
    with started(socat, engine.url, tmp_path) as proxy:
        with httpx.Client(trust_env=False, timeout=5) as kept:
            assert kept.post(proxy.url + "/v1/chat/completions", json=BODY).status_code == 200
            deadline = time.monotonic() + 5
            while not proxy.children() and time.monotonic() < deadline:
                time.sleep(0.02)
            children = proxy.freeze(children_only=True)
            assert children and proxy.process.pid not in children
            with pytest.raises(httpx.TimeoutException):  # the kept connection's child is frozen
                kept.post(proxy.url + "/v1/chat/completions", json=BODY, timeout=0.5)
            assert "data: [DONE]" in stream(proxy.url)  # a fresh connection gets a fresh child
            proxy.thaw()


def test_haproxy_maxconn_queues_behind_a_slow_upload(engine, tmp_path):
    """maxconn 1: a client that sent only headers holds the one server slot; the next request
    waits in HAProxy's queue, HAProxy's exporter says so while the engine runs nothing, and the
    request goes through once the slow client leaves."""
    with started(haproxy, engine.url, tmp_path, maxconn=1) as proxy:
        blocker = slow_upload(proxy.url)
        waiting: list[str] = []
        thread = threading.Thread(target=lambda: waiting.append(stream(proxy.url, timeout=10)), daemon=True)
        try:
            time.sleep(0.3)
            thread.start()
            time.sleep(0.7)
            assert thread.is_alive(), "the request should wait behind the slow client"
            page = httpx.get(proxy.metrics_url, timeout=5, trust_env=False).text
            engine_page = httpx.get(engine.metrics_url, timeout=5, trust_env=False).text
        finally:
            blocker.close()
        thread.join(10)
        assert waiting and "data: [DONE]" in waiting[0]
    assert gauge(page, "haproxy_backend_current_queue") >= 1, page[:500]
    assert gauge(engine_page, "sglang:num_running_reqs") == 0


def gauge(page: str, name: str) -> float:
    return sum(float(line.split()[-1]) for line in page.splitlines() if line.startswith((name + "{", name + " ")))
