"""The simulated engine's HTTP front end: a raw ASGI app (no framework: it is small and hot).

Speaks what SGLang and vLLM speak: OpenAI chat and text completions and SGLang's native /generate
(streamed SSE ending in [DONE], or one JSON body), /v1/models, /health, /health_generate, /metrics;
the SGLang worker endpoints a router calls (/server_info, /model_info, and /v1/loads, or /get_load
with the "older-release" quirk: SGLang 0.5.23 serves /v1/loads from
srt/entrypoints/v1_loads.py and no /get_load); vLLM's /version and /load
(vllm/entrypoints/serve/instrumentator/basic.py). /sim/fault and /sim/state let tests arm faults
at runtime and see the truth.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import zlib
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from repro.sim.config import SimConfig
from repro.sim.context import clamped_max_tokens, context_refusal, error_body
from repro.sim.engine import Engine, Request
from repro.sim.metrics import metrics_page, registry_for
from repro.sim.streams import (
    ChatShape,
    GenerateShape,
    MessagesShape,
    ResponsesShape,
    StreamShape,
    generate_body,
    messages_body,
    responses_body,
    text_of,
    usage,
)
from repro.sim.tokenizer import tokenizer_dir
from repro.sim.tool_calls import ToolPlan, ToolRequestError, ToolScript, message_tool_calls, plan_tool_calls
from repro.sim.turned_away import turned_away
from repro.sim.wire_requests import WireRequestError, anthropic_error, from_messages, from_responses

MAX_BODY = 16 * 1024 * 1024
JSON = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
FIRST_TOKEN_DELAY_FIELD = "repro_first_token_delay"
FIRST_TOKEN_DELAY_HEADER = b"x-repro-first-token-delay"
MAX_FIRST_TOKEN_DELAY = 600
GENERATE_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/generate", "/v1/messages", "/v1/responses"})
# The wire APIs a quirk can turn off (a server that does not serve them answers 404, as FastAPI does).
API_OFF_QUIRK = {"/v1/messages": "no-messages-api", "/v1/responses": "no-responses-api"}
RESPONSES_KEPT = 1024  # responses a previous_response_id can name (vLLM's store is in memory too)
# Routes SGLang's HTTP middleware labels in sglang:http_requests_active (unknown paths are not routes).
ROUTES = GENERATE_PATHS | {"/metrics", "/health", "/health_generate", "/ready", "/v1/models", "/server_info",
                           "/get_server_info", "/model_info", "/get_model_info", "/v1/loads", "/get_load",
                           "/flush_cache", "/version", "/load"}
SGLANG_INFO = frozenset({"/server_info", "/get_server_info", "/model_info", "/get_model_info"})
VERSION = {"sglang": "0.5.23", "vllm": "0.33.0"}  # the releases whose names and endpoints the sim speaks
_ids = itertools.count(1)
ANSWERS_KEPT = 8
_decoder = msgspec.json.Decoder()
_encode = msgspec.json.encode


class BadRequest(Exception):
    """A request the engine refuses with 400, in its dialect's error JSON; `param` as vLLM names it."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class SimApp:
    def __init__(self, config: SimConfig) -> None:
        self.config = config.validate()
        self.engine: Engine | None = None
        self.on_crash: Callable[[], None] = lambda: None  # the server runner installs the real one
        self._engine_task: asyncio.Task | None = None
        self._registry = None
        self._tokenizer = str(tokenizer_dir())
        self.started = time.time()
        self.http_active: dict[tuple[str, str], int] = {}  # (route, method) -> requests open at the HTTP layer
        c = self.config
        self._script = ToolScript(c.tool_rounds, c.tool_name, c.tool_path) if c.tool_rounds else None
        # response id -> the conversation it ends (chat messages), for a later previous_response_id
        self._responses: dict[str, list[dict]] = {}
        # The text of the last few text answers (not tool calls) that finished: `repro harness` looks
        # for the final one in what the harness printed, to tell a finished agent loop from one that quit.
        self.answers: deque[str] = deque(maxlen=ANSWERS_KEPT)

    # --- ASGI --------------------------------------------------------------------------------

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable[dict]], send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        # Counted for the whole response, a stream included (SGLang decrements only after the body
        # is sent: srt/utils/http_middleware_patch.py), and for a request the front end swallows.
        key = (path if path in ROUTES else "/v1/models/{model:path}" if path.startswith("/v1/models/") else "", method)
        if key[0]:
            self.http_active[key] = self.http_active.get(key, 0) + 1
        try:
            await self._route(path, method, receive, send)
        finally:
            if key[0]:
                self.http_active[key] -= 1

    async def _route(self, path: str, method: str, receive, send) -> None:
        engine = self.engine
        config = self.config
        sglang, current = config.dialect == "sglang", config.current_release
        try:
            if path in API_OFF_QUIRK and API_OFF_QUIRK[path] in config.active_quirks:
                await _json(send, 404, {"detail": "Not Found"})
            elif path in GENERATE_PATHS and method == "POST":
                await self._chat(receive, send, path)
            elif path == "/metrics":
                if engine.fault_active("metrics-down"):
                    await _respond(send, 503, b"metrics unavailable (simulated metrics-down)\n")
                else:
                    await _respond(send, 200, metrics_page(self._registry),
                                   [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")])
            elif path == "/health":
                await _respond(send, 200, b"")
            elif path == "/health_generate":
                await self._health_generate(send)
            elif path == "/v1/models":
                await _json(send, 200, {"object": "list", "data": [self._model_card()]})
            elif path == f"/v1/models/{config.model}":
                await _json(send, 200, self._model_card())
            elif sglang and (path in SGLANG_INFO or path == ("/v1/loads" if current else "/get_load")):
                await _json(send, 200, self._worker_info(path))
            elif sglang and current and path == "/ready":
                await _respond(send, 200, b"")
            elif not sglang and path == "/version":
                await _json(send, 200, {"version": self._version()})
            elif not sglang and path == "/load":
                # vLLM counts in-flight generation requests here (with --enable-server-load-tracking).
                await _json(send, 200, {"server_load": self.generating()})
            elif path == "/flush_cache":
                await _respond(send, 200, b"Cache flushed.\n")
            elif path == "/sim/state":
                await _json(send, 200, {**engine.state(), "answers": list(self.answers)})
            elif path == "/sim/fault" and method in ("POST", "DELETE"):
                await self._admin_fault(receive, send, method)
            else:
                await _json(send, 404, {"object": "error", "message": f"no route {method} {path}", "code": 404})
        except BadRequest as exc:
            # Each API refuses in its own envelope: Anthropic's for /v1/messages, the engine's otherwise.
            await _json(send, 400, anthropic_error(400, str(exc)) if path == "/v1/messages"
                        else error_body(config.dialect, 400, str(exc), param=exc.param))

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.engine = Engine(self.config)
                self._registry = registry_for(self.engine, lambda: self.http_active)
                self._engine_task = asyncio.get_running_loop().create_task(self.engine.run())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def generating(self) -> int:
        """Generation requests open at the HTTP layer (a swallowed one included)."""
        return sum(n for (path, _), n in self.http_active.items() if path in GENERATE_PATHS)

    def _model_card(self) -> dict:
        # Both engines report the context as max_model_len (vLLM's ModelCard; SGLang's /v1/models too).
        card = {"id": self.config.model, "object": "model", "created": int(self.started),
                "owned_by": self.config.dialect, "root": self.config.model}
        if "no-max-model-len" not in self.config.active_quirks:
            card["max_model_len"] = self.context_tokens()
        return card

    def context_tokens(self) -> int:
        return self.config.context_length or 32768

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.close()
        if self._engine_task is not None:
            self._engine_task.cancel()

    # --- generation --------------------------------------------------------------------------

    async def _chat(self, receive, send, path: str) -> None:
        body = await _read_body(receive)
        try:
            payload = _decoder.decode(body)
        except msgspec.DecodeError as exc:
            raise BadRequest(f"request body is not JSON: {exc}") from None
        if not isinstance(payload, dict):
            raise BadRequest("request body must be a JSON object")
        kind = KINDS[path]
        wire = payload
        if kind in ("messages", "responses"):
            try:
                payload = from_messages(wire) if kind == "messages" else from_responses(wire, self._earlier(wire))
            except WireRequestError as exc:
                raise BadRequest(str(exc)) from None
            payload[FIRST_TOKEN_DELAY_FIELD] = wire.get(FIRST_TOKEN_DELAY_FIELD)
        messages = payload.get("messages") or []
        prompt_text = payload.get("prompt") or payload.get("text") or ""
        if kind == "chat" and not isinstance(messages, list):
            raise BadRequest("messages must be a list")
        asked = payload.get("max_tokens") or payload.get("max_completion_tokens") \
            or (payload.get("sampling_params") or {}).get("max_new_tokens")
        max_tokens = asked or self.config.max_tokens_default
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise BadRequest(f"max_tokens must be a positive integer, got {max_tokens!r}")
        if self.config.role == "prefill":
            max_tokens = 1  # a PD prefill worker only computes the first token; decode streams the rest
        stream = bool(payload.get("stream"))
        # Not the engines': a field only this sim reads, to play a long prefill for this one request
        # (repro audit's idle-stream probe); its answer says it was applied (FIRST_TOKEN_DELAY_HEADER).
        delay = payload.get(FIRST_TOKEN_DELAY_FIELD) or 0
        if not isinstance(delay, int | float) or isinstance(delay, bool) or not 0 <= delay <= MAX_FIRST_TOKEN_DELAY:
            raise BadRequest(f"{FIRST_TOKEN_DELAY_FIELD} must be seconds from 0 to {MAX_FIRST_TOKEN_DELAY}, got {delay!r}")
        include_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        # Prompt tokens: a cheap approximation, 1 token per 4 characters of message content and of
        # the tool calls an agent's history carries (their content is null: nothing, not "None").
        chars = sum(len(str(m.get("content") or "")) + (_calls_chars(m["tool_calls"]) if m.get("tool_calls") else 0)
                    for m in messages if isinstance(m, dict)) + len(str(prompt_text))
        prompt_tokens = max(1, chars // 4)
        limit = self.config.context_length
        if limit is not None:
            refusal = context_refusal(self.config.dialect, limit, prompt_tokens, max_tokens, asked is not None)
            if refusal is not None:
                raise BadRequest(refusal.message, refusal.param)
            max_tokens = clamped_max_tokens(self.config.dialect, limit, prompt_tokens, max_tokens)
        last = str(messages[-1].get("content") or "") if messages and isinstance(messages[-1], dict) else str(prompt_text)
        seed = zlib.crc32(last.encode())
        rid = f"{RID_PREFIX[kind]}{next(_ids)}"
        plan = None
        if kind in ("chat", "messages", "responses") and payload.get("tools"):
            if "no-tool-parser" in self.config.active_quirks and (payload.get("tool_choice") or "auto") == "auto":
                raise BadRequest('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')
            try:
                plan = plan_tool_calls(payload, messages, seed, max_tokens, self.config.tool_call_share,
                                       self.config.dialect, rid, self._script)
            except ToolRequestError as exc:
                raise BadRequest(str(exc)) from None
            if plan is not None:
                max_tokens = len(plan.tokens)  # the model stops when its calls are complete

        engine = self.engine
        engine.note_request()
        if engine.fault_active("crash"):
            self.on_crash()
            return
        for load_fault in ("rate-limit", "overloaded"):  # turned away before admission, in the API's envelope
            if engine.fault_active(load_fault):
                away = turned_away(load_fault, engine.fault.value, self.config.dialect, kind)
                await _respond(send, away.status, _encode(away.body), JSON + list(away.headers))
                return
        lost = engine.fault_active("lose") or (self.config.role == "decode" and engine.fault_active("no-transfer"))
        if lost and (not await self._swallow(receive, engine.park()) or engine.closed):
            return  # the client left, or shutdown: the connection just closes
        request = Request(rid, prompt_tokens, max_tokens, seed, engine.clock(), streaming=stream,
                          first_token_delay=float(delay), stop_after=self.config.reply_tokens if plan is None else 0)
        engine.submit(request)
        watcher = asyncio.get_running_loop().create_task(self._watch_disconnect(receive, request))
        try:
            if stream:
                await self._stream(send, request, self._shape(request, kind, include_usage), plan)
            else:
                await self._complete(send, request, kind, plan)
        finally:
            watcher.cancel()
        if kind == "responses" and request.finished:
            self._keep_response(request, messages, plan)

    def _earlier(self, payload: dict) -> list[dict] | None:
        """The conversation a Responses request's previous_response_id continues."""
        previous = payload.get("previous_response_id")
        if previous is None:
            return None
        if previous not in self._responses:
            raise BadRequest(f"Response with id '{previous}' not found.", "previous_response_id")
        return self._responses[previous]

    def _keep_response(self, request: Request, messages: list, plan: ToolPlan | None) -> None:
        """Store what a finished response ends, as the server's in-memory store does (bounded)."""
        answer = ({"role": "assistant", "content": None, "tool_calls": message_tool_calls(plan)} if plan is not None
                  else {"role": "assistant", "content": text_of(request, request.produced)})
        self._responses[request.rid] = [*messages, answer]
        if len(self._responses) > RESPONSES_KEPT:
            del self._responses[next(iter(self._responses))]

    async def _watch_disconnect(self, receive, request: Request) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.engine.abort(request)
                return

    async def _swallow(self, receive, released: asyncio.Event) -> bool:
        """Accept and never answer, until the client leaves (False) or the fault is released (True)."""
        async def client_gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        gone = asyncio.ensure_future(client_gone())
        freed = asyncio.ensure_future(released.wait())
        try:
            await asyncio.wait((gone, freed), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            freed.cancel()
        return released.is_set() and not gone.done()

    def _shape(self, request: Request, kind: str, include_usage: bool) -> StreamShape:
        model = self.config.model
        if kind == "messages":
            return MessagesShape(request, model)
        if kind == "responses":
            return ResponsesShape(request, model)
        if kind == "generate":
            return GenerateShape()
        return ChatShape(request, model, kind, self.config.dialect, include_usage)

    async def _stream(self, send, request: Request, shape: StreamShape, plan: ToolPlan | None = None) -> None:
        """The one streaming loop of every API: each wake of the request sends the tokens the engine
        produced since the last, in the API's shape; the end goes out with the last tokens."""
        delayed = [(FIRST_TOKEN_DELAY_HEADER, f"{request.first_token_delay:g}".encode())] if request.first_token_delay else []
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS + delayed})
        if shape.opening:
            await send({"type": "http.response.body", "body": shape.opening, "more_body": True})
        sent = 0
        while True:
            await request.wake.wait()
            request.wake.clear()
            if request.aborted:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            parts = []
            while plan is not None and sent < request.produced:
                parts.append(shape.tool(plan, sent))
                sent += 1
            while sent < request.produced:
                parts.append(shape.word(request, sent))
                sent += 1
            if request.finished:
                self._note_answer(request, plan)
                parts.append(shape.closing(request, plan))
                await send({"type": "http.response.body", "body": b"".join(parts), "more_body": False})
                return
            if parts:
                await send({"type": "http.response.body", "body": b"".join(parts), "more_body": True})

    async def _complete(self, send, request: Request, kind: str, plan: ToolPlan | None = None) -> None:
        await _finished(request)
        if request.aborted:
            await _respond(send, 503, b"aborted\n")
            return
        self._note_answer(request, plan)
        if kind == "generate":
            await _json(send, 200, generate_body(request, request.produced, True))
            return
        if kind == "messages":
            await _json(send, 200, messages_body(request, self.config.model, plan))
            return
        if kind == "responses":
            await _json(send, 200, responses_body(request, self.config.model, plan))
            return
        text = text_of(request, request.produced)
        choice = ({"index": 0, "message": {"role": "assistant", "content": None,
                                           "tool_calls": message_tool_calls(plan)}, "finish_reason": plan.finish_reason}
                  if plan is not None else
                  {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": request.finish_reason}
                  if kind == "chat" else
                  {"index": 0, "text": text, "logprobs": None, "finish_reason": request.finish_reason})
        await _json(send, 200, {
            "id": request.rid, "object": "chat.completion" if kind == "chat" else "text_completion",
            "created": int(time.time()), "model": self.config.model, "choices": [choice], "usage": usage(request)})

    def _note_answer(self, request: Request, plan: ToolPlan | None) -> None:
        if plan is None and request.produced:
            self.answers.append(text_of(request, request.produced).strip())

    async def _health_generate(self, send) -> None:
        """SGLang's /health_generate runs a one-token generation; a lost or hung engine fails it."""
        engine = self.engine
        if engine.fault_active("lose"):  # the front end that loses requests loses this one too
            await asyncio.sleep(self.config.health_generate_timeout)
            await _respond(send, 503, b"")
            return
        request = Request(f"health-{next(_ids)}", 1, 1, 0, engine.clock())
        engine.submit(request)
        try:
            async with asyncio.timeout(self.config.health_generate_timeout):
                await _finished(request)  # a hung engine never finishes it
        except TimeoutError:
            engine.abort(request)
        await _respond(send, 200 if request.finished else 503, b"")

    # --- worker info and admin --------------------------------------------------------------

    def _worker_info(self, path: str) -> Any:
        engine = self.engine
        config = self.config
        mode = "null" if config.role == "unified" else config.role
        if path in ("/v1/loads", "/get_load"):
            running, queued = engine.live_counts()
            if path == "/get_load":
                return [{"dp_rank": 0, "num_reqs": running + queued, "num_waiting_reqs": queued,
                         "num_tokens": running * 64}]
            # GetLoadsReqOutput in srt/managers/io_struct.py, one entry per DP rank.
            capacity = 64 * config.max_running
            return {"timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
                    "version": self._version(), "accelerator": None, "num_accelerators": 1,
                    "loads": [{"dp_rank": 0, "timestamp": time.time(), "num_running_reqs": running,
                               "num_waiting_reqs": queued, "num_used_tokens": running * 64,
                               "num_total_tokens": (running + queued) * 64, "max_total_num_tokens": capacity,
                               "token_usage": min(1.0, running / max(1, config.max_running)), "gen_throughput": 0.0,
                               "cache_hit_rate": 0.0, "utilization": 0.0, "max_running_requests": config.max_running,
                               "disaggregation": {"mode": mode, "prefill_prealloc_queue_reqs": 0,
                                                  "prefill_inflight_queue_reqs": 0, "decode_prealloc_queue_reqs": 0,
                                                  "decode_transfer_queue_reqs": len(engine.parked),
                                                  "decode_retracted_queue_reqs": 0, "kv_transfer_speed_gb_s": 0.0,
                                                  "kv_transfer_latency_ms": 0.0},
                               "queues": {"waiting": queued, "grammar": 0, "paused": 0, "retracted": 0}}]}
        if path in ("/model_info", "/get_model_info"):
            return {"model_path": self._tokenizer, "tokenizer_path": self._tokenizer, "is_generation": True,
                    "preferred_sampling_params": None, "weight_version": "default",
                    "served_model_name": config.model, "disaggregation_mode": mode}
        # SGLang's /server_info is every server argument (api keys included, in clear: a reader must
        # redact them), launch_command, scheduler info, internal_states and the version.
        args = {"model_path": self._tokenizer, "tokenizer_path": self._tokenizer,
                "served_model_name": config.model, "tp_size": 1, "dp_size": 1,
                "disaggregation_mode": mode, "max_running_requests": config.max_running,
                "cuda_graph_max_bs": config.cuda_graph_max_bs, "disable_cuda_graph": False,
                "api_key": config.api_key}
        flags = [f"--{key.replace('_', '-')} {value}" for key, value in args.items()
                 if value is not None and key not in ("tokenizer_path", "disable_cuda_graph", "api_key")]
        # A boolean flag right before the key, as real launch commands have (--enable-metrics):
        # a reader that takes the next token as any flag's value would miss the key behind it.
        flags.append("--enable-metrics")
        if config.api_key is not None:
            flags.append(f"--api-key {config.api_key}")
        return {**args, "launch_command": "python -m sglang.launch_server " + " ".join(flags),
                # Not SGLang's: how this sim's decode step grows with the batch (engine.decode_step_seconds).
                "repro_sim": {"itl": config.itl, "itl_per_request": config.itl_per_request,
                              "wave_size": config.wave_size, "wave_step": config.wave_step,
                              "no_graph_slowdown": config.no_graph_slowdown},
                # SGLang's scheduler info: max_req_input_len = min(context - 1, KV cache tokens - 1) - 5
                # (scheduler.py); this sim's KV cache holds any context. context_length: the server
                # argument, None unless given.
                "context_length": config.context_length, "max_req_input_len": self.context_tokens() - 6,
                "status": "ready", "max_total_num_tokens": 64 * config.max_running,
                "version": self._version(), "internal_states": [{"last_gen_throughput": 0.0}]}

    def _version(self) -> str:
        # A local version label: the sim speaks that release's names without claiming to be it.
        return f"{VERSION[self.config.dialect]}+repro.sim" if self.config.current_release else "0.0.0-repro-sim"

    async def _admin_fault(self, receive, send, method: str) -> None:
        from repro.core.faultspec import FaultSpecError

        spec = None
        if method == "POST":
            try:
                spec = (_decoder.decode(await _read_body(receive)) or {}).get("spec")
            except (msgspec.DecodeError, AttributeError):
                raise BadRequest('body must be JSON like {"spec": "hang,after=3"}') from None
        try:
            self.engine.arm(spec)
        except FaultSpecError as exc:
            raise BadRequest(str(exc)) from None
        await _json(send, 200, self.engine.state())


async def _finished(request: Request) -> None:
    """Wait until the scheduler finishes or aborts the request."""
    while not request.finished and not request.aborted:
        await request.wake.wait()
        request.wake.clear()


KINDS = {"/v1/chat/completions": "chat", "/v1/completions": "text", "/generate": "generate",
         "/v1/messages": "messages", "/v1/responses": "responses"}
RID_PREFIX = {"chat": "chatcmpl-sim", "text": "cmpl-sim", "generate": "sim", "messages": "msg_sim",
              "responses": "resp_sim"}


def _calls_chars(calls) -> int:
    if not isinstance(calls, list):
        return 0
    return sum(len(str(f.get("name") or "")) + len(str(f.get("arguments") or ""))
               for c in calls if isinstance(c, dict) and isinstance(f := c.get("function"), dict))


async def _read_body(receive) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise BadRequest(f"request body over {MAX_BODY} bytes")
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    return b"".join(chunks)


async def _respond(send, status: int, body: bytes, headers: list | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": (headers or [(b"content-type", b"text/plain")]) + [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _json(send, status: int, obj: Any) -> None:
    await _respond(send, status, _encode(obj), JSON)
