"""A request the engine turns away for load, before admission: the `rate-limit` and `overloaded`
engine faults, each answered in the API's own error envelope so the judge reads who answered
and why from the body, as it would a real server's.

Overloaded, as the servers say it:
- vLLM: its admission control raises QueueOverflowError (vllm/exceptions.py, a GracefulHTTPError)
  when the request queue is full: HTTP 503, "The engine is currently busy and cannot accept new
  requests. Please try again later or on a different instance.", in its ErrorResponse
  ({"error": {message, type: "Service Unavailable", param, code: 503}}), on every OpenAI path
  (chat, completions, responses).
- SGLang: with --max-queued-requests, a full queue answers 503 "The request queue is full."
  (tokenizer_manager.py) in its flat envelope.
- The Messages API: 529 with {"type": "error", "error": {"type": "overloaded_error", ...}}
  (Anthropic's status and type, which its clients retry on; vLLM's anthropic entrypoint keeps the
  envelope).

Rate limits: neither engine limits request rates itself; a 429 with Retry-After is what a limit in
the engine's own server (an API-key middleware, a serving wrapper) answers, and the sim writes it
in the engine's envelope (rate_limit_error on /v1/messages) so the answer is placed on the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from repro.sim.context import error_body
from repro.sim.wire_requests import anthropic_error

DEFAULT_RETRY_AFTER_S = 1.0
VLLM_BUSY = ("The engine is currently busy and cannot accept new requests. Please try again later or on a "
             "different instance.")
SGLANG_QUEUE_FULL = "The request queue is full."
RATE_LIMITED = "Rate limit exceeded: too many requests. Retry after {s:g} s."


@dataclass(frozen=True)
class TurnedAway:
    status: int
    body: dict
    headers: tuple[tuple[bytes, bytes], ...] = ()


def turned_away(fault: str, value: float | None, dialect: str, api: str) -> TurnedAway:
    """The answer for a request turned away by `fault` (rate-limit or overloaded) on `api`
    (chat, text, generate, messages, responses)."""
    messages = api == "messages"
    if fault == "rate-limit":
        seconds = float(value) if value else DEFAULT_RETRY_AFTER_S
        text = RATE_LIMITED.format(s=seconds)
        body = anthropic_error(429, text) if messages else error_body(dialect, 429, text, kind="RateLimitError")
        # Retry-After is whole seconds (RFC 9110 delay-seconds): rounded up, never 0 for a wait.
        whole = max(1, int(-(-seconds // 1)))
        return TurnedAway(429, body, ((b"retry-after", str(whole).encode()),))
    if messages:
        return TurnedAway(529, anthropic_error(529, "Overloaded"))
    if dialect == "vllm":
        return TurnedAway(503, error_body("vllm", 503, VLLM_BUSY, kind="Service Unavailable"))
    return TurnedAway(503, error_body("sglang", 503, SGLANG_QUEUE_FULL, kind="503"))
