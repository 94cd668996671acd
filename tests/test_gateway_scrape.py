"""scrape() of real gateways on 127.0.0.1: nginx's stub_status and HAProxy's Prometheus exporter,
each in front of an upstream that never answers, so a known number of requests is held open.
Skipped, with the reason, where the binary is not installed. Also: a metrics page behind a
redirect (LiteLLM answers /metrics with 307 -> /metrics/)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import anyio
import pytest

from probes import scrape
from repro.core.hop import Hop
from repro.core.snapshot import Snapshot
from tests.hostile import hostile_server, respond, silent
from tests.test_probe_dialects import SGLANG_CURRENT

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

STARTUP_S = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server_process(argv: list[str], port: int, log: Path):
    """Start a server in the foreground, wait (bounded) until it accepts on `port`, always kill it."""
    with open(log, "ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"{argv[0]} exited with {process.returncode} at startup: {log.read_text()[-800:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"{argv[0]} did not listen on {port} in {STARTUP_S:g} s: {log.read_text()[-800:]}")
                time.sleep(0.05)
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: nginx/haproxy workers go too
        process.wait(10)


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

NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)

NGINX_CONF = """\
master_process off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location = /nginx_status {{ stub_status; }}
        location / {{
            proxy_pass http://127.0.0.1:{upstream};
            proxy_buffering off;
            proxy_read_timeout 60s;
        }}
    }}
}}
"""


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install nginx) - the stub_status "
                                          "end-to-end test needs a real nginx")
async def test_real_nginx_stub_status(tmp_path):
    port = free_port()
    with hostile_server(silent) as upstream, ExitStack() as held:
        conf = tmp_path / "nginx.conf"
        conf.write_text(NGINX_CONF.format(tmp=tmp_path, port=port, upstream=upstream.port))
        argv = [NGINX, "-c", str(conf), "-p", str(tmp_path), "-e", str(tmp_path / "error.log"), "-g", "daemon off;"]
        with server_process(argv, port, tmp_path / "nginx.out"):
            hop = Hop("nginx", f"http://127.0.0.1:{port}", metrics_url=f"http://127.0.0.1:{port}/nginx_status",
                      role="proxy")
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

HAPROXY = shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy",) if os.access(p, os.X_OK)), None)


def haproxy_has_promex() -> bool:
    if HAPROXY is None:
        return False
    try:
        out = subprocess.run([HAPROXY, "-vv"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "prometheus-exporter" in out


HAPROXY_CONF = """\
global
    maxconn 100
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout queue 60s
frontend prometheus
    bind 127.0.0.1:{stats}
    http-request use-service prometheus-exporter if {{ path /metrics }}
frontend llm
    bind 127.0.0.1:{port}
    default_backend engines
backend engines
    server engine-0 127.0.0.1:{upstream} maxconn 1
"""


@pytest.mark.skipif(not haproxy_has_promex(), reason="haproxy with the Prometheus exporter (USE_PROMEX) is not "
                                                     "installed - Debian's haproxy package has it")
async def test_real_haproxy_exporter(tmp_path):
    port, stats = free_port(), free_port()
    with hostile_server(silent) as upstream, ExitStack() as held:
        conf = tmp_path / "haproxy.cfg"
        conf.write_text(HAPROXY_CONF.format(port=port, stats=stats, upstream=upstream.port))
        with server_process([HAPROXY, "-f", str(conf), "-db"], stats, tmp_path / "haproxy.out"):
            hop = Hop("haproxy", f"http://127.0.0.1:{port}", metrics_url=f"http://127.0.0.1:{stats}/metrics",
                      role="proxy")
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
