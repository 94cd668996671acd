"""--listen: parsed as HOST:PORT, loopback told apart, a port in use said in one line before
anything starts; the server answers /metrics, / and /status.json from the one status."""

from __future__ import annotations

import json
import socket

import anyio
import httpx
import pytest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from repro.core.errors import UsageError
from repro.core.watch_status import WatchStatus
from repro.reporting.watch_metrics import watch_registry
from repro.session.watch_server import Listen, bind_listen, bound_address, parse_listen, serve

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(("text", "host", "port"), [("127.0.0.1:9464", "127.0.0.1", 9464), ("[::1]:80", "::1", 80),
                                                     ("localhost:0", "localhost", 0)])
def test_listen_parses_host_and_port(text, host, port):
    assert parse_listen(text) == Listen(host, port)


@pytest.mark.parametrize("text", ["9464", "127.0.0.1", ":9464", "127.0.0.1:http", "127.0.0.1:70000"])
def test_a_bad_listen_is_one_line_naming_the_flag_and_an_example(text):
    with pytest.raises(UsageError) as caught:
        parse_listen(text)
    assert "--listen" in str(caught.value) and "127.0.0.1:9464" in str(caught.value)


def test_loopback_is_told_apart_from_everything_else():
    assert Listen("127.0.0.1", 1).loopback and Listen("::1", 1).loopback and Listen("localhost", 1).loopback
    assert not Listen("0.0.0.0", 1).loopback and not Listen("10.0.0.5", 1).loopback
    assert not Listen("watch.example", 1).loopback  # a name may resolve anywhere
    assert str(Listen("::1", 9464)) == "[::1]:9464"


@pytest.mark.network
def test_a_port_in_use_is_a_usage_error_naming_listen():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(UsageError) as caught:
            bind_listen(Listen("127.0.0.1", port))
    assert f"--listen 127.0.0.1:{port}: the port is in use" in str(caught.value)


@pytest.mark.network
def test_the_server_answers_from_the_status_as_it_is_at_each_request():
    status = WatchStatus(started_at=1.0, listen="x")
    sock = bind_listen(Listen("127.0.0.1", 0))
    address = bound_address(sock)

    async def scenario() -> list[httpx.Response]:
        responses = []
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(serve, sock, status, watch_registry(status))
            async with httpx.AsyncClient(base_url=f"http://{address}", timeout=5, trust_env=False) as client:
                with anyio.fail_after(10):
                    while True:
                        try:
                            responses.append(await client.get("/metrics"))
                            break
                        except httpx.ConnectError:
                            await anyio.sleep(0.05)
                status.round_ended("completed", at=2.0)
                responses += [await client.get("/metrics"), await client.get("/status.json"), await client.get("/")]
            tasks.cancel_scope.cancel()
        return responses

    before, after, as_json, page = anyio.run(scenario)
    assert before.headers["Content-Type"] == CONTENT_TYPE_LATEST
    # Exported at 0 from the start, so rate() sees the first round.
    assert 'repro_watch_rounds_total{outcome="completed"} 0.0' in before.text
    assert 'repro_watch_rounds_total{outcome="completed"} 1.0' in after.text
    assert json.loads(as_json.text)["rounds"] == {"completed": 1}
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    with pytest.raises(OSError):  # closed when the server stopped
        sock.getsockname()
