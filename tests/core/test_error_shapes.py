"""The body-shape recogniser on the real texts: the bytes each server writes, captured on loopback
from the binaries (nginx 1.22.1, HAProxy 2.6.12, Caddy 2.6.2, smg 1.13.0) or read from the released
code (vLLM 0.9-0.34 and SGLang 0.5.23 wheels, LiteLLM 1.110, Envoy's router.cc), and the OpenAI API's
bodies as quoted in issue threads. Each case says who wrote it and why it refused."""

from __future__ import annotations

import httpx
import pytest

from repro.core.error_shapes import ErrorAnswer, error_answer, read_answer


def answer(body: str, **headers: str) -> ErrorAnswer:
    return ErrorAnswer(body=body, headers={k.replace("_", "-"): v for k, v in headers.items()})


NGINX_413 = ("<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n<center><h1>413 Request "
             "Entity Too Large</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>\r\n")
NGINX_502_TOKENS_OFF = ("<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway"
                        "</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n")
HAPROXY_413 = "<html><body><h1>413 Payload Too Large</h1>\nThe request entity exceeds the maximum allowed.\n</body></html>\n"
HAPROXY_504 = "<html><body><h1>504 Gateway Time-out</h1>\nThe server didn't respond in time.\n</body></html>\n"
VLLM_034 = ('{"error":{"message":"This model\'s maximum context length is 4096 tokens. However, your prompt contains at '
            'least 4097 input tokens, which exceeds this limit even without any output tokens. Please reduce the length '
            'of the input prompt. (parameter=input_tokens, value=4097)","type":"BadRequestError","param":"input_tokens",'
            '"code":400}}')
VLLM_012 = ('{"error":{"message":"This model\'s maximum context length is 2048 tokens. However, your request has 2301 input '
            'tokens. Please reduce the length of the input messages.","type":"BadRequestError","param":null,"code":400}}')
VLLM_010_FLAT = ('{"object":"error","message":"This model\'s maximum context length is 4096 tokens. However, you requested '
                 '5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or '
                 'completion.","type":"BadRequestError","param":null,"code":400}')
VLLM_016 = ('{"error":{"message":"You passed 9000 input tokens and requested 100 output tokens. However, the model\'s context '
            'length is only 8192 tokens, resulting in a maximum input length of 8092 tokens. Please reduce the length of the '
            'input prompt. (parameter=input_tokens, value=9000)","type":"BadRequestError","param":"input_tokens","code":400}}')
VLLM_CHARS = ('{"error":{"message":"This model\'s maximum context length is 4096 tokens. However, your prompt contains 90000 '
              'characters (more than 73728 characters, which is the upper bound for 4096 input tokens). Please reduce the '
              'length of the input prompt. (parameter=input_text, value=90000)","type":"BadRequestError",'
              '"param":"input_text","code":400}}')
VLLM_MODEL = '{"error":{"message":"The model `gpt-4` does not exist.","type":"NotFoundError","param":"model","code":404}}'
VLLM_BUSY = ('{"error":{"message":"The engine is currently busy and cannot accept new requests. Please try again later or '
             'on a different instance.","type":"Service Unavailable","param":null,"code":503}}')
VLLM_TOOLS = ('{"error":{"message":"\\"auto\\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be '
              'set","type":"BadRequestError","param":null,"code":400}}')
SGLANG_INPUT = ('{"object":"error","message":"The input (40001 tokens) is longer than the model\'s context length (40000 '
                'tokens).","type":"BadRequestError","param":null,"code":400}')
SGLANG_TOTAL = ('{"object":"error","message":"Requested token count exceeds the model\'s maximum context length of 4096 '
                'tokens. You requested a total of 4200 tokens: 4000 tokens from the input messages and 200 tokens for the '
                'completion. Please reduce the number of tokens in the input messages or the completion to fit within the '
                'limit.","type":"BadRequestError","param":null,"code":400}')
SGLANG_QUEUE = '{"object":"error","message":"The request queue is full.","type":"503","param":null,"code":503}'
LITELLM_CONTEXT = ('{"error":{"message":"litellm.ContextWindowExceededError: litellm.BadRequestError: '
                   'ContextWindowExceededError: Hosted_vllmException - This model\'s maximum context length is 4096 tokens. '
                   'However, your request has 5000 input tokens. Please reduce the length of the input messages.",'
                   '"type":"invalid_request_error","param":null,"code":"400"}}')
LITELLM_AUTH = ('{"error":{"message":"Authentication Error, Invalid proxy server token passed","type":"auth_error",'
                '"param":"None","code":"401"}}')
LITELLM_RATE = ('{"error":{"message":"Rate limit exceeded for api_key: sk-...: 10. Limit type: requests. Current limit: 10, '
                'Remaining: 0. Limit resets at: 2026-12-05 07:00:00 UTC","type":"rate_limit_error","param":null,'
                '"code":"429"}}')
OPENAI_CONTEXT = ('{\n  "error": {\n    "message": "This model\'s maximum context length is 8192 tokens. However, your '
                  'messages resulted in 8227 tokens. Please reduce the length of the messages.",\n    "type": '
                  '"invalid_request_error",\n    "param": "messages",\n    "code": "context_length_exceeded"\n  }\n}\n')
OPENAI_KEY = ('{"error":{"message":"Incorrect API key provided: sk-proj-****MxYA. You can find your API key at '
              'https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,'
              '"code":"invalid_api_key"}}')
OPENAI_MODEL = ('{"error":{"message":"The model `gpt-4o` does not exist or you do not have access to it.","type":'
                '"invalid_request_error","param":null,"code":"model_not_found"}}')
SMG_NO_WORKER = ('{"error":{"type":"invalid_request_error","code":"model_not_found","message":"No worker available for '
                 'model \'m\'","param":null}}')


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
