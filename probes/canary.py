"""Fresh-connection canary: a tiny streamed generation on a brand-new connection, plus /health.

Why a new connection: a harness stuck on a reused keep-alive connection says nothing about the
hop itself; a fresh request that streams says the hop serves. Why not /health alone: an engine
can answer /health and never generate (sglang#33858), so both are recorded, separately.
Each wire API is canaried on its own path (`api`: chat, responses, messages), its stream read by
the API's reader, so "chat works through litellm, messages does not" is two outcomes.
Everything is bounded by `timeout`. How it failed is decided here, where it happened, as a
`CanaryOutcome.failure` kind (connect, timeout, http, stream, reset, tls: our client refused the
hop's certificate, `tls_reason` says why); the error text is for people. Every connection uses the
process's TLS trust (repro/io/tls.py); an https canary records whether it checked the certificate.
"""

from __future__ import annotations

import time

import anyio
import httpx

from probes.scrape import connect_reason, refused, shared_tls
from repro.core.canary_outcome import CANARY_HEADER, CanaryOutcome
from repro.core.error_shapes import error_answer, read_answer
from repro.core.hop import Hop, origin_of
from repro.core.kinds import CanaryFailure
from repro.core.sse import SSEDecoder
from repro.core.text import ERROR_BODY_LIMIT, without_secret
from repro.core.wire_api import WIRE_APIS, Api
from repro.io.tls import process_trust, rejection


def canary_url(hop: Hop, path: str) -> str:
    """hop.url may be an origin or an OpenAI base URL ending in /v1; path carries its own /v1."""
    base = hop.url.rstrip("/")
    if path.startswith("/v1/") and base.endswith("/v1"):
        base = base[:-3]
    return base + path


def _fresh_client(timeout: float) -> httpx.AsyncClient:
    # No pooling, no environment proxies: exactly one new TCP connection to this hop.
    return httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(timeout), verify=shared_tls(),
                             limits=httpx.Limits(max_connections=1, max_keepalive_connections=0))


async def run_canary(hop: Hop, *, model: str, timeout: float = 3.0, api_key: str | None = None,
                     api: Api = "chat") -> CanaryOutcome:
    outcome = CanaryOutcome(hop=hop.name, url=canary_url(hop, WIRE_APIS[api].path), api=api)
    if outcome.url.startswith("https:"):
        outcome.tls_verified = not process_trust().insecure
    health: dict[str, int | None] = {}
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_health, hop, min(timeout, 2.0), health)
        await _generate(outcome, model=model, timeout=timeout, api_key=api_key, api=api)
    outcome.health_status = health.get("status")
    return outcome


async def _generate(outcome: CanaryOutcome, *, model: str, timeout: float, api_key: str | None, api: Api) -> None:
    wire = WIRE_APIS[api]
    body = wire.canary_body(model)
    # The key is never logged: only timings and status are kept.
    # x-repro-canary: repro's fault proxy counts no canary toward a fault's after=N across
    # connections, so judging a stall never moves the round a user's --inject fault meets.
    headers = {"accept": "text/event-stream", CANARY_HEADER: "1", **wire.headers(api_key)}
    reader = wire.reader()
    decode = SSEDecoder().feed
    start = time.monotonic()
    marks: dict[str, float] = {}

    async def trace(name: str, info: dict) -> None:
        if name == "connection.connect_tcp.complete":
            marks["connect"] = time.monotonic() - start

    phase = "connect"
    try:
        async with _fresh_client(timeout) as client:
            with anyio.move_on_after(timeout) as scope:
                async with client.stream("POST", outcome.url, json=body, headers=headers,
                                         extensions={"trace": trace}) as response:
                    outcome.first_byte_s = time.monotonic() - start
                    outcome.status = response.status_code
                    if response.status_code != 200:
                        outcome.failure = "http"
                        head = await _head(response, ERROR_BODY_LIMIT)
                        excerpt = without_secret(" ".join(head[:200].decode("utf-8", "replace").split()), api_key)
                        outcome.error = f"http {response.status_code}" + (f": {excerpt}" if excerpt else "")
                        # Why it refused, as its body says (busy, rate, ...): read, never matched as prose.
                        said = read_answer(response.status_code, error_answer(head, response.headers, api_key))
                        outcome.cause, outcome.relayed, outcome.answer_role = said.cause, said.relayed, said.role
                        return
                    phase = "events"
                    async for chunk in response.aiter_raw():
                        _, done, failure = reader.feed(decode(chunk))
                        # Events that are progress, the stream's terminal one ([DONE], message_stop,
                        # response.completed) not counted; keep-alives (ping) never are.
                        outcome.events = reader.events - reader.done
                        if failure is not None:
                            outcome.failure, outcome.error = "stream", failure
                            return
                        if done:
                            break
                    outcome.done = True
            if scope.cancelled_caught:
                outcome.failure, outcome.error = _timed_out(phase, marks, outcome, timeout)
    except httpx.ConnectTimeout:
        outcome.failure, outcome.error = "connect", f"connect: timeout after {timeout:g} s"
    except httpx.ConnectError as exc:
        tls = rejection(exc)
        if tls is not None:  # our client refused the hop's certificate: no request was sent
            outcome.failure, outcome.tls_reason, outcome.error = "tls", tls.reason, tls.text
        else:
            outcome.failure, outcome.error = "connect", f"connect: {connect_reason(exc)}"
            outcome.refused = refused(exc)
    except httpx.TimeoutException as exc:
        outcome.failure, outcome.error = _timed_out(phase, marks, outcome, timeout)
        outcome.error += f" ({type(exc).__name__})"
    except httpx.HTTPError as exc:
        outcome.failure = "reset"
        outcome.error = f"read: {type(exc).__name__}: {connect_reason(exc)} after {outcome.events} events"
    except OSError as exc:
        outcome.failure, outcome.error = "connect", f"connect: {exc}"
        outcome.refused = refused(exc)
    except Exception as exc:  # e.g. httpx.InvalidURL: a canary reports, it never raises
        outcome.failure, outcome.error = "connect", f"canary: {type(exc).__name__}: {exc}"
    finally:
        outcome.connect_s = marks.get("connect")
        outcome.total_s = time.monotonic() - start
        # Served means a token and the end of the stream: a hop that sends one token and then only
        # keep-alive comments does not serve.
        outcome.ok = outcome.status == 200 and outcome.events > 0 and outcome.done
        if outcome.ok:
            outcome.error = outcome.failure = None
        elif outcome.error is None:
            outcome.error = "stream ended without a data event" if outcome.status == 200 else "no response"
        if not outcome.ok and outcome.failure is None:
            outcome.failure = "stream" if outcome.status == 200 else "reset"
        if outcome.error:
            outcome.error = without_secret(outcome.error, api_key)


def _timed_out(phase: str, marks: dict[str, float], outcome: CanaryOutcome,
               timeout: float) -> tuple[CanaryFailure, str]:
    if phase == "connect" and "connect" not in marks:
        return "connect", f"connect: no connection in {timeout:g} s"
    if outcome.first_byte_s is None:
        return "timeout", f"timeout: no first byte in {timeout:g} s"
    if outcome.events:
        # Events came (a Responses stream says response.created before any token), then nothing.
        return "timeout", (f"timeout: {outcome.events} SSE events, then no end of the stream in {timeout:g} s "
                           f"(status {outcome.status})")
    return "timeout", f"timeout: no SSE data event in {timeout:g} s (status {outcome.status})"


async def _head(response: httpx.Response, limit: int) -> bytes:
    """The first `limit` bytes of an error answer's body (decoded: error_shapes reads text)."""
    data = b""
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) >= limit:
            break
    return data[:limit]


async def _health(hop: Hop, timeout: float, out: dict[str, int | None]) -> None:
    """GET <origin>/health on its own fresh connection; the status, or nothing on any failure."""
    try:
        async with _fresh_client(timeout) as client:
            with anyio.move_on_after(timeout):
                response = await client.get(origin_of(hop.url) + "/health")
                out["status"] = response.status_code
    except Exception:  # any failure is simply "no health status"
        pass
