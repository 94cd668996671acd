"""What an error answer says: which kind of hop wrote it, and why it refused.

Every server on an LLM path writes its own errors in its own shape, and keeps it for years:
vLLM's and SGLang's OpenAI-style JSON, the OpenAI API's, LiteLLM's and smg's gateway JSON, nginx's
and HAProxy's HTML pages, Caddy's empty body, Envoy's plain text. The `Server` header says much less:
nginx sets its own on every response it passes on, Envoy overwrites the upstream's, HAProxy and the
gateways keep the upstream's. So the body speaks first. The texts are the real ones, each tested on
its bytes in tests/core/test_error_shapes.py (sources: the engines' released wheels, the proxies'
captured pages; the notes in that test name the versions).

Pure: `read_answer(status, answer, server)` reads what the round's client recorded (`ErrorAnswer`:
the bounded, secret-masked body and the few headers that identify a writer).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

import msgspec

from repro.core.text import ERROR_BODY_LIMIT, without_secret

# The headers that say who wrote an answer or when to come back; every other header is dropped.
ANSWER_HEADERS = ("content-type", "server", "via", "retry-after", "retry-after-ms", "x-smg-error-code",
                  "x-smg-routed-worker-id", "x-litellm-call-id", "x-litellm-model-group", "x-envoy-overloaded",
                  "x-envoy-upstream-service-time", "x-repro-fault")


class ErrorAnswer(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A non-200 answer as it came: its body (at most ERROR_BODY_LIMIT bytes as text, the API key
    masked) and its identifying headers (ANSWER_HEADERS, names lower-case). Kept in the run log so
    that `repro report` re-reads it with the same code."""

    body: str = ""
    headers: dict[str, str] = {}


def error_answer(body: bytes, headers: Mapping[str, str], secret: str | None) -> ErrorAnswer:
    """What a client keeps of a non-200 answer. `headers` is the library's case-insensitive mapping."""
    kept = {}
    for name in ANSWER_HEADERS:
        value = headers.get(name)
        if value:
            kept[name] = without_secret(str(value), secret)[:200]
    text = without_secret(body[:ERROR_BODY_LIMIT].decode("utf-8", "replace"), secret)
    return ErrorAnswer(body=text, headers=kept)


# Who writes a shape: the role of hop that can have written it.
ROLE_OF_ORIGIN = {"vllm": "engine", "sglang": "engine", "engine": "engine", "openai": "engine", "tgi": "engine",
                  "llamacpp": "engine",
                  "litellm": "router", "smg": "router",
                  "nginx": "proxy", "repro-proxy": "proxy", "haproxy": "proxy", "caddy": "proxy", "envoy": "proxy"}
# The metrics dialect (repro.core.snapshot) a hop of that origin shows on its own page.
DIALECT_OF_ORIGIN = {"vllm": "vllm", "sglang": "sglang", "tgi": "tgi", "llamacpp": "llamacpp", "litellm": "litellm",
                     "smg": "sglang-router", "repro-proxy": "repro-proxy",
                     "nginx": "nginx", "haproxy": "haproxy", "caddy": "caddy", "envoy": "envoy"}


@dataclass(frozen=True)
class Said:
    """What an error answer says. `origin`: who writes that shape (a ROLE_OF_ORIGIN key, or None);
    `shape`: the words that decided it, for the evidence; `cause`: too-large | context | rate |
    key | model | url | tools | busy | None (the status and text say no more)."""

    origin: str | None
    shape: str
    cause: str | None
    message: str = ""  # the error's own message (JSON) or page title, bounded
    limit_tokens: int | None = None  # context-exceeded: the model's context, as its text states it
    prompt_tokens: int | None = None  # and the prompt's tokens ("at least" when the text says so)
    at_least: bool = False
    prompt_chars: int | None = None  # vLLM's character pre-check states characters, not tokens
    relayed: str | None = None  # a gateway quoting its upstream's error: whose words ("Hosted_vllm")
    worker: str | None = None  # smg: the worker whose answer it passed on
    retry_after: str | None = None

    @property
    def role(self) -> str | None:
        return ROLE_OF_ORIGIN.get(self.origin or "")


# --- the engines' context texts ---------------------------------------------------------------
# vLLM (every release since 0.9: serving_engine.py, then renderers/params.py), the OpenAI API,
# LiteLLM quoting either, SGLang (tokenizer_manager.py). Each number is taken where its text says it.
LIMIT_TEXTS = (
    re.compile(r"maximum context length is (\d+) tokens"),  # vLLM, OpenAI, LiteLLM quoting them
    re.compile(r"context length is only (\d+) tokens"),  # vLLM 0.16-0.17
    re.compile(r"longer than the model's context length \((\d+) tokens\)"),  # SGLang, prompt alone
    re.compile(r"maximum context length of (\d+) tokens"),  # SGLang, prompt + max_new_tokens
    re.compile(r"longer than the maximum model length of (\d+)"),  # vLLM's engine-side check
    re.compile(r"max_model_len=(?:max_total_tokens=)?(\d+)"),  # vLLM, max_tokens alone too large
    re.compile(r"supports at most (\d+) completion tokens"),  # SGLang, max_completion_tokens too large
    re.compile(r"exceeds the available context size \((\d+) tokens\)"),  # llama.cpp server
    re.compile(r"`max_new_tokens` must be <= (\d+)"),  # TGI (router/src/validation.rs), prompt + max_new_tokens
    re.compile(r"`inputs` must have less than (\d+) tokens"),  # TGI, the prompt alone
)
PROMPT_TEXTS = (
    re.compile(r"your prompt contains (at least )?(\d+) input tokens"),  # vLLM 0.18+
    re.compile(r"your request has ()(\d+) input tokens"),  # vLLM 0.10.1-0.15
    re.compile(r"you requested ()(\d+) tokens in the messages"),  # vLLM <= 0.10.0
    re.compile(r"\(()(\d+) in the messages, \d+ in the completion\)"),  # vLLM <= 0.10.0, OpenAI
    re.compile(r"your messages resulted in ()(\d+) tokens"),  # OpenAI
    re.compile(r"You passed ()(\d+) input tokens"),  # vLLM 0.16-0.17
    re.compile(r"The input \(()(\d+) tokens\)"),  # SGLang
    re.compile(r"()(\d+) tokens from the input messages"),  # SGLang
    re.compile(r"decoder prompt \(length ()(\d+)\)"),  # vLLM's engine-side check
    re.compile(r"request \(()(\d+) tokens\) exceeds the available context size"),  # llama.cpp server
    re.compile(r"Given: ()(\d+)"),  # TGI: "Given: {P} `inputs` tokens and ..." or "Given: {P}"
)
PROMPT_CHARS = re.compile(r"your prompt contains (\d+) characters|You passed (\d+) input characters")
CONTEXT_WORDS = ("context_length_exceeded", "ContextWindowExceededError", "prompt is too long")
TOOL_PARSER = '"auto" tool choice requires --enable-auto-tool-choice'
# A gateway quoting its upstream: LiteLLM's `{Provider}Exception - {upstream message}`.
RELAYED = re.compile(r"(\w+)Exception - ")
# An engine's own words for a full queue, as a gateway quoting it keeps them: vLLM's QueueOverflowError
# (vllm/exceptions.py) and SGLang's --max-queued-requests (tokenizer_manager.py).
ENGINE_BUSY_TEXTS = ("The engine is currently busy and cannot accept new requests", "The request queue is full.")

# --- the proxies' own pages -------------------------------------------------------------------
NGINX_PAGE = re.compile(r"<hr><center>(nginx[^<]*)</center>")  # ngx_http_special_response.c, every status
HAPROXY_PAGE = re.compile(r"^<html><body><h1>(\d{3}[^<]*)</h1>\n")  # src/http.c http_err_msgs[], LF ends
TITLE = re.compile(r"<title>([^<]{1,80})</title>|<h1>([^<]{1,80})</h1>")
ENVOY_TEXTS = ("upstream connect error or disconnect/reset before headers", "no healthy upstream",
               "upstream request timeout", "Payload Too Large")


def read_answer(status: int | None, answer: ErrorAnswer | None, server: str | None = None) -> Said:
    """Who wrote this error answer and why, from its body first, then the headers a writer adds to
    its own answers only. `server` is the round's Server header (kept when no answer was)."""
    body = answer.body if answer is not None else ""
    headers = answer.headers if answer is not None else {}
    server = (headers.get("server") or server or "").lower()
    retry_after = headers.get("retry-after") or headers.get("retry-after-ms")
    said = _read_body(body.strip(), headers, server)
    cause = _cause(status, said)
    return Said(origin=said.origin, shape=said.shape, cause=cause, message=said.message,
                limit_tokens=said.limit_tokens, prompt_tokens=said.prompt_tokens, at_least=said.at_least,
                prompt_chars=said.prompt_chars, relayed=said.relayed, worker=headers.get("x-smg-routed-worker-id"),
                retry_after=retry_after)


def _read_body(body: str, headers: Mapping[str, str], server: str) -> Said:
    fault = headers.get("x-repro-fault")
    if fault:
        # repro's own fault proxy answering itself (proxies/addon.py): its short JSON is shaped like an
        # engine's, so the header it adds to its own answers speaks first.
        return Said("repro-proxy", f"repro's fault proxy's own answer (x-repro-fault: {fault[:40]})", None,
                    _json_message(body))
    page = NGINX_PAGE.search(body)
    if page:
        return Said("nginx", f"nginx's error page (<center>{page[1]}</center>)", None, _title(body))
    page = HAPROXY_PAGE.match(body)
    if page:
        alone = "" if server else ", no Server header"
        return Said("haproxy", f"HAProxy's error page (<html><body><h1>{page[1]}</h1>{alone})", None, page[1])
    if not body and server.startswith("caddy"):
        return Said("caddy", "Caddy's empty error answer (Server: Caddy, no body)", None)
    if server.startswith("envoy") and any(text in body for text in ENVOY_TEXTS):
        return Said("envoy", f"Envoy's plain-text reply ({body[:80]!r}, server: envoy)", None, body[:200])
    try:
        data = json.loads(body) if body[:1] == "{" else None
    except ValueError:
        data = None
    if isinstance(data, dict):
        return _read_json(data, headers)
    if body:
        return Said(None, f"a body of no known shape ({_excerpt(body)})", None, _excerpt(body))
    return Said(None, "an empty body", None)


# The Messages API's error types (Anthropic's API reference; vLLM's anthropic entrypoint uses them
# too) and the cause each says.
ANTHROPIC_CAUSES = {"overloaded_error": "busy", "rate_limit_error": "rate", "authentication_error": "key",
                    "permission_error": "key", "request_too_large": "too-large"}


def _read_json(data: dict, headers: Mapping[str, str]) -> Said:
    error = data.get("error")
    if data.get("type") == "error" and isinstance(error, dict):
        # The Anthropic Messages API's envelope: {"type": "error", "error": {"type", "message"}},
        # written by Anthropic's API and by engines serving /v1/messages (vLLM, llama.cpp).
        kind = str(error.get("type") or "")
        message = str(error.get("message") or "")
        if message.startswith("litellm."):  # LiteLLM's /v1/messages answers in this envelope too
            relayed = RELAYED.search(message)
            said = _with_text(Said("litellm", f'LiteLLM\'s Messages API error JSON ("type": "{kind[:40]}")', None,
                                   message, relayed=relayed[1] if relayed else None))
        else:
            said = _with_text(Said("engine", f'the Messages API\'s error JSON ("type": "{kind[:40]}")', None,
                                   message))
        return replace(said, cause=_relayed_not_found(said) or said.cause or ANTHROPIC_CAUSES.get(kind))
    if data == {"detail": "Not Found"}:
        # FastAPI's answer for a path the app has no route for (vLLM, SGLang, LiteLLM are FastAPI
        # apps): the server is up, the path is not served, whoever among them wrote it.
        return Said(None, 'FastAPI\'s 404 for a path it does not serve ({"detail": "Not Found"})', "url",
                    "Not Found")
    if error in ("Unauthorized", "Forbidden"):
        # vLLM's and SGLang's --api-key middleware: not the OpenAI shape, the same text in both.
        return Said("engine", f'an engine\'s API-key answer ({{"error":"{error}"}}: vLLM or SGLang)', None, error)
    if isinstance(error, str) and "error_type" in data:
        # TGI's ErrorResponse: {"error": "Input validation error: ...", "error_type": "validation"}
        return _with_text(Said("tgi", f'TGI\'s error JSON ({{"error": ..., "error_type": '
                               f'{json.dumps(str(data["error_type"])[:30])}}})', None, error))
    if isinstance(error, dict):
        message, code, kind = str(error.get("message") or ""), error.get("code"), str(error.get("type") or "")
        if kind == "exceed_context_size_error" or "n_ctx" in error:
            # llama.cpp's server: the OpenAI shape plus its own n_prompt_tokens and n_ctx
            said = _with_text(Said("llamacpp", f'llama.cpp server\'s error JSON ("type": "{kind[:40]}")', None, message))
            limit, prompt = error.get("n_ctx"), error.get("n_prompt_tokens")
            return replace(said, cause="context",
                           limit_tokens=limit if isinstance(limit, int) else said.limit_tokens,
                           prompt_tokens=prompt if isinstance(prompt, int) else said.prompt_tokens)
        if "x-smg-error-code" in headers:
            return _with_text(Said("smg", f"smg's own error JSON (x-smg-error-code: {headers['x-smg-error-code']})",
                                   None, message))
        if isinstance(code, str) and code.isdigit():  # LiteLLM's ProxyException: code is the status as text
            relayed = RELAYED.search(message)
            said = _with_text(Said("litellm", "LiteLLM's error JSON (code as a string: "
                                   f"{json.dumps(code)})", None, message, relayed=relayed[1] if relayed else None))
            return replace(said, cause=_relayed_not_found(said) or said.cause)
        if isinstance(code, int) and not isinstance(code, bool):
            # vLLM >= 0.10.1: {"error": {message, type, param, code: the status}}
            return _with_text(Said("vllm", f'vLLM\'s error JSON ({{"error": {{..., "type": "{kind[:40]}", '
                                   f'"code": {code}}}}})', None, message))
        if kind == "invalid_request_error" or isinstance(code, str):
            return _with_text(Said("openai", f"the OpenAI API's error JSON (code {json.dumps(code)})", None, message,
                                   relayed=None), code=code)
        return _with_text(Said(None, "an OpenAI-style error JSON", None, message))
    if data.get("object") == "error" and "message" in data:
        # SGLang (and vLLM <= 0.10.0): {"object": "error", message, type, param, code}
        message = str(data.get("message") or "")
        origin = "vllm" if "maximum context length is" in message else "sglang" if (
            "context length" in message) else "engine"
        who = {"vllm": "vLLM's (<= 0.10.0)", "sglang": "SGLang's", "engine": "an engine's (SGLang, vLLM <= 0.10)"}
        return _with_text(Said(origin, f'{who[origin]} error JSON ({{"object": "error", ..., "code": '
                               f'{data.get("code")}}})', None, message))
    return Said(None, f"a JSON body of no known shape ({_excerpt(json.dumps(data))})", None)


# FastAPI's 404 body as a gateway quotes it (escaped inside its own JSON's message, or not).
QUOTED_NOT_FOUND = ('{"detail":"Not Found"}', '{\\"detail\\":\\"Not Found\\"}')


def _relayed_not_found(said: Said) -> str | None:
    """A gateway quoting its upstream's FastAPI 404: the path the gateway sent the request to is
    not served there (LiteLLM's openai/ provider turns /v1/messages into /v1/responses)."""
    if said.relayed and any(text in said.message for text in QUOTED_NOT_FOUND):
        return "upstream-path"
    return None


def _with_text(said: Said, code: object = None) -> Said:
    """The numbers a context error states, from its message (the engine's, or the one a gateway quotes)."""
    text = said.message
    limit = next((int(m[1]) for pattern in LIMIT_TEXTS if (m := pattern.search(text))), None)
    prompt = next((m for pattern in PROMPT_TEXTS if (m := pattern.search(text))), None)
    chars = PROMPT_CHARS.search(text)
    context = limit is not None or code == "context_length_exceeded" or any(w in text for w in CONTEXT_WORDS)
    return Said(said.origin, said.shape, "context" if context else "tools" if TOOL_PARSER in text else None,
                text[:400], limit_tokens=limit, prompt_tokens=int(prompt[2]) if prompt else None,
                at_least=bool(prompt and prompt[1]), prompt_chars=int(chars[1] or chars[2]) if chars else None,
                relayed=said.relayed)


def _cause(status: int | None, said: Said) -> str | None:
    """Why the request was refused, from the status and what the body said."""
    if status == 413:
        return "too-large"
    if status == 429:
        return "rate"
    if status == 529:  # Anthropic's "overloaded", whatever the body
        return "busy"
    if said.cause is not None:
        return said.cause
    if status in (401, 403) or said.message in ("Unauthorized", "Forbidden") or "Authentication Error" in said.message:
        return "key"
    if status == 404:
        return "model" if "model" in said.message.lower() else "url"
    if status == 400 and "Invalid model name" in said.message:
        return "model"
    if status == 503 and said.role == "engine":
        return "busy"
    if status == 503 and said.relayed and any(text in said.message for text in ENGINE_BUSY_TEXTS):
        return "busy"  # a gateway quoting its engine's own busy words
    return None


def _json_message(body: str) -> str:
    """The message of an OpenAI- or Anthropic-shaped error JSON, "" when there is none."""
    try:
        error = json.loads(body).get("error") if body[:1] == "{" else None
    except ValueError:
        return ""
    return str(error.get("message") or "")[:400] if isinstance(error, dict) else ""


def _title(body: str) -> str:
    title = TITLE.search(body)
    return (title[1] or title[2]) if title else ""


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat[:80] + ("..." if len(flat) > 80 else "")
