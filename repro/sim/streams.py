"""What the simulated engine streams for each API, token by token: one shape per wire API.

The engine produces tokens; how they go on the wire depends on what was asked: OpenAI chat or
text completions (`data: {chunk}` ... `data: [DONE]`), SGLang's native /generate (the text so
far in every event), the Anthropic Messages API (`event: message_start`, `content_block_*`,
`message_delta`, `message_stop`; vLLM's `vllm/entrypoints/anthropic` converts its chat stream
to these) or the OpenAI Responses API (`response.created`, `response.output_item.added`,
`response.output_text.delta`, `response.function_call_arguments.delta`, ..., `response.completed`;
vLLM's `serving_responses.py`). The app's one streaming loop asks a shape for the bytes of each
token and of the end, so every engine fault (a hang, a slow decode, a lost request) plays the
same under every API.

When bytes go out matters to what a client sees: a Responses stream sends `response.created`
and `response.in_progress` at once, before the first token (vLLM yields them before it awaits
the engine), so a hung engine behind it is mid-stream to the client; every other shape sends its
first event with the first token.

Chat is the benchmarks' hot path: its chunk's head is built once per request, a token is a few
concatenations.
"""

from __future__ import annotations

import json
import time
from typing import Any

import msgspec

from repro.sim.engine import Request
from repro.sim.tool_calls import ToolPlan, token_deltas
from repro.sim.vocabulary import WORDS

_encode = msgspec.json.encode


def word(request: Request, token: int) -> str:
    return WORDS[(request.seed + token * 7) % len(WORDS)]


def usage(request: Request) -> dict:
    return {"prompt_tokens": request.prompt_tokens, "completion_tokens": request.produced,
            "total_tokens": request.prompt_tokens + request.produced}


def text_of(request: Request, tokens: int) -> str:
    return "".join(word(request, i) + " " for i in range(tokens))


def generate_body(request: Request, tokens: int, final: bool) -> dict:
    """SGLang's /generate output: the text so far, and meta_info (finish_reason a dict, null until the end)."""
    reason = None
    if final:
        reason = {"type": "length", "length": request.produced} if request.finish_reason == "length" \
            else {"type": "stop", "matched": None}
    return {"text": text_of(request, tokens), "meta_info": {
        "id": request.rid, "finish_reason": reason, "prompt_tokens": request.prompt_tokens,
        "completion_tokens": tokens, "cached_tokens": 0}}


class StreamShape:
    """The bytes of one request's stream: `opening` (sent with the headers), then per token
    `tool` (a token of a tool-call plan) or `word`, then `closing` once the engine finished."""

    opening = b""

    def tool(self, plan: ToolPlan, token: int) -> bytes:
        raise NotImplementedError

    def word(self, request: Request, token: int) -> bytes:
        raise NotImplementedError

    def closing(self, request: Request, plan: ToolPlan | None) -> bytes:
        raise NotImplementedError


class ChatShape(StreamShape):
    """OpenAI chat (or text) completion chunks, as SGLang and vLLM send them."""

    def __init__(self, request: Request, model: str, kind: str, dialect: str, include_usage: bool) -> None:
        self.obj = b"chat.completion.chunk" if kind == "chat" else b"text_completion"
        self.chat = kind == "chat"
        self.head = (b'data: {"id":"' + request.rid.encode() + b'","object":"' + self.obj + b'","created":'
                     + str(int(time.time())).encode() + b',"model":"' + model.encode()
                     + b'","choices":[{"index":0,' + (b'"delta":{' if self.chat else b''))
        self.model, self.dialect, self.include_usage = model, dialect, include_usage

    def tool(self, plan: ToolPlan, token: int) -> bytes:
        role = b'"role":"assistant",' if token == 0 else b""
        return (self.head + role + b'"content":null,"tool_calls":' + token_deltas(plan, token, self.dialect)
                + b'},"finish_reason":null}]}\n\n')

    def word(self, request: Request, token: int) -> bytes:
        text = word(request, token).encode()
        if self.chat:
            role = b'"role":"assistant",' if token == 0 else b""
            return self.head + role + b'"content":"' + text + b' "},"finish_reason":null}]}\n\n'
        return self.head + b'"text":"' + text + b' ","logprobs":null,"finish_reason":null}]}\n\n'

    def closing(self, request: Request, plan: ToolPlan | None) -> bytes:
        # The engine ends a plan at its last token ("length"); the model's reason is the plan's.
        reason = (plan.finish_reason if plan is not None else request.finish_reason or "stop").encode()
        if self.chat:
            out = self.head + b'},"finish_reason":"' + reason + b'"}]}\n\n'
        else:
            out = self.head + b'"text":"","logprobs":null,"finish_reason":"' + reason + b'"}]}\n\n'
        if self.include_usage:
            out += b"data: " + _encode({"id": request.rid, "object": self.obj.decode(), "model": self.model,
                                        "choices": [], "usage": usage(request)}) + b"\n\n"
        return out + b"data: [DONE]\n\n"


class GenerateShape(StreamShape):
    """SGLang's native /generate stream: each event carries the text so far and meta_info."""

    def word(self, request: Request, token: int) -> bytes:
        final = request.finished and token + 1 == request.produced
        return b"data: " + _encode(generate_body(request, token + 1, final)) + b"\n\n"

    def closing(self, request: Request, plan: ToolPlan | None) -> bytes:
        return b"data: [DONE]\n\n"


def _event(kind: str, obj: dict) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + _encode(obj) + b"\n\n"


# The Messages API's stop reasons for the engine's finish reasons (vLLM's anthropic converter).
MESSAGES_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


class MessagesShape(StreamShape):
    """The Anthropic Messages stream: a text block, or one tool_use block per call."""

    def __init__(self, request: Request, model: str) -> None:
        self.rid, self.model = request.rid, model
        self.prompt_tokens = request.prompt_tokens
        self.block = -1  # the content block open now
        self.call = -1  # the plan's call that block streams, if a tool_use block
        self.started = False

    def _start(self) -> bytes:
        if self.started:
            return b""
        self.started = True
        return _event("message_start", {"type": "message_start", "message": {
            "id": self.rid, "type": "message", "role": "assistant", "content": [], "model": self.model,
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 1}}})

    def _stop_block(self) -> bytes:
        return _event("content_block_stop", {"type": "content_block_stop", "index": self.block}) \
            if self.block >= 0 else b""

    def tool(self, plan: ToolPlan, token: int) -> bytes:
        out = [self._start()]
        for index, first, text in plan.tokens[token]:
            if first or index != self.call:
                out.append(self._stop_block())
                self.block += 1
                self.call = index
                call_id = plan.calls[index][0]
                out.append(_event("content_block_start", {"type": "content_block_start", "index": self.block,
                                                          "content_block": {"type": "tool_use", "id": call_id,
                                                                            "name": plan.calls[index][1],
                                                                            "input": {}}}))
                if first:
                    continue
            out.append(_event("content_block_delta", {"type": "content_block_delta", "index": self.block,
                                                      "delta": {"type": "input_json_delta", "partial_json": text}}))
        return b"".join(out)

    def word(self, request: Request, token: int) -> bytes:
        out = self._start()
        if self.block < 0:
            self.block = 0
            out += _event("content_block_start", {"type": "content_block_start", "index": 0,
                                                  "content_block": {"type": "text", "text": ""}})
            # Anthropic's API sends a ping early in every stream; clients must skip it.
            out += _event("ping", {"type": "ping"})
        return out + _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                    "delta": {"type": "text_delta", "text": word(request, token) + " "}})

    def closing(self, request: Request, plan: ToolPlan | None) -> bytes:
        reason = plan.finish_reason if plan is not None else request.finish_reason or "stop"
        return b"".join((self._start(), self._stop_block(), _event("message_delta", {
            "type": "message_delta", "delta": {"stop_reason": MESSAGES_STOP.get(reason, "end_turn"),
                                               "stop_sequence": None},
            "usage": {"output_tokens": request.produced}}), _event("message_stop", {"type": "message_stop"})))


def messages_body(request: Request, model: str, plan: ToolPlan | None) -> dict:
    """A non-streamed Messages answer."""
    if plan is not None:
        content: list[dict[str, Any]] = [{"type": "tool_use", "id": call_id, "name": name, "input": json.loads(args)}
                                         for call_id, name, args in plan.calls]
        reason = plan.finish_reason
    else:
        content = [{"type": "text", "text": text_of(request, request.produced)}]
        reason = request.finish_reason or "stop"
    return {"id": request.rid, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": MESSAGES_STOP.get(reason, "end_turn"), "stop_sequence": None,
            "usage": {"input_tokens": request.prompt_tokens, "output_tokens": request.produced}}


class ResponsesShape(StreamShape):
    """The OpenAI Responses stream: a message item, or one function_call item per call."""

    def __init__(self, request: Request, model: str) -> None:
        self.request, self.model = request, model
        self.seq = 0
        self.item = -1  # output index of the item open now
        self.call = -1
        self.text: list[str] = []
        self.items: list[dict] = []  # the output items, as the final response lists them
        self.final: dict | None = None  # the response as the terminal event carries it
        self.opening = self._ev("response.created", response=self._response("in_progress")) \
            + self._ev("response.in_progress", response=self._response("in_progress"))

    def _ev(self, kind: str, **fields) -> bytes:
        obj = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return _event(kind, obj)

    def _response(self, status: str, **more) -> dict:
        return {"id": self.request.rid, "object": "response", "created_at": int(self.request.arrived),
                "status": status, "model": self.model, "output": self.items if status != "in_progress" else [],
                **more}

    def _close_item(self) -> bytes:
        if self.item < 0:
            return b""
        item = self.items[self.item]
        if item["type"] == "message":
            text = "".join(self.text)
            item["content"] = [{"type": "output_text", "text": text, "annotations": []}]
            out = self._ev("response.output_text.done", item_id=item["id"], output_index=self.item, content_index=0,
                           text=text)
        else:
            out = self._ev("response.function_call_arguments.done", item_id=item["id"], output_index=self.item,
                           arguments=item["arguments"])
        item["status"] = "completed"
        return out + self._ev("response.output_item.done", output_index=self.item, item=item)

    def tool(self, plan: ToolPlan, token: int) -> bytes:
        out = []
        for index, first, text in plan.tokens[token]:
            if first or index != self.call:
                out.append(self._close_item())
                self.call = index
                call_id, name, _ = plan.calls[index]
                item = {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
                        "arguments": "", "status": "in_progress"}
                self.items.append(item)
                self.item = len(self.items) - 1
                out.append(self._ev("response.output_item.added", output_index=self.item, item=dict(item)))
                if first:
                    continue
            item = self.items[self.item]
            item["arguments"] += text
            out.append(self._ev("response.function_call_arguments.delta", item_id=item["id"],
                                output_index=self.item, delta=text))
        return b"".join(out)

    def word(self, request: Request, token: int) -> bytes:
        out = b""
        if self.item < 0:
            item = {"type": "message", "id": f"msg_{request.rid}", "status": "in_progress", "role": "assistant",
                    "content": []}
            self.items.append(item)
            self.item = 0
            out = self._ev("response.output_item.added", output_index=0, item=dict(item))
        piece = word(request, token) + " "
        self.text.append(piece)
        return out + self._ev("response.output_text.delta", item_id=self.items[0]["id"], output_index=0,
                              content_index=0, delta=piece)

    def closing(self, request: Request, plan: ToolPlan | None) -> bytes:
        out = self._close_item()
        tokens = {"input_tokens": request.prompt_tokens, "output_tokens": request.produced,
                  "total_tokens": request.prompt_tokens + request.produced}
        if plan is None and request.finish_reason == "length":
            self.final = self._response("incomplete", incomplete_details={"reason": "max_output_tokens"}, usage=tokens)
            return out + self._ev("response.incomplete", response=self.final)
        self.final = self._response("completed", usage=tokens)
        return out + self._ev("response.completed", response=self.final)


def responses_body(request: Request, model: str, plan: ToolPlan | None) -> dict:
    """A non-streamed Responses answer: the response the stream's terminal event carries."""
    shape = ResponsesShape(request, model)
    for token in range(len(plan.tokens) if plan is not None else request.produced):
        if plan is not None:
            shape.tool(plan, token)
        else:
            shape.word(request, token)
    shape.closing(request, plan)
    return shape.final
