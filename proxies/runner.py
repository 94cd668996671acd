"""Start the fault proxy in front of an upstream: in this process (own thread + loop) or as mitmdump.

    with start_proxy("http://127.0.0.1:30000", "wedge-after=2", flow_log=path) as proxy:
        proxy.url, proxy.metrics_url; proxy.arm("hold-request"); proxy.release(); proxy.disarm()

In-process: mitmproxy's Master must be built inside a running loop and installs its own task
factory and exception handler on it, so it gets its own thread and loop, never the caller's.
Ready when the `running` hook fires. Shutdown closes the listeners first: mitmproxy's own
shutdown leaves the listening socket open (mitmproxy#6245), and a client connecting to a dead
proxy would hang instead of being refused. Then held flows are released, then the master stops.

Subprocess: `mitmdump -s proxies/faults.py`, with PYTHONUNBUFFERED=1 (its log is block-buffered
on a pipe otherwise and the ready line never arrives), ready when both the listen line and the
metrics line were printed; stopped with SIGTERM, then SIGKILL after a bound.
Reverse mode always uses lazy upstream connections: no phantom upstream connection per client
and a 502 when the upstream is down.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from proxies.addon import FaultProxyAddon
from proxies.flowlog import read_flow_log
from proxies.spec import DEFAULT_HOLD_MAX_S, parse_proxy_fault
from repro.io.process import stop_child

READY_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0
CONNECTION_STRATEGY = "lazy"


class ProxyStartError(RuntimeError):
    """The proxy did not come up; the message says why and what to check."""


def _check_upstream(upstream: str) -> str:
    parts = urlsplit(upstream)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"proxy upstream {upstream!r} must be an http:// or https:// URL, e.g. http://127.0.0.1:30000")
    return f"{parts.scheme}://{parts.netloc}"


class ProxyHandle:
    """A running fault proxy. Thread-safe; stop() is idempotent and bounded."""

    url: str
    metrics_url: str
    flow_log: Path | None
    mode: str

    def __enter__(self) -> ProxyHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def arm(self, spec: str | None) -> None:
        raise NotImplementedError

    def disarm(self) -> None:
        raise NotImplementedError

    def release(self) -> int:
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def flows(self) -> list[dict[str, Any]]:
        """The flow log so far (empty if the proxy was started without one)."""
        return read_flow_log(self.flow_log) if self.flow_log else []


class InProcessProxy(ProxyHandle):
    mode = "inprocess"

    def __init__(self, upstream: str, spec: str | None, *, flow_log: Path | None, host: str, port: int,
                 metrics_port: int, hold_max: float) -> None:
        self.upstream, self.flow_log = upstream, flow_log
        self.addon = FaultProxyAddon(hold_max=hold_max)
        self._options = {"repro_fault": spec or "", "repro_flow_log": str(flow_log) if flow_log else "",
                         "repro_metrics_port": metrics_port, "repro_hold_max": max(1, int(hold_max))}
        self._host, self._port = host, port
        self._confdir = tempfile.mkdtemp(prefix="repro-proxy-")
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stopped = False
        self._lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.master = None
        self._thread = threading.Thread(target=self._thread_main, name="repro-proxy", daemon=True)

    def start(self, timeout: float = READY_TIMEOUT_S) -> InProcessProxy:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self._stopped = True
                reason = self._error or f"not listening after {timeout:.0f} s"
                if self._thread.is_alive():
                    self._shutdown_loop()
                raise ProxyStartError(f"fault proxy to {self.upstream} did not start: {reason}")
        if self._error is not None:
            self.stop()
            raise ProxyStartError(f"fault proxy to {self.upstream} did not start: {self._error}")
        return self

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported to start(); the thread must not die silently
            self._error = self._error or exc
        finally:
            shutil.rmtree(self._confdir, ignore_errors=True)

    async def _main(self) -> None:
        from mitmproxy import addons, options
        from mitmproxy.master import Master

        self.loop = asyncio.get_running_loop()
        opts = options.Options(mode=[f"reverse:{self.upstream}@{self._host}:{self._port}"], confdir=self._confdir)
        # Master, not DumpMaster: no terminal log, no dumper, and no errorcheck (it calls sys.exit)
        self.master = master = Master(opts, with_termlog=False)
        errors = _ErrorCollector()
        logging.getLogger("mitmproxy").addHandler(errors)
        try:
            master.addons.add(*addons.default_addons())
            master.addons.add(self.addon, _ReadySignal(self, errors))
            # addon-registered options exist only now (KeyError "Unknown options" before)
            master.options.update(connection_strategy=CONNECTION_STRATEGY, **self._options)
            await master.run()
        finally:
            logging.getLogger("mitmproxy").removeHandler(errors)

    def _on_running(self, errors: _ErrorCollector) -> None:
        servers = self.master.addons.get("proxyserver").servers
        addrs = [a for s in servers for a in s.listen_addrs]
        if not addrs:
            self._error = ProxyStartError("; ".join(errors.messages) or "no listening address")
        elif self._options["repro_metrics_port"] >= 0 and self.addon.admin is None:
            # the addon's running hook failed to bind it; mitmproxy logged why and kept going
            self._error = ProxyStartError("; ".join(errors.messages) or "the metrics endpoint did not start")
        else:
            port = addrs[0][1]
            self.url = f"http://{self._host}:{port}"
            admin = self.addon.admin
            self.metrics_url = admin.metrics_url if admin else ""
        self._ready.set()

    def arm(self, spec: str | None) -> None:
        self.addon.arm(spec)

    def disarm(self) -> None:
        self.addon.disarm()

    def release(self) -> int:
        return self.addon.release()

    def state(self) -> dict[str, Any]:
        return self.addon.state()

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._shutdown_loop()

    def _shutdown_loop(self) -> None:
        loop, master = self.loop, self.master
        if loop is None or master is None or loop.is_closed():
            self._thread.join(STOP_TIMEOUT_S)
            return

        async def close_then_shutdown():
            # 1. stop accepting: a client must be refused, never left hanging on a dead port
            try:
                await asyncio.wait_for(master.addons.get("proxyserver").servers.update([]), STOP_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - shutting down anyway
                pass
            # 2. release every hold, so no client waits for the safety max
            self.addon._release_all("shutdown")
            await asyncio.sleep(0.05)  # let released hooks return and their kills take effect
            master.shutdown()

        try:
            asyncio.run_coroutine_threadsafe(close_then_shutdown(), loop).result(STOP_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - loop already gone or stuck: the join below is bounded
            pass
        self._thread.join(STOP_TIMEOUT_S)


class _ReadySignal:
    def __init__(self, proxy: InProcessProxy, errors: _ErrorCollector) -> None:
        self.proxy, self.errors = proxy, errors

    def running(self) -> None:
        self.proxy._on_running(self.errors)


class _ErrorCollector(logging.Handler):
    """Keeps mitmproxy's startup errors (e.g. address in use) for the start error message."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.messages) < 5:
            self.messages.append(record.getMessage().splitlines()[0])


LISTEN_LINE = re.compile(r"listening at (?:\[?([0-9a-fA-F:.]+)\]?):(\d+)")
METRICS_LINE = re.compile(r"repro proxy metrics at (http://\S+/metrics)")


class SubprocessProxy(ProxyHandle):
    mode = "subprocess"

    def __init__(self, upstream: str, spec: str | None, *, flow_log: Path | None, host: str, port: int,
                 metrics_port: int, hold_max: float) -> None:
        self.upstream, self.flow_log = upstream, flow_log
        self._confdir = tempfile.mkdtemp(prefix="repro-proxy-")
        script = Path(__file__).with_name("faults.py")
        mitmdump = Path(sys.executable).with_name("mitmdump")
        self.argv = [
            str(mitmdump) if mitmdump.exists() else "mitmdump",
            "--mode", f"reverse:{upstream}@{host}:{port}", "-s", str(script),
            "--set", f"confdir={self._confdir}", "--set", "flow_detail=0",
            "--set", f"connection_strategy={CONNECTION_STRATEGY}",
            "--set", f"repro_metrics_port={metrics_port}", "--set", f"repro_hold_max={max(1, int(hold_max))}",
        ]
        if spec:
            self.argv += ["--set", f"repro_fault={spec}"]
        if flow_log:
            self.argv += ["--set", f"repro_flow_log={flow_log}"]
        self._host = host
        self._stopped = False
        self._lock = threading.Lock()
        self.output: list[str] = []

    def start(self, timeout: float = READY_TIMEOUT_S) -> SubprocessProxy:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, text=True, bufsize=1)
        found: dict[str, str] = {}
        done = threading.Event()

        def read_output():
            for line in self.proc.stdout:
                if len(self.output) < 200:
                    self.output.append(line.rstrip())
                if (m := LISTEN_LINE.search(line)) and "port" not in found:
                    found["port"] = m.group(2)
                if m := METRICS_LINE.search(line):
                    found["metrics"] = m.group(1)
                if "port" in found and "metrics" in found:
                    done.set()
            done.set()  # process ended

        self._reader = threading.Thread(target=read_output, name="repro-proxy-output", daemon=True)
        self._reader.start()
        if not done.wait(timeout) or "port" not in found or "metrics" not in found:
            self._terminate()
            tail = " | ".join(self.output[-3:]) or "no output"
            raise ProxyStartError(f"mitmdump fault proxy to {self.upstream} did not start within {timeout:.0f} s: {tail}")
        self.url = f"http://{self._host}:{found['port']}"
        self.metrics_url = found["metrics"]
        self.admin_url = self.metrics_url.rsplit("/", 1)[0]
        return self

    def _admin(self, method: str, path: str, body: dict | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.admin_url + path, data=data, method=method,
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise ValueError(json.loads(exc.read() or b"{}").get("error", str(exc))) from None

    def arm(self, spec: str | None) -> None:
        if spec:
            parse_proxy_fault(spec)  # fail here, in the caller, with the same one-line message
            self._admin("POST", "/fault", {"spec": spec})
        else:
            self.disarm()

    def disarm(self) -> None:
        self._admin("DELETE", "/fault")

    def release(self) -> int:
        return int(self._admin("POST", "/release").get("released", 0))

    def state(self) -> dict[str, Any]:
        return self._admin("GET", "/state")

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._terminate()

    def _terminate(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is not None:
            stop_child(proc, STOP_TIMEOUT_S)  # SIGTERM first: the addon's done() releases every hold
            reader = getattr(self, "_reader", None)
            if reader is not None:
                reader.join(2.0)  # the child is gone: its output reaches EOF
            if proc.stdout and (reader is None or not reader.is_alive()):
                proc.stdout.close()  # no fd outlives the proxy
        shutil.rmtree(self._confdir, ignore_errors=True)


def start_proxy(upstream: str, spec: str | None = None, *, flow_log: Path | str | None = None,
                host: str = "127.0.0.1", port: int = 0, metrics_port: int = 0, mode: str = "inprocess",
                hold_max: float = DEFAULT_HOLD_MAX_S, timeout: float = READY_TIMEOUT_S) -> ProxyHandle:
    """Start a fault proxy in reverse mode to `upstream`; returns once it accepts connections.

    Raises ValueError (FaultSpecError) for a bad spec or upstream, ProxyStartError if it does not come up.
    """
    upstream = _check_upstream(upstream)
    if spec:
        parse_proxy_fault(spec)
    flow_log = Path(flow_log) if flow_log else None
    kwargs = dict(flow_log=flow_log, host=host, port=port, metrics_port=metrics_port, hold_max=hold_max)
    if mode == "inprocess":
        return InProcessProxy(upstream, spec, **kwargs).start(timeout)
    if mode == "subprocess":
        return SubprocessProxy(upstream, spec, **kwargs).start(timeout)
    raise ValueError(f"proxy mode {mode!r}: use 'inprocess' or 'subprocess'")
