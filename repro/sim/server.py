"""Running a simulated engine: in a thread (tests), in a child process (the embedded default), or
in the foreground (`repro sim`). uvicorn with httptools serves the raw ASGI app.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field

import uvicorn

from repro.io.process import stop_child
from repro.sim.app import SimApp
from repro.sim.config import NO_FAULT, SimConfig, armed_sim_fault

READY_LINE = "repro sim listening at "
START_TIMEOUT = 20.0


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


class _Server(uvicorn.Server):
    """uvicorn, plus a `crash` that stops listening and drops every connection at once."""

    def crash(self) -> None:
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()


def _uvicorn_config(app: SimApp, config: SimConfig) -> uvicorn.Config:
    return uvicorn.Config(
        app, lifespan="on", http="httptools", loop="asyncio", access_log=False,
        # "error": the router's startup probes draw uvicorn "Invalid HTTP request" warnings that mean nothing here.
        log_level="error",
        timeout_keep_alive=int(config.keepalive) or 1, timeout_graceful_shutdown=1, backlog=2048,
    )


@dataclass
class SimThread:
    """A simulated engine on its own thread and event loop (for tests and in-process use)."""

    config: SimConfig
    url: str = ""
    app: SimApp | None = None
    _server: _Server | None = None
    _thread: threading.Thread | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _error: list = field(default_factory=list)

    @property
    def metrics_url(self) -> str:
        return self.url + "/metrics"

    def start(self) -> SimThread:
        self.app = SimApp(self.config)
        sock = _bind(self.config.host, self.config.port)
        self.url = _url(sock)
        self._server = _Server(_uvicorn_config(self.app, self.config))
        self.app.on_crash = self._server.crash
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve(sock, ready))
            except BaseException as exc:  # surfaced by start() or stop()
                self._error.append(exc)
            finally:
                ready.set()
                loop.close()

        self._thread = threading.Thread(target=serve, name=f"repro-sim {self.url}", daemon=True)
        self._thread.start()
        if not ready.wait(START_TIMEOUT) or self._error or not self._server.started:
            self.stop()
            raise RuntimeError(f"simulated engine did not start within {START_TIMEOUT:g} s: {self._error}")
        return self

    async def _serve(self, sock: socket.socket, ready: threading.Event) -> None:
        async def flag_ready() -> None:
            while not self._server.started and not self._server.should_exit:
                await asyncio.sleep(0.005)
            ready.set()

        watcher = asyncio.ensure_future(flag_ready())
        try:
            await self._server.serve(sockets=[sock])
        finally:
            watcher.cancel()
            sock.close()

    def call(self, fn, *args):
        """Run fn(*args) on the engine's loop and wait (bounded) for its result."""
        future = asyncio.run_coroutine_threadsafe(_call(fn, *args), self._loop)
        return future.result(timeout=5)

    def arm(self, spec: str | None) -> None:
        self.call(self.app.engine.arm, spec)

    def state(self) -> dict:
        return self.call(self.app.engine.state)

    def crash(self) -> None:
        self.call(self._server.crash)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            if self._loop is not None and self.app is not None and not self._loop.is_closed():
                try:  # release held requests so graceful shutdown is quick
                    self._loop.call_soon_threadsafe(self.app.shutdown)
                except RuntimeError:
                    pass
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> SimThread:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


async def _call(fn, *args):
    return fn(*args)


def serve_in_thread(config: SimConfig | None = None) -> SimThread:
    """Start a simulated engine on a thread; use as a context manager, or call .stop()."""
    return SimThread(config or SimConfig()).start()


@dataclass
class SimProcess:
    """A simulated engine in a child process: closest to reality (its own GIL and event loop)."""

    process: subprocess.Popen
    url: str

    @property
    def metrics_url(self) -> str:
        return self.url + "/metrics"

    def stop(self, timeout: float = 5.0) -> None:
        stop_child(self.process, timeout)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe:
                pipe.close()

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_sim_process(config: SimConfig | None = None, timeout: float = START_TIMEOUT) -> SimProcess:
    """Start `repro sim` in a child process and wait (bounded) for its listening line."""
    config = (config or SimConfig()).validate()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "repro", "sim", *config.to_args(), "--exit-with-stdin"],
        # stdin is a pipe we never write: when we die, even by SIGKILL, the child reads EOF and exits.
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.PIPE, env=env, text=True,
    )
    lines: list[str] = []
    found: list[str] = []

    def read() -> None:
        for line in process.stdout:
            if line.startswith(READY_LINE):
                found.append(line[len(READY_LINE):].split()[0])
                return
            lines.append(line.rstrip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if not found:
        handle = SimProcess(process, "")
        handle.stop()
        detail = "; ".join(lines[-5:]) or "no output"
        raise RuntimeError(f"simulated engine process did not start within {timeout:g} s ({detail})")
    # Keep draining its output so a chatty child can never block on a full pipe.
    threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
    return SimProcess(process, found[0])


def _exit_when_stdin_closes() -> None:
    """The parent holds our stdin's write end: EOF means it is gone, so stop (SIGTERM to ourselves,
    the same clean shutdown as a user's Ctrl-C)."""
    def watch() -> None:
        try:
            while sys.stdin.buffer.read(65536):
                pass
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="repro-sim parent watch", daemon=True).start()


def ready_banner(url: str, config: SimConfig) -> str:
    """What `repro sim` prints once it listens: its URL first (SimProcess reads it), then the fault
    and both ways to lift one, each line within 80 columns."""
    fault = config.fault if armed_sim_fault(config.fault) else NO_FAULT
    return "\n".join((
        f"{READY_LINE}{url} (dialect {config.dialect})",
        f"  model    {config.model}",
        f"  metrics  {url}/metrics",
        f"  fault    {fault}",
        '           arm: POST /sim/fault {"spec": "hang,after=3"}',
        f"           lift: POST /sim/fault {{\"spec\": \"{NO_FAULT}\"}} or DELETE /sim/fault",
    ))


def serve_forever(config: SimConfig, announce=print, *, exit_with_stdin: bool = False) -> None:
    """Foreground server for `repro sim`: prints the ready line, stops on SIGINT/SIGTERM."""
    if exit_with_stdin:
        _exit_when_stdin_closes()
    app = SimApp(config)
    sock = _bind(config.host, config.port)
    url = _url(sock)
    server = _Server(_uvicorn_config(app, config))
    app.on_crash = server.crash

    async def main() -> None:
        async def announce_when_ready() -> None:
            while not server.started and not server.should_exit:
                await asyncio.sleep(0.005)
            if server.started:
                announce(ready_banner(url, config))

        watcher = asyncio.ensure_future(announce_when_ready())
        try:
            await server.serve(sockets=[sock])
        finally:
            watcher.cancel()
            app.shutdown()

    asyncio.run(main())
