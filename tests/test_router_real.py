"""The real sglang-router (PyPI wheel) accepts simulated engines as workers and forwards streams."""

from __future__ import annotations

import json

import httpx
import pytest

from repro.router import start_router
from repro.sim import SimConfig, serve_in_thread

pytest.importorskip("sglang_router")


def test_router_accepts_sim_workers_and_forwards_a_streamed_round():
    with serve_in_thread(SimConfig()) as a, serve_in_thread(SimConfig()) as b:
        with start_router([a.url, b.url]) as router:
            body = {"model": "sim-model", "stream": True, "max_tokens": 4,
                    "messages": [{"role": "user", "content": "hello router"}]}
            with httpx.Client(timeout=10, trust_env=False) as client:
                r = client.post(router.url + "/v1/chat/completions", json=body)
                assert r.status_code == 200, router.log_tail()
                events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
                assert events[-1] == "[DONE]"
                assert sum(1 for e in events[:-1] if json.loads(e)["choices"] and
                           json.loads(e)["choices"][0]["delta"].get("content")) == 4
                metrics = client.get(router.metrics_url).text
                assert "smg_worker_health" in metrics or "smg_router_requests_total" in metrics
                served = a.state()["requests_seen"] + b.state()["requests_seen"]
                assert served >= 1


def test_router_pd_mode_with_prefill_and_decode_sims():
    with serve_in_thread(SimConfig(role="prefill")) as p, serve_in_thread(SimConfig(role="decode")) as d:
        with start_router(prefill=[p.url], decode=[d.url]) as router:
            body = {"model": "sim-model", "stream": True, "max_tokens": 3,
                    "messages": [{"role": "user", "content": "hello pd"}]}
            with httpx.Client(timeout=10, trust_env=False) as client:
                r = client.post(router.url + "/v1/chat/completions", json=body)
                assert r.status_code == 200, router.log_tail()
                assert r.text.rstrip().endswith("data: [DONE]")
            assert p.state()["requests_seen"] == 1 and d.state()["requests_seen"] == 1
