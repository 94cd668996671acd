"""The simulated engine's context limit (`repro sim --context-length N`), answered in each engine's own
words and envelope: vLLM 0.32-0.34 (renderers/params.py; nested {"error": {...}}, param input_tokens,
"at least N+1"), SGLang 0.5.23 (tokenizer_manager.py; flat {"object": "error", ...}, the `>=` check
and the prompt-plus-max_tokens check). /v1/models reports the limit as max_model_len."""

from __future__ import annotations

import httpx
import pytest

from repro.sim import SimConfig, start_sim_process

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]

LIMIT = 100  # tokens; the sim counts 4 characters a token


def chat(url: str, chars: int, max_tokens: int | None = 5, stream: bool = False) -> httpx.Response:
    body = {"model": "sim-model", "messages": [{"role": "user", "content": "x" * chars}], "stream": stream}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10)


def test_vllm_refuses_a_prompt_past_its_context_in_its_words_and_clamps_max_tokens():
    with start_sim_process(SimConfig(dialect="vllm", context_length=LIMIT)) as sim:
        refused = chat(sim.url, 500, stream=True)  # 125 tokens: a stream too gets a plain 400 before any byte
        at_limit = chat(sim.url, 400)  # exactly 100 tokens: the engine's own check
        clamped = chat(sim.url, 380, max_tokens=50)  # 95 tokens: max_tokens cut to the 5 left
        models = httpx.get(f"{sim.url}/v1/models", timeout=10).json()
    assert refused.status_code == 400 and refused.headers["content-type"] == "application/json"
    assert refused.content == (
        b'{"error":{"message":"This model\'s maximum context length is 100 tokens. However, your prompt contains at '
        b'least 101 input tokens, which exceeds this limit even without any output tokens. Please reduce the length of '
        b'the input prompt. (parameter=input_tokens, value=101)","type":"BadRequestError","param":"input_tokens",'
        b'"code":400}}')
    assert at_limit.status_code == 400
    assert at_limit.json()["error"]["message"].startswith("The decoder prompt (length 100) plus the number of requested")
    assert clamped.status_code == 200 and clamped.json()["usage"]["completion_tokens"] == 5
    assert models["data"][0]["max_model_len"] == LIMIT


def test_sglang_refuses_in_its_words_and_its_flat_envelope():
    with start_sim_process(SimConfig(dialect="sglang", context_length=LIMIT)) as sim:
        refused = chat(sim.url, 500)
        total = chat(sim.url, 380, max_tokens=5)  # 95 + 5 reaches 100
        unasked = chat(sim.url, 380, max_tokens=None)  # no max_tokens set: only the prompt is checked
        models = httpx.get(f"{sim.url}/v1/models", timeout=10).json()
    assert refused.status_code == 400
    assert refused.content == (b'{"object":"error","message":"The input (125 tokens) is longer than the model\'s context '
                               b'length (100 tokens).","type":"BadRequestError","param":null,"code":400}')
    assert total.status_code == 400 and total.json()["message"] == (
        "Requested token count exceeds the model's maximum context length of 100 tokens. You requested a total of "
        "100 tokens: 95 tokens from the input messages and 5 tokens for the completion. Please reduce the number of "
        "tokens in the input messages or the completion to fit within the limit.")
    assert unasked.status_code == 200
    assert models["data"][0]["max_model_len"] == LIMIT


def test_without_a_limit_nothing_changes():
    with start_sim_process(SimConfig(dialect="vllm")) as sim:
        served = chat(sim.url, 200_000)
        models = httpx.get(f"{sim.url}/v1/models", timeout=10).json()
    assert served.status_code == 200
    assert models["data"][0]["max_model_len"] == 32768
