"""`repro watch`'s HTTP server on --listen: /metrics (Prometheus), / (the status page),
/status.json (what the page polls), all read from the one WatchStatus at request time.

aiohttp.web, in the watch's own event loop (aiohttp is already the driver's client): no thread,
no second loop, and a request reads the status between two events, never half-way through one.
The listening socket is bound by the command before anything starts (`bind_listen`), so a port in
use is a one-line usage error with nothing started and nothing to lose.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import socket
from dataclasses import dataclass

import anyio
from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from repro.core.errors import UsageError
from repro.core.watch_status import DEFAULT_LISTEN, WatchStatus
from repro.reporting.watch_page import render_watch_page


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:  # a host name: it may resolve anywhere
            return False

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen(text: str) -> Listen:
    """HOST:PORT, [IPv6]:PORT; a one-line usage error naming --listen otherwise."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]") if host.startswith("[") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"--listen {text!r} is not HOST:PORT; give e.g. {DEFAULT_LISTEN}")
    return Listen(host, int(port))


def bind_listen(listen: Listen) -> socket.socket:
    """The listening socket, bound now: a port in use is said here, before anything starts."""
    try:
        infos = socket.getaddrinfo(listen.host, listen.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"--listen {listen}: cannot resolve {listen.host!r} ({exc.strerror}); give an address "
                         f"such as {DEFAULT_LISTEN}") from None
    family, _type, _proto, _name, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(64)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(f"--listen {listen}: the port is in use (another repro watch, or an exporter); give a "
                             f"free one, e.g. --listen {listen.host}:0 picks any") from None
        raise UsageError(f"--listen {listen}: cannot listen there ({exc.strerror}); give an address of this "
                         f"host, e.g. {DEFAULT_LISTEN}") from None
    sock.setblocking(False)
    return sock


def bound_address(sock: socket.socket) -> Listen:
    host, port = sock.getsockname()[:2]
    return Listen(host, port)


def watch_app(status: WatchStatus, registry: CollectorRegistry) -> web.Application:
    async def metrics(_request: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def page(_request: web.Request) -> web.Response:
        return web.Response(text=render_watch_page(status.to_dict()), content_type="text/html")

    async def status_json(_request: web.Request) -> web.Response:
        return web.Response(text=json.dumps(status.to_dict()), content_type="application/json")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/", page)
    app.router.add_get("/status.json", status_json)
    return app


async def serve(sock: socket.socket, status: WatchStatus, registry: CollectorRegistry) -> None:
    """Serve until cancelled; then stop within a bounded time (open scrapes are cut, not waited on)."""
    runner = web.AppRunner(watch_app(status, registry), access_log=None, handle_signals=False,
                           shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.SockSite(runner, sock).start()
        await anyio.sleep_forever()
    finally:
        with anyio.move_on_after(3.0, shield=True):
            await runner.cleanup()
