"""scrape() and run_canary() against real sockets on 127.0.0.1: every failure bounded and named."""

from __future__ import annotations

import asyncio
import time

import anyio
import pytest

from probes import run_canary, scrape
from repro.core.hop import Hop
from tests.support.hostile import (
    close_mid_chunk,
    headers_then_nothing,
    healthy,
    hostile_server,
    respond,
    silent,
)
from tests.support.metric_pages import SGLANG_CURRENT
from tests.support.ports import refused_port

pytestmark = [pytest.mark.network, pytest.mark.anyio, pytest.mark.timeout(60)]


def origin(server) -> str:
    return f"http://127.0.0.1:{server.port}"


async def huge_gibberish(reader, writer, index) -> bool:
    size = 10 * 1024 * 1024
    writer.write(f"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {size}\r\n\r\n".encode())
    block = b"\x8f garbage \x00 line without value\n" * 1024
    sent = 0
    while sent < size:
        writer.write(block[: size - sent])
        sent += len(block)
        await writer.drain()
    return True


async def endless_page(reader, writer, index) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n")
    while True:
        line = b"sglang:num_running_reqs 1\n"
        writer.write(b"%x\r\n%s\r\n" % (len(line), line))
        await writer.drain()
        await asyncio.sleep(0.05)


async def test_scrape_reads_a_real_page():
    with hostile_server(respond("200 OK", SGLANG_CURRENT.encode(), "text/plain; version=0.0.4")) as server:
        snapshot = await scrape(Hop("e", origin(server)), timeout=2)
    assert snapshot.ok, snapshot.error
    assert (snapshot.hop, snapshot.url, snapshot.dialect, snapshot.running) == (
        "e", origin(server) + "/metrics", "sglang", 12)
    assert 0 < snapshot.scrape_s < 2
    request = server.requests[0]["head"]
    assert request.startswith(b"GET /metrics ") and b"text/plain" in request


async def test_scrape_refused_port():
    port = refused_port()
    snapshot = await scrape(Hop("e", f"http://127.0.0.1:{port}"), timeout=2)
    assert not snapshot.ok and snapshot.error == "connect: connection refused"


async def test_scrape_server_that_never_answers_is_bounded():
    with hostile_server(silent) as server:
        start = time.monotonic()
        snapshot = await scrape(Hop("e", origin(server)), timeout=0.5)
        elapsed = time.monotonic() - start
    assert not snapshot.ok and snapshot.error.startswith("timeout:")
    assert elapsed < 1.5


async def test_scrape_endless_page_is_bounded():
    with hostile_server(endless_page) as server:
        start = time.monotonic()
        snapshot = await scrape(Hop("e", origin(server)), timeout=0.5)
        elapsed = time.monotonic() - start
    assert not snapshot.ok and "timeout" in snapshot.error and elapsed < 1.5


async def test_scrape_10_mb_of_gibberish_is_bounded():
    with hostile_server(huge_gibberish) as server:
        start = time.monotonic()
        snapshot = await scrape(Hop("e", origin(server)), timeout=5)
        elapsed = time.monotonic() - start
    assert not snapshot.ok and "8 MB cap" in snapshot.error
    assert elapsed < 5


async def test_scrape_404_hints_enable_metrics():
    with hostile_server(respond("404 Not Found", b"Not Found")) as server:
        snapshot = await scrape(Hop("e", origin(server)), timeout=2)
    assert not snapshot.ok and snapshot.error.startswith("http 404") and "--enable-metrics" in snapshot.error


async def test_scrape_html_page():
    with hostile_server(respond("200 OK", b"<html><body>hi</body></html>", "text/html")) as server:
        snapshot = await scrape(Hop("e", origin(server)), timeout=2)
    assert not snapshot.ok and "HTML" in snapshot.error


# --- canaries ---------------------------------------------------------------------------------


async def test_canary_healthy_on_a_fresh_connection():
    with hostile_server(healthy) as server:
        outcome = await run_canary(Hop("e", server.url), model="m", timeout=3, api_key="sk-secret")
    assert outcome.ok and outcome.status == 200 and outcome.error is None and outcome.done
    assert outcome.events >= 1 and outcome.health_status == 200
    assert 0 <= outcome.connect_s <= outcome.first_byte_s <= outcome.total_s < 3
    assert server.connections == 2  # one for the generation, one for /health: nothing reused
    post = next(r for r in server.requests if r["body"])
    assert post["head"].startswith(b"POST /v1/chat/completions ")  # the /v1 base is not doubled
    assert post["body"]["max_tokens"] == 1 and post["body"]["stream"] is True
    assert b"Bearer sk-secret" in post["head"]
    d = outcome.to_dict()
    assert "sk-secret" not in repr(d)
    for key in ("hop", "url", "ok", "status", "connect_s", "first_byte_s", "total_s", "error", "health_status"):
        assert key in d


async def test_canary_refused_port_says_connect():
    port = refused_port()
    outcome = await run_canary(Hop("e", f"http://127.0.0.1:{port}"), model="m", timeout=2)
    assert not outcome.ok and outcome.error == "connect: connection refused"
    assert outcome.status is None and outcome.health_status is None and outcome.connect_s is None
    # As a value, for the verdict to say "nothing listens on HOST:PORT" without reading the words.
    assert (outcome.failure, outcome.refused) == ("connect", True)


async def test_canary_silent_server_no_first_byte():
    with hostile_server(silent) as server:
        start = time.monotonic()
        outcome = await run_canary(Hop("e", server.url), model="m", timeout=0.6)
        elapsed = time.monotonic() - start
    assert not outcome.ok and outcome.error == "timeout: no first byte in 0.6 s"
    assert outcome.connect_s is not None and "connect" not in outcome.error
    assert outcome.health_status is None and not outcome.refused  # something listens: it only never answers
    assert elapsed < 1.5


async def test_canary_headers_then_nothing():
    with hostile_server(headers_then_nothing) as server:
        outcome = await run_canary(Hop("e", server.url), model="m", timeout=0.6)
    assert not outcome.ok and outcome.status == 200
    assert outcome.error.startswith("timeout: no SSE data event") and outcome.first_byte_s is not None


async def test_canary_http_error_status():
    with hostile_server(respond("503 Service Unavailable", b'{"error": "overloaded"}', "application/json")) as server:
        outcome = await run_canary(Hop("e", server.url), model="m", timeout=2)
    assert not outcome.ok and outcome.status == 503 and outcome.error.startswith("http 503")
    assert "overloaded" in outcome.error and outcome.health_status == 503


async def test_canary_stream_cut_after_a_token_is_not_served():
    """A token, then the connection dies mid-chunk: the hop did not serve a whole response."""
    with hostile_server(close_mid_chunk) as server:
        outcome = await run_canary(Hop("e", server.url), model="m", timeout=2)
    assert not outcome.ok and outcome.events == 1 and outcome.error.startswith("read:")


async def test_canary_is_bounded_even_when_nothing_is_bounded_elsewhere():
    with hostile_server(silent) as server:
        with anyio.fail_after(3):
            outcome = await run_canary(Hop("e", origin(server)), model="m", timeout=1.0)
    assert not outcome.ok and 0.9 < outcome.total_s < 2


async def test_scrape_the_real_proxy_metrics_page():
    """The fault proxy's own page (proxies/metrics.py): open flows -> in_flight, held flows -> held."""
    proxies_metrics = pytest.importorskip("proxies.metrics")

    metrics = proxies_metrics.ProxyMetrics()
    metrics.open_flows.set(3)
    metrics.held_flows.set(1)
    metrics.requests.inc(7)

    class Control:
        def state(self):
            return {}

    admin = proxies_metrics.AdminServer(metrics, Control())
    try:
        snapshot = await scrape(Hop("proxy", "http://127.0.0.1:1", metrics_url=admin.metrics_url, role="proxy"))
    finally:
        admin.stop()
    assert snapshot.ok, snapshot.error
    assert (snapshot.dialect, snapshot.in_flight, snapshot.held) == ("repro-proxy", 3, 1)
    assert snapshot.series["repro_proxy_requests_total"] == 7


async def test_invalid_urls_are_reported_not_raised():
    snapshot = await scrape(Hop("e", "http://127.0.0.1:99999"), timeout=1)
    assert not snapshot.ok and snapshot.error
    outcome = await run_canary(Hop("e", "http://127.0.0.1:99999"), model="m", timeout=1)
    assert not outcome.ok and outcome.error and outcome.health_status is None
