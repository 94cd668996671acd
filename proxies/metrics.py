"""The proxy's own state as Prometheus metrics, and the small admin HTTP endpoint beside them.

One port (127.0.0.1 only) answers:
    GET    /metrics   Prometheus text (own CollectorRegistry, so tests and several proxies in one
                      process never collide on the global registry)
    GET    /state     JSON: armed fault, open and held flows
    POST   /fault     {"spec": "wedge-after=2"}  arm a fault (400 with a one-line reason if bad)
    DELETE /fault     disarm (held flows stay held until released)
    POST   /release   release every held flow
The admin part lets a subprocess proxy (mitmdump) be armed at round N of a run.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest


class ProxyMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.open_flows = Gauge("repro_proxy_open_flows", "HTTP flows the proxy has open", registry=r)
        self.held_flows = Gauge("repro_proxy_held_flows", "flows the proxy holds on purpose (a fault)", registry=r)
        self.requests = Counter("repro_proxy_requests", "requests seen from clients", registry=r)
        self.events_forwarded = Counter("repro_proxy_events_forwarded", "SSE events forwarded to clients", registry=r)
        self.bytes_forwarded = Counter("repro_proxy_bytes_forwarded", "response body bytes forwarded to clients", registry=r)
        self.faults_applied = Counter("repro_proxy_faults_applied", "times a fault took effect", ["fault"], registry=r)
        self.fault_armed = Gauge("repro_proxy_fault_armed", "1 for the armed fault", ["fault"], registry=r)

    def set_armed(self, name: str | None) -> None:
        self.fault_armed.clear()
        if name:
            self.fault_armed.labels(fault=name).set(1)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class ProxyControl(Protocol):
    """What the admin endpoint drives; every method is safe to call from any thread."""

    def arm(self, spec: str | None) -> None: ...
    def disarm(self) -> None: ...
    def release(self) -> int: ...
    def state(self) -> dict[str, Any]: ...


class AdminServer:
    """Metrics + admin on 127.0.0.1:port in a daemon thread (port 0 = a free port)."""

    def __init__(self, metrics: ProxyMetrics, control: ProxyControl, host: str = "127.0.0.1", port: int = 0) -> None:
        handler = _handler_for(metrics, control)
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.host, self.port = self.httpd.server_address[:2]
        self.url = f"http://{self.host}:{self.port}"
        self.metrics_url = self.url + "/metrics"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="repro-proxy-admin", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)


def _handler_for(metrics: ProxyMetrics, control: ProxyControl):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):  # noqa: A002 - keep scrapes out of the proxy's output
            pass

        def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, (json.dumps(obj) + "\n").encode())

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            return json.loads(raw) if raw.strip() else {}

        def do_GET(self):  # noqa: N802
            if self.path.split("?")[0] == "/metrics":
                self._send(200, metrics.render(), CONTENT_TYPE_LATEST)
            elif self.path == "/state":
                self._json(200, control.state())
            else:
                self._json(404, {"error": "GET /metrics or /state"})

        def do_POST(self):  # noqa: N802
            try:
                if self.path == "/fault":
                    spec = self._body().get("spec")
                    if not spec:
                        self._json(400, {"error": 'POST /fault needs a JSON body {"spec": "NAME[=VALUE]"}'})
                        return
                    control.arm(spec)
                    self._json(200, control.state())
                elif self.path == "/release":
                    self._json(200, {"released": control.release()})
                else:
                    self._json(404, {"error": "POST /fault or /release"})
            except ValueError as exc:  # FaultSpecError and bad JSON: the caller's input
                self._json(400, {"error": str(exc)})

        def do_DELETE(self):  # noqa: N802
            if self.path == "/fault":
                control.disarm()
                self._json(200, control.state())
            else:
                self._json(404, {"error": "DELETE /fault"})

    return Handler
