"""The simulated engine's HTTP front end: a raw ASGI app (no framework: it is small and hot).

Speaks what SGLang and vLLM speak: OpenAI chat completions (streamed SSE ending in [DONE], or one
JSON body), /v1/models, /health, /health_generate, /metrics, and the SGLang worker endpoints the
sglang-router calls. /sim/fault and /sim/state let tests arm faults at runtime and see the truth.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from repro.sim.config import SimConfig
from repro.sim.engine import Engine, Request
from repro.sim.metrics import metrics_page, registry_for
from repro.sim.tokenizer import tokenizer_dir
from repro.sim.vocabulary import WORDS

MAX_BODY = 16 * 1024 * 1024
JSON = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
_ids = itertools.count(1)
_decoder = msgspec.json.Decoder()
_encode = msgspec.json.encode


class BadRequest(Exception):
    pass


class SimApp:
    def __init__(self, config: SimConfig) -> None:
        self.config = config.validate()
        self.engine: Engine | None = None
        self.on_crash: Callable[[], None] = lambda: None  # the server runner installs the real one
        self._engine_task: asyncio.Task | None = None
        self._registry = None
        self._tokenizer = str(tokenizer_dir())
        self.started = time.time()

    # --- ASGI --------------------------------------------------------------------------------

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable[dict]], send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        engine = self.engine
        try:
            if path in ("/v1/chat/completions", "/v1/completions", "/generate") and method == "POST":
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
                await _json(send, 200, {"object": "list", "data": [{
                    "id": self.config.model, "object": "model", "created": int(self.started),
                    "owned_by": self.config.dialect, "root": self.config.model, "max_model_len": 32768}]})
            elif path in ("/server_info", "/get_server_info", "/model_info", "/get_model_info", "/get_load") \
                    and self.config.dialect == "sglang":
                await _json(send, 200, self._worker_info(path))
            elif path == "/flush_cache":
                await _respond(send, 200, b"Cache flushed.\n")
            elif path == "/sim/state":
                await _json(send, 200, engine.state())
            elif path == "/sim/fault" and method in ("POST", "DELETE"):
                await self._admin_fault(receive, send, method)
            else:
                await _json(send, 404, {"object": "error", "message": f"no route {method} {path}", "code": 404})
        except BadRequest as exc:
            await _json(send, 400, {"object": "error", "message": str(exc), "type": "BadRequestError", "code": 400})

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.engine = Engine(self.config)
                self._registry = registry_for(self.engine)
                self._engine_task = asyncio.get_running_loop().create_task(self.engine.run())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

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
        messages = payload.get("messages") or []
        prompt_text = payload.get("prompt") or payload.get("text") or ""
        if path == "/v1/chat/completions" and not isinstance(messages, list):
            raise BadRequest("messages must be a list")
        max_tokens = payload.get("max_tokens") or payload.get("max_completion_tokens") \
            or (payload.get("sampling_params") or {}).get("max_new_tokens") or self.config.max_tokens_default
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise BadRequest(f"max_tokens must be a positive integer, got {max_tokens!r}")
        if self.config.role == "prefill":
            max_tokens = 1  # a PD prefill worker only computes the first token; decode streams the rest
        stream = bool(payload.get("stream"))
        include_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        # Prompt tokens: a cheap approximation, 1 token per 4 characters of message content.
        chars = sum(len(str(m.get("content", ""))) for m in messages if isinstance(m, dict)) + len(str(prompt_text))
        last = str(messages[-1].get("content", "")) if messages and isinstance(messages[-1], dict) else str(prompt_text)

        engine = self.engine
        engine.note_request()
        if engine.fault_active("crash"):
            self.on_crash()
            return
        lost = engine.fault_active("lose") or (self.config.role == "decode" and engine.fault_active("no-transfer"))
        if lost and (not await self._swallow(receive, engine.park()) or engine.closed):
            return  # the client left, or shutdown: the connection just closes
        request = Request(f"chatcmpl-sim{next(_ids)}", max(1, chars // 4), max_tokens,
                          zlib.crc32(last.encode()), engine.clock())
        engine.submit(request)
        watcher = asyncio.get_running_loop().create_task(self._watch_disconnect(receive, request))
        try:
            if stream:
                await self._stream(send, request, include_usage)
            else:
                await self._complete(send, request)
        finally:
            watcher.cancel()

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

    async def _stream(self, send, request: Request, include_usage: bool) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        head = (b'data: {"id":"' + request.rid.encode() + b'","object":"chat.completion.chunk","created":'
                + str(int(time.time())).encode() + b',"model":"' + self.config.model.encode()
                + b'","choices":[{"index":0,"delta":{')
        sent = 0
        while True:
            await request.wake.wait()
            request.wake.clear()
            if request.aborted:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            parts = []
            while sent < request.produced:
                word = WORDS[(request.seed + sent * 7) % len(WORDS)]
                role = b'"role":"assistant",' if sent == 0 else b""
                parts.append(head + role + b'"content":"' + word.encode() + b' "},"finish_reason":null}]}\n\n')
                sent += 1
            if request.finished:
                parts.append(head + b'},"finish_reason":"' + (request.finish_reason or "stop").encode() + b'"}]}\n\n')
                if include_usage:
                    parts.append(b"data: " + _encode({
                        "id": request.rid, "object": "chat.completion.chunk", "model": self.config.model,
                        "choices": [], "usage": _usage(request)}) + b"\n\n")
                parts.append(b"data: [DONE]\n\n")
                await send({"type": "http.response.body", "body": b"".join(parts), "more_body": False})
                return
            if parts:
                await send({"type": "http.response.body", "body": b"".join(parts), "more_body": True})

    async def _complete(self, send, request: Request) -> None:
        await _finished(request)
        if request.aborted:
            await _respond(send, 503, b"aborted\n")
            return
        text = "".join(WORDS[(request.seed + i * 7) % len(WORDS)] + " " for i in range(request.produced))
        await _json(send, 200, {
            "id": request.rid, "object": "chat.completion", "created": int(time.time()), "model": self.config.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": request.finish_reason}],
            "usage": _usage(request)})

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
        if path == "/get_load":
            running, queued = engine.live_counts()
            return [{"dp_rank": 0, "num_reqs": running + queued, "num_waiting_reqs": queued,
                     "num_tokens": running * 64}]
        if path in ("/model_info", "/get_model_info"):
            return {"model_path": self._tokenizer, "tokenizer_path": self._tokenizer, "is_generation": True,
                    "preferred_sampling_params": None, "weight_version": "default"}
        return {"model_path": self._tokenizer, "tokenizer_path": self._tokenizer,
                "served_model_name": self.config.model, "tp_size": 1, "dp_size": 1,
                "disaggregation_mode": "null" if self.config.role == "unified" else self.config.role,
                "max_running_requests": self.config.max_running, "version": "0.0.0-repro-sim",
                "internal_states": [{"last_gen_throughput": 0.0}]}

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


def _usage(request: Request) -> dict:
    return {"prompt_tokens": request.prompt_tokens, "completion_tokens": request.produced,
            "total_tokens": request.prompt_tokens + request.produced}


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
