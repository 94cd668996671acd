"""A small asyncio TCP relay for socket-level faults that an HTTP proxy cannot express.

The faults (proxies.spec.TCP_FAULTS) take the names of Toxiproxy's toxics, so that a reproduction
reads the same with either; Toxiproxy itself (a Go binary) is not a dependency. Why each behaves so:
- freeze stops reading both ways, so socket buffers back up and the engine's writes block, as
  behind a wedged proxy process: real backpressure, where Toxiproxy's `timeout` reads and drops.
- half-open swallows everything and never sends FIN or RST: a NAT or firewall that silently
  forgot the flow.
- reset closes with RST (SO_LINGER 0) on the client's first bytes.
- latency delays each chunk without blocking the next read, so throughput is kept.

`after=N` applies the fault from the (N+1)-th connection on, `after=Ts` after T seconds; arming a
fault at runtime applies to open connections too (as adding a toxic does). Every stall here has
a release path: release() lets open connections pass again, stop() closes them all.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from proxies.spec import TCP_FAULT, FaultSpec, parse_relay_fault

READ_SIZE = 65536
CONNECT_TIMEOUT_S = 5.0
WRITE_TIMEOUT_S = 30.0
SLICER_GAP_S = 0.001


def parse_upstream(upstream: str) -> tuple[str, int]:
    """'host:port' or 'http://host:port/...' -> (host, port)."""
    text = upstream if "//" in upstream else f"//{upstream}"
    parts = urlsplit(text)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    if not parts.hostname or not port:
        raise ValueError(f"relay upstream {upstream!r} must be HOST:PORT or a URL with a port, e.g. 127.0.0.1:30000")
    return parts.hostname, port


class RelayStartError(RuntimeError):
    """The relay did not come up (e.g. its port is taken); the message says why."""


@dataclass(eq=False)  # identity: kept in a set while open
class RelayConnection:
    index: int
    exempt: bool = False  # released: passes from now on, whatever is armed
    sent_down: int = 0
    writers: list[asyncio.StreamWriter] = field(default_factory=list)


class Relay:
    """Runs on its own loop; public methods below are called through RelayHandle from any thread."""

    def __init__(self, upstream: tuple[str, int], spec: FaultSpec | None) -> None:
        self.upstream = upstream
        self.spec: FaultSpec | None = None
        self.armed_at = time.monotonic()
        self.accepted_since_arm = 0
        self.connections: set[RelayConnection] = set()
        self.changed = asyncio.Event()  # wakes frozen pumps when the fault changes or is released
        self.bytes_up = self.bytes_down = self.total_connections = 0
        self.closing = False
        self.arm(spec)

    def arm(self, spec: FaultSpec | None) -> None:
        self.spec = spec if spec is not None and spec.name != "pass" else None
        self.armed_at = time.monotonic()
        self.accepted_since_arm = 0
        for conn in self.connections:
            conn.index = -1 if self.spec and not self.spec.after_requests else conn.index  # open ones count as armed
            conn.exempt = False
        self._wake()

    def release(self) -> int:
        count = 0
        for conn in self.connections:
            if not conn.exempt:
                conn.exempt, count = True, count + 1
        self._wake()
        return count

    def _wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def fault_for(self, conn: RelayConnection) -> str | None:
        spec = self.spec
        if spec is None or conn.exempt:
            return None
        if time.monotonic() - self.armed_at < spec.after_seconds:
            return None
        if conn.index >= 0 and conn.index < spec.after_requests:
            return None
        return spec.name

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = RelayConnection(self.accepted_since_arm)
        self.accepted_since_arm += 1
        self.total_connections += 1
        conn.writers.append(writer)
        self.connections.add(conn)
        try:
            try:
                up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*self.upstream),
                                                              CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError):
                return  # upstream down: the client sees its connection closed
            conn.writers.append(up_writer)
            await asyncio.gather(self._pump(conn, reader, up_writer, upstream=True),
                                 self._pump(conn, up_reader, writer, upstream=False))
        finally:
            self.connections.discard(conn)
            for w in conn.writers:
                w.close()

    async def _pump(self, conn: RelayConnection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    *, upstream: bool) -> None:
        """Copy one direction; each chunk asks the current fault what to do with it."""
        try:
            while not self.closing:
                if self.fault_for(conn) == "freeze":  # do not read: let the kernel buffers fill up
                    await self.changed.wait()
                    continue
                data = await reader.read(READ_SIZE)
                if not data:
                    break
                while self.fault_for(conn) == "freeze" and not self.closing:  # frozen while we were reading
                    await self.changed.wait()
                if self.closing:
                    break
                fault = self.fault_for(conn)
                if fault == "half-open":
                    continue  # swallow; never close actively
                if fault == "reset" and upstream:
                    self._reset(conn)
                    return
                if upstream:
                    self.bytes_up += len(data)
                    await self._write(writer, data)
                    continue
                await self._downstream(conn, writer, data, fault)
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            # propagate a close to the other side (half-close first, as TCP does), unless swallowing
            if self.fault_for(conn) != "half-open":
                try:
                    if writer.can_write_eof():
                        writer.write_eof()
                except OSError:
                    pass

    async def _downstream(self, conn: RelayConnection, writer: asyncio.StreamWriter, data: bytes,
                          fault: str | None) -> None:
        spec = self.spec
        if fault == "limit-data":
            room = int(spec.value) - conn.sent_down
            if room <= 0 or len(data) >= room:
                await self._write(writer, data[:max(room, 0)])
                conn.sent_down += max(room, 0)
                for w in conn.writers:
                    w.close()
                raise ConnectionAbortedError("limit-data reached")
        elif fault == "latency":
            await asyncio.sleep(float(spec.value) / 1000)
        elif fault == "slicer":
            size = int(TCP_FAULT["slicer"].value_of(spec)) or 1
            for i in range(0, len(data), size):
                await self._write(writer, data[i:i + size])
                await asyncio.sleep(SLICER_GAP_S)
            conn.sent_down += len(data)
            self.bytes_down += len(data)
            return
        conn.sent_down += len(data)
        self.bytes_down += len(data)
        await self._write(writer, data)

    @staticmethod
    async def _write(writer: asyncio.StreamWriter, data: bytes) -> None:
        if data:
            writer.write(data)
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)

    def _reset(self, conn: RelayConnection) -> None:
        client = conn.writers[0]
        sock = client.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.transport.abort()
        for w in conn.writers[1:]:
            w.transport.abort()

    def close_all(self) -> None:
        self.closing = True
        self._wake()
        for conn in list(self.connections):
            for w in conn.writers:
                w.transport.abort()

    def stats(self) -> dict[str, Any]:
        return {"fault": self.spec.text if self.spec else None, "open_connections": len(self.connections),
                "connections": self.total_connections, "bytes_up": self.bytes_up, "bytes_down": self.bytes_down}


class RelayHandle:
    """A running relay on its own thread and loop. .url, .arm(), .disarm(), .release(), .stop()."""

    def __init__(self, upstream: str, spec: str | None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.upstream = parse_upstream(upstream)
        self._spec = parse_relay_fault(spec) if spec else None
        self._host, self._port = host, port
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stopped = False
        self._lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._thread_main, name="repro-relay", daemon=True)

    def __enter__(self) -> RelayHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 10.0) -> RelayHandle:
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            self.stop()
            raise RelayStartError(f"relay to {self.upstream[0]}:{self.upstream[1]} did not start: {self._error}")
        return self

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.relay = Relay(self.upstream, self._spec)
        self._stop_event = asyncio.Event()
        server = await asyncio.start_server(self.relay.handle, self._host, self._port)
        self.url = f"http://{self._host}:{server.sockets[0].getsockname()[1]}"
        self._ready.set()
        await self._stop_event.wait()
        server.close()  # stop accepting first: a new client is refused, never left hanging
        self.relay.close_all()
        await asyncio.sleep(0.05)  # let the pumps see the close and finish

    def _call(self, fn, *args):
        async def call():
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(5)

    def arm(self, spec: str | None) -> None:
        parsed = parse_relay_fault(spec) if spec else None
        self._call(self.relay.arm, parsed)

    def disarm(self) -> None:
        self._call(self.relay.arm, None)

    def release(self) -> int:
        return self._call(self.relay.release)

    def state(self) -> dict[str, Any]:
        return self._call(self.relay.stats)

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        if self.loop is not None and not self.loop.is_closed():
            try:
                self.loop.call_soon_threadsafe(self._stop_event.set)
            except RuntimeError:
                pass
        self._thread.join(5)


def start_relay(upstream: str, spec: str | None = None, *, host: str = "127.0.0.1", port: int = 0) -> RelayHandle:
    """Start a TCP relay to `upstream` (HOST:PORT or URL) with a fault; returns once it listens."""
    return RelayHandle(upstream, spec, host, port).start()
