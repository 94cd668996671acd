"""Misbehaving HTTP servers on 127.0.0.1 for driver tests: each a scripted answer per request.

A behaviour is an async function (reader, writer, request_index) that answers one request on a
kept-alive connection; it returns False to close the connection. The server runs in its own
thread and loop; stop() cancels every handler, so no behaviour can outlive its test.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
from collections.abc import Awaitable, Callable
from contextlib import contextmanager

Behaviour = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[bool]]

SSE_HEADERS = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
    b"cache-control: no-cache\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(obj) -> bytes:
    return chunk(b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n")


def token(text: str) -> bytes:
    return sse({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})


async def read_request(reader: asyncio.StreamReader) -> dict | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    body = await reader.readexactly(length) if length else b""
    return {"head": head, "body": json.loads(body) if body else None}


async def healthy(reader, writer, index, tokens=("hello ", "world")) -> bool:
    writer.write(SSE_HEADERS)
    for text in tokens:
        writer.write(token(text))
    writer.write(sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": len(tokens)}}))
    writer.write(sse(b"[DONE]") + chunk(b""))
    await writer.drain()
    return True


def respond(status: str, body: bytes, content_type: str = "text/plain", extra: str = ""):
    async def behaviour(reader, writer, index) -> bool:
        writer.write(
            f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n{extra}\r\n".encode()
            + body
        )
        await writer.drain()
        return True

    return behaviour


async def silent(reader, writer, index) -> bool:
    await asyncio.sleep(3600)
    return False


async def headers_then_nothing(reader, writer, index) -> bool:
    writer.write(SSE_HEADERS)
    await writer.drain()
    await asyncio.sleep(3600)
    return False


async def trickle(reader, writer, index) -> bool:
    writer.write(SSE_HEADERS + token("start "))
    await writer.drain()
    while True:
        await asyncio.sleep(0.2)
        writer.write(chunk(b":"))  # a byte of keep-alive comment, never a whole event
        await writer.drain()


async def close_mid_chunk(reader, writer, index) -> bool:
    writer.write(SSE_HEADERS + token("partial ") + b"40\r\ndata: {\"choi")
    await writer.drain()
    return False


async def malformed_json(reader, writer, index) -> bool:
    writer.write(SSE_HEADERS + token("ok ") + sse(b"{not json") + sse(b"[DONE]") + chunk(b""))
    await writer.drain()
    return True


def scripted(*behaviours: Behaviour) -> Behaviour:
    """Request i gets behaviours[i] (the last one repeats)."""

    async def behaviour(reader, writer, index) -> bool:
        return await behaviours[min(index, len(behaviours) - 1)](reader, writer, index)

    return behaviour


class HostileServer:
    def __init__(self, behaviour: Behaviour, tls: ssl.SSLContext | None = None) -> None:
        self.behaviour = behaviour
        self.tls = tls  # a server context: the same misbehaviour behind TLS
        self.requests: list[dict] = []
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}/v1"
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._tasks: set[asyncio.Task] = set()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, sock=self._sock, ssl=self.tls)
        self._ready.set()
        await self._stop.wait()
        server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, reader, writer) -> None:
        self._tasks.add(asyncio.current_task())
        self.connections += 1
        try:
            while True:
                request = await read_request(reader)
                if request is None:
                    break
                index = len(self.requests)
                self.requests.append(request)
                if not await self.behaviour(reader, writer, index):
                    break
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._tasks.discard(asyncio.current_task())

    def start(self) -> HostileServer:
        self._thread.start()
        assert self._ready.wait(5), "hostile server did not start"
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(5)


@contextmanager
def hostile_server(behaviour: Behaviour):
    server = HostileServer(behaviour).start()
    try:
        yield server
    finally:
        server.stop()
