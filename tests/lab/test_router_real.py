"""The real SGLang routers (PyPI wheels: smg 1.13, today's, and sglang-router 0.3.2, the previous
one) accept simulated engines as workers and forward streams, regular and PD."""

from __future__ import annotations

import json

import httpx
import pytest

from probes import parse_metrics
from repro.lab.router_launcher import router_available, start_router
from repro.sim import SimConfig, serve_in_thread

pytestmark = [pytest.mark.network, pytest.mark.timeout(90)]

KINDS = [pytest.param(kind, marks=pytest.mark.skipif(not router_available(kind), reason=f"{kind} not installed"))
         for kind in ("smg", "sglang-router")]


@pytest.mark.parametrize("kind", KINDS)
def test_router_accepts_sim_workers_and_forwards_a_streamed_round(kind):
    with serve_in_thread(SimConfig()) as a, serve_in_thread(SimConfig()) as b:
        with start_router([a.url, b.url], kind=kind) as router:
            body = {"model": "sim-model", "stream": True, "max_tokens": 4,
                    "messages": [{"role": "user", "content": "hello router"}]}
            with httpx.Client(timeout=10, trust_env=False) as client:
                r = client.post(router.url + "/v1/chat/completions", json=body)
                assert r.status_code == 200, router.log_tail()
                events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
                assert events[-1] == "[DONE]"
                assert sum(1 for e in events[:-1] if json.loads(e)["choices"] and
                           json.loads(e)["choices"][0]["delta"].get("content")) == 4
                [snapshot] = parse_metrics(client.get(router.metrics_url).text, hop="router")
                assert snapshot.dialect == "sglang-router", snapshot.error
                assert {w["url"] for w in snapshot.workers} == {a.url, b.url}
                assert all(w["healthy"] and w["circuit"] == "closed" for w in snapshot.workers)
                assert snapshot.in_flight == 0
                served = a.state()["requests_seen"] + b.state()["requests_seen"]
                assert served >= 1


@pytest.mark.parametrize("kind", KINDS)
def test_router_pd_mode_with_prefill_and_decode_sims(kind):
    with serve_in_thread(SimConfig(role="prefill")) as p, serve_in_thread(SimConfig(role="decode")) as d:
        with start_router(prefill=[p.url], decode=[d.url], kind=kind) as router:
            body = {"model": "sim-model", "stream": True, "max_tokens": 3,
                    "messages": [{"role": "user", "content": "hello pd"}]}
            with httpx.Client(timeout=10, trust_env=False) as client:
                r = client.post(router.url + "/v1/chat/completions", json=body)
                assert r.status_code == 200, router.log_tail()
                assert r.text.rstrip().endswith("data: [DONE]")
                # Text completions through the PD router stream text chunks.
                r = client.post(router.url + "/v1/completions", json={
                    "model": "sim-model", "prompt": "hello pd", "max_tokens": 3, "stream": True})
                chunks = [json.loads(line[6:]) for line in r.text.splitlines()
                          if line.startswith("data: ") and line != "data: [DONE]"]
                assert r.status_code == 200 and chunks and all(c["object"] == "text_completion" for c in chunks)
                [snapshot] = parse_metrics(client.get(router.metrics_url).text, hop="router")
                assert snapshot.dialect == "sglang-router"
                assert {w["url"] for w in snapshot.workers} == {p.url, d.url}
            assert p.state()["requests_seen"] == 2 and d.state()["requests_seen"] == 2
