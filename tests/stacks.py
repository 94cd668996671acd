"""Real third-party proxies for end-to-end tests, started on 127.0.0.1 and always stopped.

nginx (Debian package) as users run it in front of an engine, and plain mitmdump (no addon),
which buffers whole response bodies by default (mitmproxy docs, "Streaming"): the buffering
reverse proxy of a real stack. Each waits (bounded) until its port accepts connections.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from repro.core.process import stop_child

START_TIMEOUT_S = 15.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_listening(port: int, process: subprocess.Popen, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            detail = log.read_text()[-500:] if log and log.exists() else ""
            raise RuntimeError(f"{what} exited with {process.returncode} before listening: {detail}")
        with socket.socket() as sock:
            sock.settimeout(0.2)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {START_TIMEOUT_S:g} s")


@dataclass
class Proxy:
    process: subprocess.Popen
    url: str
    status_url: str | None = None  # nginx stub_status page

    def pids(self) -> list[int]:
        """The master and its workers: freezing a proxy means stopping all of them."""
        children = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    if int(fields[1]) == self.process.pid:
                        children.append(int(entry.name))
        return [self.process.pid, *children]

    def signal_all(self, signum: int) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)


@contextlib.contextmanager
def nginx(upstream: str, tmp_path: Path) -> Iterator[Proxy]:
    """nginx reverse-proxying `upstream` with the settings SSE guides give (HTTP/1.1 upstream
    keep-alive, buffering off), and a stub_status page at /nginx_status."""
    if shutil.which("nginx") is None:
        pytest.skip("nginx is not installed (Debian package nginx; .ci/run installs it)")
    prefix = tmp_path / "nginx"
    (prefix / "tmp").mkdir(parents=True, exist_ok=True)
    port = free_port()
    target = urlsplit(upstream).netloc
    conf = prefix / "nginx.conf"
    conf.write_text(f"""
worker_processes 1;
user root;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    upstream engine {{ server {target}; keepalive 16; }}
    server {{
        listen 127.0.0.1:{port};
        location = /nginx_status {{ stub_status; }}
        location / {{
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 300s;
        }}
    }}
}}
""")
    process = subprocess.Popen(["nginx", "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proxy = Proxy(process, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/nginx_status")
    try:
        wait_listening(port, process, "nginx", prefix / "error.log")
        yield proxy
    finally:
        proxy.signal_all(signal.SIGCONT)  # a test may have frozen it
        stop_child(process)


@contextlib.contextmanager
def buffering_mitmdump(upstream: str, tmp_path: Path) -> Iterator[Proxy]:
    """Plain mitmdump in reverse mode, no addon: it reads each response whole before sending any."""
    port = free_port()
    mitmdump = Path(sys.executable).with_name("mitmdump")
    log = tmp_path / "mitmdump.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(mitmdump), "--mode", f"reverse:{upstream}@127.0.0.1:{port}", "--set",
             f"confdir={tmp_path / 'mitm'}", "--set", "termlog_verbosity=warn"],
            stdout=out, stderr=subprocess.STDOUT)
    proxy = Proxy(process, f"http://127.0.0.1:{port}")
    try:
        wait_listening(port, process, "mitmdump", log)
        yield proxy
    finally:
        stop_child(process)
