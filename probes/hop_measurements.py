"""`repro audit`'s measurements on one hop, each bounded in time and in requests.

- keep-alive idle timeout: one tiny request on a fresh connection, then the connection held
  idle until the hop closes it (EOF or reset), up to a limit.
- body limit: a binary search over padded `max_tokens=1` chat requests, each on a fresh
  connection: a 413, or the connection closed while the body was being sent, is a refusal.
- context length: `/v1/models`' `max_model_len` (vLLM, SGLang and the simulated engine list it),
  else SGLang's `/server_info`, else a bounded probe (prompts growing 4x until the engine's refusal
  states its context; at most CONTEXT_PROBE_MAX requests).
- race probe: pairs of requests on one kept-alive connection, a gap apart.
- cancel propagation: a stream closed after a few events, the gauges of every hop behind watched.
- idle-stream cut: a stream whose first token the simulated engine holds back.

Each request goes over a connection of probes.http1_connection, held by the measurement.
"""

from __future__ import annotations

import json
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import h11

from probes.http1_connection import Http1Connection, Reply
from probes.scrape import scrape
from repro.core.audit_measurements import (
    CHARS_PER_TOKEN,
    BodySeen,
    CancelRun,
    GaugeUnread,
    IdleStreamRun,
    KeepAliveSeen,
    Release,
    kib,
)
from repro.core.error_shapes import ErrorAnswer, Said, read_answer
from repro.core.hop import Hop, api_url, chat_url
from repro.core.snapshot import Snapshot
from repro.core.wire_api import Api


def models_url(hop_url: str) -> str:
    return chat_url(hop_url).removesuffix("/chat/completions") + "/models"


def shaped(api: Api, body: dict) -> bytes:
    """A chat-shaped measurement request (one user message) in the wire API's own shape: the
    Messages API takes chat's fields as they are (model, max_tokens, stream, string messages);
    the Responses API takes the message's text as `input`, `max_output_tokens`, `store: false`."""
    if api == "responses":
        rest = {key: value for key, value in body.items() if key not in ("messages", "max_tokens")}
        body = {**rest, "input": body["messages"][0]["content"], "max_output_tokens": body["max_tokens"],
                "store": False}
    return json.dumps(body).encode()


def chat_body(model: str, pad_bytes: int = 0, api: Api = "chat") -> bytes:
    """A `max_tokens=1` request in the API's shape (chat's by default), its user message padded so
    that the body is `pad_bytes` long (at least)."""
    base = {"model": model, "max_tokens": 1, "stream": False, "messages": [{"role": "user", "content": "hi"}]}
    plain = shaped(api, base)
    if pad_bytes <= len(plain):
        return plain
    base["messages"][0]["content"] = "hi " + "x" * (pad_bytes - len(plain) - 3)
    return shaped(api, base)


@dataclass(frozen=True)
class KeepAlive:
    timeout_s: float | None
    how: str
    requests: int
    server: str | None = None  # the Server header of the answer to GET /v1/models
    seen: KeepAliveSeen = KeepAliveSeen.NOT_MEASURED


async def measure_keepalive(hop_url: str, *, limit: float, headers: dict[str, str], timeout: float,
                            tls: ssl.SSLContext | None) -> KeepAlive:
    """GET /v1/models on a fresh connection, then hold it idle until the hop closes it (up to `limit`)."""
    url = models_url(hop_url)
    try:
        conn = await Http1Connection.open(url, timeout=timeout, tls=tls)
    except (OSError, TimeoutError) as exc:
        return KeepAlive(None, f"not measured: could not connect ({type(exc).__name__})", 0)
    try:
        reply = await conn.request("GET", url, headers=headers, timeout=conn.left(timeout))
        if reply.status is None:
            return KeepAlive(None, f"not measured: GET /v1/models got no answer ({reply.error})", 1)
        if conn.conn.our_state is not h11.DONE or conn.conn.their_state is not h11.DONE:
            return KeepAlive(None, f"not measured: the hop ended the connection after GET /v1/models "
                                   f"(http {reply.status})", 1, reply.server)
        seconds, how = await conn.idle_until_closed(limit)
        if seconds is None:
            return KeepAlive(None, f"GET /v1/models (http {reply.status}), then idle: still open at {limit:g} s", 1,
                             reply.server, KeepAliveSeen.STILL_OPEN)
        return KeepAlive(seconds, f"GET /v1/models (http {reply.status}), then idle until {how}", 1, reply.server,
                         KeepAliveSeen.CLOSED)
    finally:
        await conn.aclose()


async def one_post(url: str, body: bytes, *, headers: dict[str, str], timeout: float,
                   tls: ssl.SSLContext | None) -> Reply:
    try:
        conn = await Http1Connection.open(url, timeout=timeout, tls=tls)
    except (OSError, TimeoutError) as exc:
        return Reply(None, f"connect failed ({type(exc).__name__})")
    try:
        return await conn.request("POST", url, body, headers=headers, timeout=conn.left(timeout))
    finally:
        await conn.aclose()


def refused(reply: Reply) -> bool:
    """A body refused for its size: a 413, or no answer because the hop closed under the upload."""
    return reply.status == 413 or (reply.status is None and reply.closed)


@dataclass(frozen=True)
class BodyLimit:
    max_bytes: int | None  # the largest body accepted; None: the cap was accepted (or none was)
    how: str
    requests: int
    refuses_all: bool = False  # even the smallest chat request got a 413
    seen: BodySeen = BodySeen.NOT_MEASURED


def body_probe_count(cap: int, step: int) -> int:
    """At most this many requests for one hop's search: the cap, a bisection down to `step`, and the
    smallest request when no size was accepted."""
    count, lo, hi = 2, 0, cap
    while hi - lo > step:
        count, lo = count + 1, (lo + hi) // 2
    return count


async def measure_body_limit(hop_url: str, model: str, *, cap: int, step: int, headers: dict[str, str],
                             timeout: float, tls: ssl.SSLContext | None, api: Api = "chat") -> BodyLimit:
    """The largest padded `max_tokens=1` chat body the hop accepts, to within `step`, up to `cap`.
    Any answer but a 413 is accepted (an engine's 400 for a context too long read the whole body)."""
    url = api_url(hop_url, api)
    requests = 1
    first = await one_post(url, chat_body(model, cap, api), headers=headers, timeout=timeout, tls=tls)
    if not refused(first):
        if first.status is None:
            return BodyLimit(None, f"not measured: a {cap} B body got no answer ({first.error})", requests)
        return BodyLimit(None, f"a {kib(cap)} body was accepted (http {first.status})", requests,
                         seen=BodySeen.NO_LIMIT)
    # From 0, halving the cap: the sizes tried are round (a power-of-two limit such as nginx's 64k or
    # 1m is found exactly); one below the smallest chat body is sent as that body.
    lo, hi, last_refusal = 0, cap, describe(first)
    while hi - lo > step:
        mid = (lo + hi) // 2
        reply = await one_post(url, chat_body(model, mid, api), headers=headers, timeout=timeout, tls=tls)
        requests += 1
        if refused(reply):
            hi, last_refusal = mid, describe(reply)
        else:
            lo = mid
    if lo == 0:
        # No size accepted: a hop that refuses or resets every request has no body limit to speak of.
        smallest = chat_body(model, 0, api)
        reply = await one_post(url, smallest, headers=headers, timeout=timeout, tls=tls)
        requests += 1
        if reply.status == 413:
            return BodyLimit(None, f"refuses every body: even the smallest chat request ({len(smallest)} B) was "
                                   f"refused ({describe(reply)})", requests, refuses_all=True,
                             seen=BodySeen.REFUSES_ALL)
        if refused(reply) or reply.status is None:
            return BodyLimit(None, f"not measured: even a {len(smallest)} B request was refused ({describe(reply)})",
                             requests)
        lo = len(smallest)
    return BodyLimit(lo, f"bisection, {requests} max_tokens=1 requests: {lo} B accepted, {hi} B refused "
                         f"({last_refusal})", requests, seen=BodySeen.LIMIT)


def describe(reply: Reply) -> str:
    return f"http {reply.status}" if reply.status is not None else str(reply.error)


@dataclass(frozen=True)
class Context:
    tokens: int | None
    how: str
    requests: int = 1


async def get_json(url: str, *, headers: dict[str, str], timeout: float, tls: ssl.SSLContext | None
                   ) -> tuple[object, str]:
    """GET `url` on a fresh connection: its JSON, or None and why not."""
    try:
        conn = await Http1Connection.open(url, timeout=timeout, tls=tls)
    except (OSError, TimeoutError) as exc:
        return None, f"could not connect ({type(exc).__name__})"
    try:
        reply = await conn.request("GET", url, headers=headers, timeout=conn.left(timeout))
    finally:
        await conn.aclose()
    if reply.status != 200:
        return None, describe(reply)
    try:
        return json.loads(reply.body), ""
    except ValueError:
        return None, "not JSON"


def positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


# SGLang's scheduler: max_req_len = min(context - 1, KV cache tokens - 1), max_req_input_len = max_req_len - 5.
SGLANG_INPUT_MARGIN = 6
# The bounded probe's prompts, in tokens at CHARS_PER_TOKEN characters each, smallest first: the first
# one refused for its length says the context in the engine's own words (repro/core/error_shapes.py).
CONTEXT_PROBE_TOKENS = (8192, 32768, 131072, 524288)
CONTEXT_PROBE_MAX = 6  # requests, bisection included
# Common short words: one token each under the usual BPE tokenizers, 4 characters with their space,
# so a prompt's characters divided by 4 is about its tokens (a run of one letter would merge).
FILLER = "one two six ten red big old new top end "


def prompt_body(model: str, tokens: int, api: Api = "chat") -> bytes:
    text = (FILLER * (tokens * int(CHARS_PER_TOKEN) // len(FILLER) + 1))[: tokens * int(CHARS_PER_TOKEN)]
    return shaped(api, {"model": model, "max_tokens": 1, "stream": False,
                        "messages": [{"role": "user", "content": text}]})


async def measure_context(hop_url: str, model: str, *, headers: dict[str, str], timeout: float,
                          tls: ssl.SSLContext | None, api: Api = "chat") -> Context:
    """The engine's context: /v1/models' max_model_len, else SGLang's /server_info, else a bounded probe."""
    models, why = await get_json(models_url(hop_url), headers=headers, timeout=timeout, tls=tls)
    requests = 1
    if models is None:
        return Context(None, f"not read: GET /v1/models {why}", requests)
    try:
        value = positive_int((models.get("data") or [])[0].get("max_model_len"))  # type: ignore[union-attr]
    except (AttributeError, IndexError, TypeError):
        return Context(None, "not read: GET /v1/models listed no model", requests)
    if value is not None:
        return Context(value, "GET /v1/models max_model_len", requests)
    for path in ("/server_info", "/get_server_info"):  # SGLang; the older name before 0.4.x's rename
        info, _ = await get_json(origin(hop_url) + path, headers=headers, timeout=timeout, tls=tls)
        requests += 1
        if isinstance(info, dict):
            found = context_of_server_info(info, path)
            if found is not None:
                return Context(found[0], found[1], requests)
            break
    probed = await probe_context(hop_url, model, headers=headers, timeout=timeout, tls=tls, api=api)
    return Context(probed.tokens, probed.how, requests + probed.requests)


def context_of_server_info(info: dict, path: str) -> tuple[int, str] | None:
    """SGLang's /server_info: its context_length argument when given, else max_req_input_len (the
    context less SGLANG_INPUT_MARGIN, unless the KV cache is smaller: then the longest prompt it admits)."""
    given = positive_int(info.get("context_length"))
    if given is not None:
        return given, f"GET {path} context_length (/v1/models lists no max_model_len)"
    longest = positive_int(info.get("max_req_input_len"))
    if longest is None:
        return None
    cache = positive_int(info.get("max_total_num_tokens"))
    if cache is not None and longest == cache - SGLANG_INPUT_MARGIN:
        return longest, (f"GET {path} max_req_input_len: the longest prompt SGLang admits, bounded by its KV cache "
                         f"(max_total_num_tokens {cache})")
    return longest + SGLANG_INPUT_MARGIN, (f"GET {path} max_req_input_len {longest} + {SGLANG_INPUT_MARGIN} (SGLang "
                                           f"sets it to the context less {SGLANG_INPUT_MARGIN})")


async def probe_context(hop_url: str, model: str, *, headers: dict[str, str], timeout: float,
                        tls: ssl.SSLContext | None, api: Api = "chat") -> Context:
    """Prompts of CONTEXT_PROBE_TOKENS, smallest first, until one is refused for its length: the
    engine's refusal states its context; when it states no number, a bisection between the
    last prompt served and the first refused, CONTEXT_PROBE_MAX requests in all."""
    url = api_url(hop_url, api)
    requests, served, refused_at = 0, 0, None

    async def send(tokens: int) -> tuple[str, Said | None, Reply]:
        nonlocal requests
        requests += 1
        reply = await one_post(url, prompt_body(model, tokens, api), headers=headers, timeout=timeout, tls=tls)
        if reply.status == 200:
            return "served", None, reply
        said = read_answer(reply.status, ErrorAnswer(body=reply.body[:4096].decode("utf-8", "replace")))
        return ("context" if said.cause == "context" else "other"), said, reply

    for tokens in CONTEXT_PROBE_TOKENS:
        outcome, said, reply = await send(tokens)
        if outcome == "served":
            served = tokens
            continue
        if outcome == "other":
            return Context(None, f"not measured: a prompt of about {tokens} tokens got {describe(reply)}, not the "
                                 "engine's context refusal", requests)
        if said is not None and said.limit_tokens:
            return stated(said.limit_tokens, tokens, requests)
        refused_at = tokens
        break
    if refused_at is None:
        return Context(None, f"not found: a prompt of about {served} tokens ({kib(served * CHARS_PER_TOKEN)}) was "
                             f"served ({requests} requests)", requests)
    lo, hi = served, refused_at
    while requests < CONTEXT_PROBE_MAX:
        mid = (lo + hi) // 2
        outcome, said, reply = await send(mid)
        if outcome == "served":
            lo = mid
        elif outcome == "context":
            if said is not None and said.limit_tokens:
                return stated(said.limit_tokens, mid, requests)
            hi = mid
        else:
            break
    return Context(lo or None, f"bounded probe, {requests} max_tokens=1 requests: about {lo} tokens served, {hi} "
                               f"refused for its length (at {CHARS_PER_TOKEN:g} characters a token)", requests)


def stated(limit: int, tokens: int, requests: int) -> Context:
    return Context(limit, f"bounded probe, {requests} max_tokens=1 requests: a prompt of about {tokens} tokens was "
                          f"refused, the engine stating a context of {limit} tokens", requests)


@dataclass(frozen=True)
class Race:
    gap_s: float
    pairs: int
    failures: tuple[str, ...]
    requests: int


# The race window is where a request reaches the hop behind as its idle timer fires: on loopback a
# millisecond or less. The pairs' gaps are spread this far apart around the measured timeout.
RACE_SPREAD_S = 0.005


def race_gaps(gap_s: float, pairs: int) -> list[float]:
    """`pairs` gaps centred on `gap_s`, RACE_SPREAD_S apart (never below 0)."""
    return [max(0.0, gap_s + (i - (pairs - 1) / 2) * RACE_SPREAD_S) for i in range(pairs)]


async def race_probe(hop_url: str, model: str, *, gap_s: float, pairs: int, headers: dict[str, str],
                     timeout: float, tls: ssl.SSLContext | None, same_connection: bool, api: Api = "chat") -> Race:
    """`pairs` pairs of max_tokens=1 chat requests about `gap_s` apart (race_gaps), the pairs in
    parallel: the second request's failures (reset, EOF, 502/503/504). `same_connection`: the second
    request on the first one's connection (the client's pool reuses it); else on a fresh one, so that
    what is reused is the hop's own pooled connection to the hop behind it, not ours to the hop."""
    url = api_url(hop_url, api)
    body = chat_body(model, 0, api)
    failures: list[str] = []
    sent = 0

    async def pair(gap: float) -> None:
        nonlocal sent
        try:
            conn = await Http1Connection.open(url, timeout=timeout, tls=tls)
        except (OSError, TimeoutError) as exc:
            failures.append(f"connect failed ({type(exc).__name__})")
            return
        try:
            sent += 1
            first = await conn.request("POST", url, body, headers=headers, timeout=conn.left(timeout))
            if first.status is None or conn.conn.their_state is not h11.DONE:
                failures.append(f"first request: {describe(first)}")
                return
            await anyio.sleep(gap)
            sent += 1
            if same_connection:
                second = await conn.request("POST", url, body, headers=headers, timeout=timeout)
            else:
                second = await one_post(url, body, headers=headers, timeout=timeout, tls=tls)
            if second.status is None or second.status in (502, 503, 504):
                failures.append(describe(second))
        finally:
            await conn.aclose()

    async with anyio.create_task_group() as tg:
        for gap in race_gaps(gap_s, pairs):
            tg.start_soon(pair, gap)
    return Race(gap_s, pairs, tuple(failures), sent)


# --- cancel propagation -----------------------------------------------------------------------

SIGNALS = {"engine": "engine running", "router": "router active", "proxy": "proxy in-flight"}
SCRAPE_TIMEOUT_S = 2.0


GaugeRead = tuple[float | None, str, GaugeUnread | None]  # the value; or why not, in words and as a value


def gauge_of(hop: Hop, snapshot: Snapshot) -> GaugeRead:
    """The gauge that counts a hop's open requests (an engine's running batch, a router's or proxy's
    in-flight), and why not when it cannot be read."""
    if not snapshot.ok:
        return None, f"metrics not read: {snapshot.error}", GaugeUnread.READ_FAILED
    value = snapshot.running if hop.role == "engine" else snapshot.in_flight
    if value is None:
        return (None, f"its {snapshot.dialect} metrics page has no {SIGNALS.get(hop.role, 'in-flight')} gauge",
                GaugeUnread.NO_GAUGE)
    return value, "", None


class Gauges:
    """Reads the gauges of a few hops at once (bounded), counting the pages fetched."""

    def __init__(self, hops: list[Hop]) -> None:
        self.hops, self.pages = hops, 0

    async def read(self, names: set[str] | None = None) -> dict[str, GaugeRead]:
        found: dict[str, GaugeRead] = {}

        async def one(hop: Hop) -> None:
            if hop.metrics_url is None:
                found[hop.name] = (None, "no metrics page: give the hop metrics=URL", GaugeUnread.NO_METRICS_PAGE)
                return
            self.pages += 1
            found[hop.name] = gauge_of(hop, await scrape(hop, timeout=SCRAPE_TIMEOUT_S))

        async with anyio.create_task_group() as tg:
            for hop in self.hops:
                if names is None or hop.name in names:
                    tg.start_soon(one, hop)
        return found


def stream_body(model: str, max_tokens: int, api: Api = "chat", **extra) -> bytes:
    return shaped(api, {"model": model, "max_tokens": max_tokens, "stream": True,
                        "messages": [{"role": "user", "content": "Count slowly from one to a thousand."}], **extra})


@dataclass(frozen=True)
class CancelCost:
    run: CancelRun
    requests: int  # the streamed request and every metrics page read


async def measure_cancel(entry: Hop, watched: list[Hop], model: str, *, max_tokens: int, events: int,
                         deadline: float, poll: float, headers: dict[str, str], timeout: float,
                         tls: ssl.SSLContext | None, api: Api = "chat") -> CancelCost:
    """Start a streamed request at `entry`, read `events` SSE events, close the connection, and read
    the gauges of `watched` (`entry` and the hops behind it) until each is back at what it read just
    before the stream, or `deadline` seconds after the close."""
    gauges = Gauges(watched)
    baseline = await gauges.read()
    url = api_url(entry.url, api)
    try:
        conn = await Http1Connection.open(url, timeout=timeout, tls=tls)
    except (OSError, TimeoutError) as exc:
        return CancelCost(CancelRun(entry.name, 0, (), deadline, why=f"could not connect ({type(exc).__name__})"),
                          gauges.pages)
    try:
        streamed = await conn.open_stream(url, stream_body(model, max_tokens, api), headers=headers, events=events,
                                          timeout=conn.left(timeout))
        why = ""
        if streamed.status != 200:
            why = f"the stream was not served ({describe(Reply(streamed.status, streamed.error))})"
        elif streamed.ended:
            why = (f"the stream ended after {streamed.events} events, before it could be cancelled: give a larger "
                   "--cancel-max-tokens")
        elif streamed.error:
            why = f"the stream failed after {streamed.events} events ({streamed.error})"
        if why:
            return CancelCost(CancelRun(entry.name, streamed.events, (), deadline, why=why), gauges.pages + 1)
        during = await gauges.read()
    finally:
        await conn.aclose()  # the client goes away
    closed = time.monotonic()
    releases: dict[str, Release] = {}
    pending: dict[str, tuple[float, float]] = {}
    signal_of = {hop.name: SIGNALS.get(hop.role, "in-flight") for hop in watched}
    for hop in watched:
        signal = signal_of[hop.name]
        (before, why_before, unread_before), (now, why_now, unread_now) = baseline[hop.name], during[hop.name]
        if before is None or now is None:
            releases[hop.name] = Release(hop.name, signal, before, now, why=why_before or why_now,
                                         unread=unread_before or unread_now)
        elif now <= before:
            releases[hop.name] = Release(hop.name, signal, before, now,
                                         why=f"the gauge did not count the stream ({before:g} before, {now:g} "
                                             "while streaming)", unread=GaugeUnread.NOT_COUNTED)
        else:
            pending[hop.name] = (before, now)
    last: dict[str, tuple[float, float]] = {}
    while pending and time.monotonic() - closed < deadline:
        await anyio.sleep(min(poll, max(0.0, deadline - (time.monotonic() - closed))))
        read = await gauges.read(set(pending))
        at = time.monotonic() - closed
        for name, (value, _, _) in read.items():
            if value is None:
                continue  # a failed read proves nothing either way: read again
            last[name] = (value, at)
            before, now = pending[name]
            if value <= before:
                releases[name] = Release(name, signal_of[name], before, now, released_s=at, last=value, last_s=at)
                del pending[name]
    for name, (before, now) in pending.items():
        if name in last:
            value, at = last[name]
            releases[name] = Release(name, signal_of[name], before, now, last=value, last_s=at)
        else:
            releases[name] = Release(name, signal_of[name], before, now,
                                     why="its gauge could not be read after the close", unread=GaugeUnread.READ_FAILED)
    run = CancelRun(entry.name, streamed.events, tuple(releases[hop.name] for hop in watched), deadline)
    return CancelCost(run, gauges.pages + 1)


# --- idle streams -----------------------------------------------------------------------------

# A field and a header only repro's simulated engine knows (repro/sim/app.py): the first token of
# this one request comes `delay` seconds late, and the answer says the delay was applied.
FIRST_TOKEN_DELAY_FIELD = "repro_first_token_delay"
FIRST_TOKEN_DELAY_HEADER = "x-repro-first-token-delay"
IDLE_MARGIN_S = 5.0


async def is_simulated_engine(hop_url: str, *, headers: dict[str, str], timeout: float,
                              tls: ssl.SSLContext | None) -> bool:
    """repro's simulated engine answers GET /sim/state with its state; a real engine has no such route."""
    url = origin(hop_url) + "/sim/state"
    try:
        conn = await Http1Connection.open(url, timeout=timeout, tls=tls)
    except (OSError, TimeoutError):
        return False
    try:
        reply = await conn.request("GET", url, headers=headers, timeout=conn.left(timeout))
    finally:
        await conn.aclose()
    try:
        return reply.status == 200 and "quirks" in json.loads(reply.body)
    except (ValueError, TypeError):
        return False


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


async def measure_idle_stream(entry: Hop, model: str, *, delay: float, headers: dict[str, str], timeout: float,
                              tls: ssl.SSLContext | None, api: Api = "chat") -> IdleStreamRun:
    """A streamed request sent to `entry` whose first token the simulated engine holds back `delay`
    seconds: when it came, or when the hop cut the silent stream (an error status, or a close)."""
    url = api_url(entry.url, api)
    budget = delay + IDLE_MARGIN_S  # the connect included
    try:
        conn = await Http1Connection.open(url, timeout=min(timeout, budget), tls=tls)
    except (OSError, TimeoutError) as exc:
        return IdleStreamRun(entry.name, delay, why=f"could not connect ({type(exc).__name__})")
    try:
        streamed = await conn.open_stream(url, stream_body(model, 1, api, **{FIRST_TOKEN_DELAY_FIELD: delay}),
                                          headers=headers, events=1, timeout=conn.left(budget))
    finally:
        await conn.aclose()
    if streamed.status is not None and streamed.status != 200:
        return IdleStreamRun(entry.name, delay, cut_s=streamed.seconds, how=f"http {streamed.status}")
    if streamed.events:
        if FIRST_TOKEN_DELAY_HEADER not in streamed.headers:
            return IdleStreamRun(entry.name, delay, why="the engine did not hold the first token back (the "
                                                        f"{FIRST_TOKEN_DELAY_FIELD} field did not reach it)")
        return IdleStreamRun(entry.name, delay, first_token_s=streamed.first_event_s, how="first event")
    if streamed.timed_out:
        return IdleStreamRun(entry.name, delay, why=f"no event and no close within {delay + IDLE_MARGIN_S:g} s")
    said = f"after http {streamed.status} headers" if streamed.status else "before any answer"
    return IdleStreamRun(entry.name, delay, cut_s=streamed.seconds,
                         how=f"closed ({streamed.error or 'ended'}) {said}, no event")
