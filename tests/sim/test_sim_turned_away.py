"""The engine faults that turn requests away for load (`rate-limit[=S]`, `overloaded`): each API
answers in its own envelope, read by the official SDKs as their own error classes and by repro's
error reader as the cause it is."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from repro.core.error_shapes import error_answer, read_answer
from repro.sim import SimConfig, serve_in_thread

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]

BODIES = {
    "chat": ("/v1/chat/completions", {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}],
                                      "stream": True}),
    "responses": ("/v1/responses", {"model": "sim-model", "input": "hi", "stream": True}),
    "messages": ("/v1/messages", {"model": "sim-model", "max_tokens": 4, "stream": True,
                                  "messages": [{"role": "user", "content": "hi"}]}),
}


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def sim(request):
    with serve_in_thread(SimConfig(dialect=request.param, itl=0.001)) as server:
        yield server


def arm(sim, spec: str | None) -> None:
    if spec is None:
        httpx.delete(sim.url + "/sim/fault", timeout=5).raise_for_status()
    else:
        httpx.post(sim.url + "/sim/fault", json={"spec": spec}, timeout=5).raise_for_status()


def post(sim, api: str) -> httpx.Response:
    path, body = BODIES[api]
    return httpx.post(sim.url + path, json=body, headers={"x-api-key": "k"}, timeout=5)


@pytest.mark.parametrize("api", sorted(BODIES))
def test_rate_limit_answers_429_with_retry_after_in_each_envelope(sim, api):
    arm(sim, "rate-limit=2.5")
    try:
        answer = post(sim, api)
    finally:
        arm(sim, None)
    assert answer.status_code == 429 and answer.headers["retry-after"] == "3"  # whole seconds, rounded up
    said = read_answer(429, error_answer(answer.content, answer.headers, None))
    assert said.cause == "rate" and said.role == "engine" and said.retry_after == "3"
    if api == "messages":
        assert answer.json()["error"]["type"] == "rate_limit_error"
    assert post(sim, api).status_code == 200  # disarmed: served again


@pytest.mark.parametrize("api", sorted(BODIES))
def test_overloaded_is_529_on_messages_and_the_engines_503_elsewhere(sim, api):
    arm(sim, "overloaded")
    try:
        answer = post(sim, api)
    finally:
        arm(sim, None)
    said = read_answer(answer.status_code, error_answer(answer.content, answer.headers, None))
    assert said.cause == "busy" and said.role == "engine", said
    if api == "messages":
        assert answer.status_code == 529
        assert answer.json() == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    else:
        assert answer.status_code == 503
        assert ("currently busy" in said.message) if sim.config.dialect == "vllm" else ("queue is full" in said.message)


def test_after_n_serves_n_requests_then_turns_the_rest_away(sim):
    arm(sim, "overloaded,after=2")
    try:
        statuses = [post(sim, "chat").status_code for _ in range(4)]
    finally:
        arm(sim, None)
    assert statuses == [200, 200, 503, 503]


def test_the_sdks_read_them_as_their_own_errors(sim):
    anth = anthropic.Anthropic(base_url=sim.url, api_key="k", max_retries=0, timeout=5)
    oai = openai.OpenAI(base_url=sim.url + "/v1", api_key="k", max_retries=0, timeout=5)
    arm(sim, "overloaded")
    try:
        with pytest.raises(anthropic.OverloadedError) as overloaded:
            anth.messages.create(model="m", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.InternalServerError) as busy:
            oai.responses.create(model="m", input="hi")
        arm(sim, "rate-limit")
        with pytest.raises(anthropic.RateLimitError) as limited:
            anth.messages.create(model="m", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.RateLimitError):
            oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    finally:
        arm(sim, None)
    assert overloaded.value.status_code == 529 and overloaded.value.body["error"]["type"] == "overloaded_error"
    assert busy.value.status_code == 503
    assert limited.value.response.headers["retry-after"] == "1"
