"""scrape() of real gateways on 127.0.0.1: nginx's stub_status and HAProxy's Prometheus exporter,
each in front of an upstream that never answers, so a known number of requests is held open.
Skipped, with the reason, where the binary is not installed. Also: a metrics page behind a
redirect (LiteLLM answers /metrics with 307 -> /metrics/)."""

from __future__ import annotations

import socket
import time
from contextlib import ExitStack

import anyio
import pytest

from probes import scrape
from repro.core.hop import Hop
from repro.core.snapshot import Snapshot
from tests.support.hostile import hostile_server, respond, silent
from tests.support.metric_pages import SGLANG_CURRENT
from tests.support.stacks import haproxy, nginx, started

pytestmark = [pytest.mark.network, pytest.mark.anyio, pytest.mark.timeout(60)]

def hold(port: int, n: int, stack: ExitStack, path: str = "/v1/chat/completions") -> None:
    """n requests sent whole through the gateway; their sockets stay open until the stack closes."""
    for _ in range(n):
        sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5))
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: gw\r\ncontent-type: application/json\r\n"
                     f"content-length: 2\r\n\r\n{{}}".encode())


async def scrape_until(hop: Hop, want, timeout: float = 10.0) -> Snapshot:
    """Scrape until `want(snapshot)` or the deadline; the last snapshot either way."""
    deadline = time.monotonic() + timeout
    while True:
        snapshot = await scrape(hop, timeout=2)
        if (snapshot.ok and want(snapshot)) or time.monotonic() > deadline:
            return snapshot
        await anyio.sleep(0.1)


# --- nginx --------------------------------------------------------------------------------------

async def test_real_nginx_stub_status(tmp_path):
    with hostile_server(silent) as upstream, ExitStack() as held, \
            started(nginx, f"http://127.0.0.1:{upstream.port}", tmp_path) as proxy:
        port = int(proxy.url.rsplit(":", 1)[1])
        hop = Hop("nginx", proxy.url, metrics_url=proxy.metrics_url, role="proxy")
        idle = await scrape(hop, timeout=2)
        assert idle.ok, idle.error
        assert (idle.dialect, idle.in_flight, idle.series["stub_status.writing"]) == ("nginx", 0, 1)

        hold(port, 3, held)  # proxied to an upstream that never answers: Writing
        keepalive = held.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5))
        keepalive.sendall(b"GET /nginx_status HTTP/1.1\r\nHost: gw\r\n\r\n")
        assert b"Active connections" in keepalive.recv(4096)  # answered, then idle: Waiting
        partial = held.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5))
        partial.sendall(b"GET /v1/models HTTP/1.1\r\nHo")  # header still arriving: Reading

        busy = await scrape_until(hop, lambda s: s.in_flight == 4 and s.series["stub_status.waiting"] >= 1)
        assert busy.ok, busy.error
        assert busy.in_flight == 4, busy.series  # 3 held + 1 reading; not the idle one, not this scrape
        assert busy.series["stub_status.reading"] == 1 and busy.series["stub_status.waiting"] == 1
        assert busy.hop == "nginx" and busy.url.endswith("/nginx_status") and 0 < busy.scrape_s < 2


# --- HAProxy ------------------------------------------------------------------------------------

async def test_real_haproxy_exporter(tmp_path):
    with hostile_server(silent) as upstream, ExitStack() as held, \
            started(haproxy, f"http://127.0.0.1:{upstream.port}", tmp_path, maxconn=1) as proxy:
        port = int(proxy.url.rsplit(":", 1)[1])
        hop = Hop("haproxy", proxy.url, metrics_url=proxy.metrics_url, role="proxy")
        hold(port, 3, held)  # maxconn 1: one on the server, two in the backend queue
        s = await scrape_until(hop, lambda s: s.in_flight == 3 and s.queued == 2)
        assert s.ok, s.error
        assert (s.dialect, s.in_flight, s.queued) == ("haproxy", 3, 2)
        [server] = s.backends
        assert (server["name"], server["in_flight"], server["queued"], server["healthy"], server["state"]) == (
            "engines/engine-0", 1, 0, True, "UP")
        assert s.series["haproxy_frontend_current_sessions"] >= 4  # the 3 and this scrape: why it is not used


# --- redirects ----------------------------------------------------------------------------------


async def test_scrape_follows_a_redirect_to_the_page():
    async def behaviour(reader, writer, index) -> bool:
        if index == 0:
            writer.write(b"HTTP/1.1 307 Temporary Redirect\r\nlocation: /metrics/\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()
            return True
        return await respond("200 OK", SGLANG_CURRENT.encode())(reader, writer, index)

    with hostile_server(behaviour) as server:
        snapshot = await scrape(Hop("litellm", f"http://127.0.0.1:{server.port}", role="engine"), timeout=2)
    assert snapshot.ok, snapshot.error
    assert snapshot.running == 12 and snapshot.url == f"http://127.0.0.1:{server.port}/metrics"
    assert [r["head"].split(b" ")[1] for r in server.requests] == [b"/metrics", b"/metrics/"]
