"""The model's context limit as the engines enforce it, in their own words, and their error JSON.

vLLM 0.32-0.34 (vllm/renderers/params.py, TokenizeParams._token_len_check): a prompt longer than
the context is refused; the tokenizer stops at the limit + 1, so the text says "at least N+1" and
states no more than that, whatever the prompt's real length. A prompt of exactly the context fails
in the engine's own check (v1/engine/input_processor.py). A prompt that fits but leaves less room
than max_tokens asks is not refused: max_tokens is clamped to what is left
(entrypoints/serve/utils/api_utils.py::get_max_tokens).

SGLang 0.5.23 (srt/managers/tokenizer_manager.py, _validate_one_request): a prompt of the context
or longer is refused (the check is `>=`); so is a prompt plus the max_tokens a request sets that
reaches it.

The envelopes: vLLM >= 0.10.1 nests its ErrorResponse ({"error": {message, type, param, code}});
SGLang's is flat ({"object": "error", message, type, param, code}). Both send HTTP `code`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Refusal:
    message: str
    param: str | None  # vLLM's VLLMValidationError names the parameter; SGLang's has none


def context_refusal(dialect: str, limit: int, prompt_tokens: int, max_tokens: int,
                    max_tokens_set: bool) -> Refusal | None:
    """What the engine says of a request its context cannot hold; None when it serves it."""
    if dialect == "vllm":
        if prompt_tokens > limit:
            seen = limit + 1  # tokenized up to the limit + 1 only
            return Refusal(f"This model's maximum context length is {limit} tokens. However, your prompt contains at "
                           f"least {seen} input tokens, which exceeds this limit even without any output tokens. "
                           f"Please reduce the length of the input prompt. (parameter=input_tokens, value={seen})",
                           "input_tokens")
        if prompt_tokens == limit:
            return Refusal(f"The decoder prompt (length {prompt_tokens}) plus the number of requested output tokens "
                           f"(at least 1) is longer than the maximum model length of {limit}. Make sure that "
                           "`max_model_len` is no smaller than the number of text tokens (prompt + requested output "
                           "tokens).", None)
        return None
    if prompt_tokens >= limit:
        return Refusal(f"The input ({prompt_tokens} tokens) is longer than the model's context length ({limit} tokens).",
                       None)
    if max_tokens_set and prompt_tokens + max_tokens >= limit:
        return Refusal(f"Requested token count exceeds the model's maximum context length of {limit} tokens. You "
                       f"requested a total of {prompt_tokens + max_tokens} tokens: {prompt_tokens} tokens from the "
                       f"input messages and {max_tokens} tokens for the completion. Please reduce the number of "
                       "tokens in the input messages or the completion to fit within the limit.", None)
    return None


def clamped_max_tokens(dialect: str, limit: int | None, prompt_tokens: int, max_tokens: int) -> int:
    """vLLM serves a prompt that fits with max_tokens cut to the room left; SGLang refused it above."""
    if limit is None or dialect != "vllm":
        return max_tokens
    return max(1, min(max_tokens, limit - prompt_tokens))


def error_body(dialect: str, status: int, message: str, kind: str = "BadRequestError",
               param: str | None = None) -> dict:
    """The engine's error JSON for `status`, in its dialect's envelope."""
    error = {"message": message, "type": kind, "param": param, "code": status}
    return {"error": error} if dialect == "vllm" else {"object": "error", **error}
