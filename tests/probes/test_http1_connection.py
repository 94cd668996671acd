"""probes.http1_connection.Http1Connection against scripted servers on 127.0.0.1: one read step (next_event) serves
both the whole answers and the streamed ones, and says the same thing of the same ending."""

from __future__ import annotations

import asyncio
import socket
import struct

import anyio
import pytest

from probes.http1_connection import Http1Connection, Reply
from tests.support.hostile import close_mid_chunk, healthy, hostile_server, respond

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]

TIMEOUT_S = 5.0


async def no_answer(reader, writer, index) -> bool:
    return False  # the connection closed before any answer


async def close_delimited(reader, writer, index) -> bool:
    writer.write(b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n{\"ok\": true}")
    await writer.drain()
    return False  # the close ends the body: a whole answer


async def cut_body(reader, writer, index) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"ok\"")
    await writer.drain()
    return False


async def not_http(reader, writer, index) -> bool:
    writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(3600)
    return False


async def reset(reader, writer, index) -> bool:
    # SO_LINGER 0: close() sends a RST, not a FIN
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return False


def post(behaviour) -> Reply:
    async def run() -> Reply:
        with hostile_server(behaviour) as server:
            url = server.url + "/chat/completions"
            conn = await Http1Connection.open(url, timeout=TIMEOUT_S, tls=None)
            try:
                return await conn.request("POST", url, b'{"model": "m"}', timeout=TIMEOUT_S)
            finally:
                await conn.aclose()
    return anyio.run(run)


def stream(behaviour, events: int = 10):
    async def run():
        with hostile_server(behaviour) as server:
            url = server.url + "/chat/completions"
            conn = await Http1Connection.open(url, timeout=TIMEOUT_S, tls=None)
            try:
                return await conn.open_stream(url, b'{"model": "m"}', headers={}, events=events, timeout=TIMEOUT_S)
            finally:
                await conn.aclose()
    return anyio.run(run)


def test_whole_answers_and_how_they_end():
    assert post(respond("413 Payload Too Large", b"too large")) == Reply(413, None, b"too large")
    # `closed`: the peer closed or reset the connection before the answer was whole, as a value
    assert post(no_answer) == Reply(None, "eof", closed=True)
    assert post(close_delimited) == Reply(200, None, b'{"ok": true}')
    assert post(cut_body) == Reply(200, "eof", b'{"ok"', closed=True)
    assert post(reset) == Reply(None, "reset", closed=True)
    garbled = post(not_http)
    assert garbled.status is None and garbled.error.startswith("protocol error (") and not garbled.closed


def test_streamed_answers_end_the_same_ways():
    whole = stream(healthy)
    assert (whole.status, whole.events, whole.ended, whole.error) == (200, 4, True, None)
    assert whole.headers["content-type"] == "text/event-stream"
    assert whole.first_event_s is not None and whole.first_event_s <= whole.seconds
    enough = stream(healthy, events=2)
    assert (enough.status, enough.events, enough.ended, enough.error) == (200, 2, False, None)
    cut = stream(close_mid_chunk)
    assert (cut.status, cut.events, cut.ended, cut.error) == (200, 1, False, "eof")
    nothing = stream(no_answer)
    assert (nothing.status, nothing.events, nothing.ended, nothing.error) == (None, 0, False, "eof")
    assert stream(reset).error == "reset"
    assert stream(not_http).error.startswith("protocol error (")
