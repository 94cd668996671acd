"""The faults where the proxy answers by itself (status=CODE, body-limit=BYTES), end to end on
127.0.0.1: httpx -> fault proxy (real mitmproxy) -> simulated engine. What the client sees (status,
Retry-After, a short JSON error in the API's envelope) and that the engine never saw the request."""

from __future__ import annotations

import httpx
import pytest

from proxies.spec import FaultSpecError, parse_proxy_fault
from repro.sim import SimConfig, serve_in_thread
from tests.support.proxy_chat import BODY, chat, client_for, engine_state

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def sim():
    with serve_in_thread(SimConfig(ttft=0.01, itl=0.002)) as engine:
        yield engine


@pytest.mark.parametrize("text", ["status=429", "status=429,retry-after=2,after=1", "status=529,after=1",
                                  "status=503,path=/v1/chat", "body-limit=8000", "body-limit=100,after=2"])
def test_answer_specs_parse(text):
    assert parse_proxy_fault(text).text == text


@pytest.mark.parametrize("text, fragment", [
    ("status", "needs an integer"),
    ("status=200", "from 400 to 599"),
    ("status=429,retry-after=soon", "retry-after must be seconds"),
    ("body-limit=0", "positive number"),
    ("body-limit=10,retry-after=1", "unknown option 'retry-after'"),
])
def test_bad_answer_specs_name_the_fix(text, fragment):
    with pytest.raises(FaultSpecError, match=fragment):
        parse_proxy_fault(text)


def test_status_429_after_one_answers_with_retry_after_and_never_forwards(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "status=429,retry-after=2,after=1")
    seen_before = engine_state(sim)["requests_seen"]
    with client_for(proxy.url) as client:
        first = chat(client)
        response = client.post("/v1/chat/completions", json=BODY, timeout=5)
    assert first.done
    assert response.status_code == 429 and response.headers["retry-after"] == "2"
    error = response.json()["error"]
    assert error["type"] == "rate_limit_error" and error["code"] == 429
    assert engine_state(sim)["requests_seen"] - seen_before == 1  # only the first went upstream
    closed = [r for r in proxy.flows() if r["event"] == "closed"]
    assert [r.get("outcome") for r in closed] == ["ok", "answered"]


def test_status_on_the_messages_api_uses_anthropics_envelope(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "status=529")
    response = httpx.post(proxy.url + "/v1/messages", json={"model": "m", "max_tokens": 4, "messages": []},
                          timeout=5)
    assert response.status_code == 529 and "retry-after" not in response.headers
    assert response.json()["type"] == "error" and response.json()["error"]["type"] == "overloaded_error"


def test_the_connection_stays_usable_after_an_answer(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "status=503,after=1")
    proxy_conn_ports = set()
    with client_for(proxy.url) as client:
        assert chat(client).done
        assert client.post("/v1/chat/completions", json=BODY, timeout=5).status_code == 503
        proxy.disarm()
        assert chat(client).done
    for record in proxy.flows():
        if record["event"] == "request_seen":
            proxy_conn_ports.add(record["client"])
    assert len(proxy_conn_ports) == 1  # all three on one kept-alive connection


def test_body_limit_refuses_only_the_large_bodies_with_413(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "body-limit=2000")
    seen_before = engine_state(sim)["requests_seen"]
    large = {**BODY, "messages": [{"role": "user", "content": "x" * 3000}]}
    with client_for(proxy.url) as client:
        small = chat(client)
        refused = client.post("/v1/chat/completions", json=large, timeout=5)
    assert small.done
    assert refused.status_code == 413 and refused.json()["error"]["type"] == "request_too_large"
    assert engine_state(sim)["requests_seen"] - seen_before == 1
    applied = [r for r in proxy.flows() if r["event"] == "fault_applied"]
    assert len(applied) == 1 and applied[0]["status"] == 413 and applied[0]["body_bytes"] > 3000
