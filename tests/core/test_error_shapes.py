"""The body-shape recogniser on the real texts: the bytes each server writes, captured on loopback
from the binaries (nginx 1.22.1, HAProxy 2.6.12, Caddy 2.6.2, smg 1.13.0) or read from the released
code (vLLM 0.9-0.34 and SGLang 0.5.23 wheels, LiteLLM 1.110, Envoy's router.cc), and the OpenAI API's
bodies as quoted in issue threads. Each case says who wrote it and why it refused."""

from __future__ import annotations

import httpx
import pytest

from repro.core.error_shapes import ErrorAnswer, error_answer, read_answer
from tests.support.error_bodies import (
    ANTHROPIC_CONTEXT,
    ANTHROPIC_OVERLOADED,
    ANTHROPIC_RATE,
    FASTAPI_404,
    HAPROXY_413,
    HAPROXY_504,
    LITELLM_AUTH,
    LITELLM_CONTEXT,
    LITELLM_RATE,
    LLAMACPP_CONTEXT,
    LLAMACPP_CONTEXT_OLD,
    NGINX_413,
    NGINX_502_TOKENS_OFF,
    OPENAI_CONTEXT,
    OPENAI_KEY,
    OPENAI_MODEL,
    SGLANG_INPUT,
    SGLANG_QUEUE,
    SGLANG_TOTAL,
    SMG_NO_WORKER,
    TGI_INPUT,
    TGI_TOTAL,
    VLLM_010_FLAT,
    VLLM_012,
    VLLM_016,
    VLLM_034,
    VLLM_BUSY,
    VLLM_CHARS,
    VLLM_MESSAGES_CONTEXT,
    VLLM_MODEL,
    VLLM_TOOLS,
)


def answer(body: str, **headers: str) -> ErrorAnswer:
    return ErrorAnswer(body=body, headers={k.replace("_", "-"): v for k, v in headers.items()})


# (status, answer, server header) -> (origin, cause, limit, prompt tokens)
CASES = {
    "nginx 413 page": (413, answer(NGINX_413, server="nginx/1.22.1", content_type="text/html"), None,
                       ("nginx", "too-large", None, None)),
    "nginx 502, server_tokens off": (502, answer(NGINX_502_TOKENS_OFF, server="nginx"), None, ("nginx", None, None, None)),
    "HAProxy 413 deny": (413, answer(HAPROXY_413, content_type="text/html"), None, ("haproxy", "too-large", None, None)),
    "HAProxy 504": (504, answer(HAPROXY_504), None, ("haproxy", None, None, None)),
    "Caddy 2.7+ 413, empty": (413, answer("", server="Caddy"), None, ("caddy", "too-large", None, None)),
    "Envoy 413": (413, answer("Payload Too Large", server="envoy", content_type="text/plain"), None,
                  ("envoy", "too-large", None, None)),
    "Envoy 503 reset": (503, answer("upstream connect error or disconnect/reset before headers. reset reason: remote "
                                    "connection failure", server="envoy"), None, ("envoy", None, None, None)),
    "vLLM 0.34 context": (400, answer(VLLM_034, server="uvicorn"), None, ("vllm", "context", 4096, 4097)),
    "vLLM 0.12 context": (400, answer(VLLM_012), None, ("vllm", "context", 2048, 2301)),
    "vLLM 0.10 flat context": (400, answer(VLLM_010_FLAT), None, ("vllm", "context", 4096, 4000)),
    "vLLM 0.16 context": (400, answer(VLLM_016), None, ("vllm", "context", 8192, 9000)),
    "vLLM characters pre-check": (400, answer(VLLM_CHARS), None, ("vllm", "context", 4096, None)),
    "vLLM unknown model": (404, answer(VLLM_MODEL), None, ("vllm", "model", None, None)),
    "vLLM busy": (503, answer(VLLM_BUSY), None, ("vllm", "busy", None, None)),
    "vLLM without a tool parser": (400, answer(VLLM_TOOLS), None, ("vllm", "tools", None, None)),
    "vLLM --api-key": (401, answer('{"error":"Unauthorized"}', server="uvicorn"), None, ("engine", "key", None, None)),
    "SGLang input too long": (400, answer(SGLANG_INPUT), None, ("sglang", "context", 40000, 40001)),
    "SGLang total too long": (400, answer(SGLANG_TOTAL), None, ("sglang", "context", 4096, 4000)),
    "SGLang queue full": (503, answer(SGLANG_QUEUE), None, ("engine", "busy", None, None)),
    "LiteLLM quoting vLLM's context": (400, answer(LITELLM_CONTEXT), None, ("litellm", "context", 4096, 5000)),
    "LiteLLM auth": (401, answer(LITELLM_AUTH), None, ("litellm", "key", None, None)),
    "LiteLLM rate limit": (429, answer(LITELLM_RATE, retry_after="60"), None, ("litellm", "rate", None, None)),
    "OpenAI context": (400, answer(OPENAI_CONTEXT), None, ("openai", "context", 8192, 8227)),
    "OpenAI key": (401, answer(OPENAI_KEY), None, ("openai", "key", None, None)),
    "OpenAI model": (404, answer(OPENAI_MODEL), None, ("openai", "model", None, None)),
    "smg's own 404": (404, answer(SMG_NO_WORKER, x_smg_error_code="model_not_found"), None, ("smg", "model", None, None)),
    "llama.cpp context": (400, answer(LLAMACPP_CONTEXT), None, ("llamacpp", "context", 4096, 4476)),
    "llama.cpp context, older text": (400, answer(LLAMACPP_CONTEXT_OLD), None, ("llamacpp", "context", None, None)),
    "TGI prompt + max_new_tokens": (422, answer(TGI_TOTAL), None, ("tgi", "context", 4096, 4000)),
    "TGI prompt alone": (422, answer(TGI_INPUT), None, ("tgi", "context", 4095, 5000)),
    "Messages API overloaded (529)": (529, answer(ANTHROPIC_OVERLOADED), None, ("engine", "busy", None, None)),
    "Messages API rate limit": (429, answer(ANTHROPIC_RATE, retry_after="30"), None, ("engine", "rate", None, None)),
    "Messages API context": (400, answer(ANTHROPIC_CONTEXT), None, ("engine", "context", None, None)),
    "vLLM's Messages context": (400, answer(VLLM_MESSAGES_CONTEXT), None, ("engine", "context", 4096, 4097)),
    "a path the server does not serve": (404, answer(FASTAPI_404, server="uvicorn"), None, (None, "url", None, None)),
    "a bare 529": (529, answer(""), None, (None, "busy", None, None)),
    "a bare 429 (smg's limiter)": (429, answer(""), None, (None, "rate", None, None)),
    "no answer kept, nginx header only": (413, None, "nginx/1.22.1", (None, "too-large", None, None)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_servers_own_error_is_recognised_with_its_cause(name):
    status, given, server, (origin, cause, limit, prompt) = CASES[name]
    said = read_answer(status, given, server)
    assert (said.origin, said.cause, said.limit_tokens, said.prompt_tokens) == (origin, cause, limit, prompt), said


def test_the_server_header_alone_never_names_nginx():
    """nginx sets `Server: nginx` on every answer it passes on: an engine's JSON behind it is the engine's."""
    said = read_answer(400, answer(VLLM_034, server="nginx/1.22.1"))
    assert said.origin == "vllm" and said.role == "engine"
    said = read_answer(400, answer(SGLANG_INPUT, server="nginx/1.22.1"))
    assert said.origin == "sglang" and said.role == "engine"


def test_an_haproxy_page_passed_on_by_nginx_is_still_haproxys():
    said = read_answer(504, answer(HAPROXY_504, server="nginx/1.22.1"))
    assert said.origin == "haproxy"


def test_the_evidence_words_name_what_decided():
    said = read_answer(413, answer(NGINX_413, server="nginx/1.22.1"))
    assert said.shape == "nginx's error page (<center>nginx/1.22.1</center>)"
    said = read_answer(400, answer(VLLM_034))
    assert '"code": 400' in said.shape and "vLLM" in said.shape
    said = read_answer(400, answer(VLLM_034))
    assert said.at_least  # vLLM tokenizes only up to the limit + 1: it says "at least"


def test_a_gateway_quoting_an_engine_names_whose_words():
    said = read_answer(400, answer(LITELLM_CONTEXT))
    assert said.relayed == "Hosted_vllm"


def test_the_kept_answer_is_bounded_and_secret_free():
    """Kept from the library's own header mapping (httpx's here, case-insensitive as aiohttp's is)."""
    headers = httpx.Headers({"Server": "uvicorn", "Set-Cookie": "a=b", "Retry-After": "7",
                             "X-Smg-Error-Code": "sk-secret-123"})
    kept = error_answer(b"key sk-secret-123 " + b"x" * 10000, headers, "sk-secret-123")
    assert "sk-secret-123" not in kept.body and len(kept.body) <= 2048
    assert kept.headers == {"server": "uvicorn", "retry-after": "7", "x-smg-error-code": "[redacted]"}


def test_an_error_page_in_the_run_log_is_its_title_and_signature_not_its_markup():
    from repro.core.text import http_error_text

    assert http_error_text(413, NGINX_413.encode(), None, None) == (
        "HTTP 413: HTML page (413 Request Entity Too Large, nginx/1.22.1)")
    assert http_error_text(413, HAPROXY_413.encode(), None, None) == "HTTP 413: HTML page (413 Payload Too Large)"
