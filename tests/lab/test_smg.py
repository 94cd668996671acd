"""The SGLang model gateway as it ships today (PyPI `smg` 1.13) in front of simulated engines:
its SSE keep-alive comments on a silent stream, and its /metrics as the router dialect reads them.
127.0.0.1 only; every wait bounded; every process stopped on the way out."""

from __future__ import annotations

import time

import httpx
import pytest

from probes import parse_metrics
from repro.core.sse import SSEDecoder
from repro.lab.router_launcher import router_available, start_router
from repro.sim import SimConfig, serve_in_thread

pytestmark = [pytest.mark.network, pytest.mark.timeout(90),
              pytest.mark.skipif(not router_available("smg"), reason="smg not installed (pip install smg)")]

BODY = {"model": "sim-model", "stream": True, "max_tokens": 8, "messages": [{"role": "user", "content": "hello"}]}
KEEPALIVE_S = 1  # smg's --sse-keepalive-secs defaults to 15; lowered to keep the test short


def read_for(chunks, decoder: SSEDecoder, seconds: float, enough) -> bytes:
    """Raw bytes from a streamed body's chunk iterator for at most `seconds` (each read bounded by
    the client's read timeout), fed to the decoder as they come; stops early once `enough(raw)`.
    The caller keeps the iterator: dropping it would close the stream."""
    raw = b""
    events = []
    deadline = time.monotonic() + seconds
    for chunk in chunks:
        raw += chunk
        events += decoder.feed(chunk)
        if time.monotonic() >= deadline or enough(raw):
            break
    assert events == [], f"a hung engine produced events: {events}"
    return raw


def test_keepalive_comments_through_smg_are_not_events_and_the_router_still_holds_the_request():
    with serve_in_thread(SimConfig(fault="hang")) as engine:
        with start_router([engine.url], kind="smg", extra_args=["--sse-keepalive-secs", str(KEEPALIVE_S)]) as router:
            with httpx.Client(timeout=httpx.Timeout(5, read=KEEPALIVE_S * 4), trust_env=False) as client:
                with client.stream("POST", router.url + "/v1/chat/completions", json=BODY) as response:
                    assert response.status_code == 200, router.log_tail()
                    decoder = SSEDecoder()
                    # Headers came from the engine at once; then silence, which smg fills with comments.
                    chunks = response.iter_raw()
                    raw = read_for(chunks, decoder, KEEPALIVE_S * 5, enough=lambda raw: raw.count(b"\n\n") >= 3)
                    frames = [frame for frame in raw.split(b"\n\n") if frame]
                    assert len(frames) >= 3 and all(frame.startswith(b":") for frame in frames), raw
                    assert decoder.comments == len(frames) and decoder.pending == b""
                    # While the stream is open and silent, smg still counts it against the worker
                    # and the engine still runs it with no token moving.
                    [router_page] = parse_metrics(client.get(router.metrics_url).text, hop="router")
                    assert router_page.in_flight == 1 and router_page.workers[0]["active"] == 1
                    assert router_page.workers[0]["healthy"] is True
                    [engine_page] = parse_metrics(client.get(engine.metrics_url).text, hop="engine")
                    assert engine_page.running == 1 and engine_page.in_flight == 1
                    assert not engine_page.itl_count and not engine_page.gen_tokens_total


def test_smg_metrics_read_by_the_router_dialect_and_a_removed_worker_leaves():
    with serve_in_thread(SimConfig()) as a, serve_in_thread(SimConfig()) as b:
        with start_router([a.url, b.url], kind="smg", extra_args=["--load-monitor-interval", "1"]) as router:
            with httpx.Client(timeout=10, trust_env=False) as client:
                assert client.post(router.url + "/v1/chat/completions", json=BODY).status_code == 200
                [page] = parse_metrics(client.get(router.metrics_url).text, hop="router")
                assert page.dialect == "sglang-router" and page.in_flight == 0
                assert [(w["url"], w["healthy"], w["circuit"]) for w in page.workers] == sorted(
                    [(a.url, True, "closed"), (b.url, True, "closed")])
                assert page.series["smg_router_requests_total"] == 1
                # What smg last polled from the engines' /v1/loads, kept as raw series.
                deadline = time.monotonic() + 10
                while "smg_engine_running_requests" not in page.series and time.monotonic() < deadline:
                    time.sleep(0.3)
                    [page] = parse_metrics(client.get(router.metrics_url).text, hop="router")
                assert page.series.get("smg_engine_running_requests") == 0
                [worker_id] = [w["id"] for w in client.get(router.url + "/workers").json()["workers"]
                               if w["url"] == b.url]
                assert client.delete(router.url + f"/workers/{worker_id}").status_code in (200, 202)
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    [page] = parse_metrics(client.get(router.metrics_url).text, hop="router")
                    if [w["url"] for w in page.workers] == [a.url]:
                        break
                    time.sleep(0.3)
                assert [w["url"] for w in page.workers] == [a.url], page.workers
