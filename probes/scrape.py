"""Fetch one hop's metrics page with a deadline on the whole exchange, and normalize it.

Never raises on network trouble: a refused port, a server that never answers, a page that
never ends or is 10 MB of noise all become a Snapshot with ok=False and an error saying which.
"""

from __future__ import annotations

import errno
import ssl
import time

import anyio
import httpx

from probes.exposition import MAX_PAGE_BYTES, parse_metrics
from repro.core.hop import Hop
from repro.core.snapshot import Snapshot, failed
from repro.io.tls import client_context, rejection

# Plain text format: every exporter serves it, and it is what the line filter expects.
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
PARSE_IN_THREAD_BYTES = 256 * 1024  # big pages are parsed off the event loop the driver shares


def shared_tls() -> ssl.SSLContext:
    """One TLS context for every probe client, the process's trust (repro/io/tls.py: the system
    CAs, SSL_CERT_FILE, --ca-file, --insecure): httpx otherwise builds one per client and loads the
    CA store into it (measured here: 74 ms a client, 0.3 ms with this one), on the event loop, and
    every stall sends a wave of canaries, two clients each."""
    return client_context()


def new_client(*, pool: int = 16) -> httpx.AsyncClient:
    # trust_env=False: an HTTP(S)_PROXY from the environment would add a hop we are not measuring.
    return httpx.AsyncClient(
        trust_env=False, follow_redirects=False, headers={"accept": ACCEPT}, verify=shared_tls(),
        limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool, keepalive_expiry=4.0),
    )


async def scrape(hop: Hop, *, timeout: float = 2.0, client: httpx.AsyncClient | None = None) -> Snapshot:
    url = hop.metrics_url
    if not url:
        return failed("not read: this hop has no metrics page (metrics=none, or a proxy given none)", hop=hop.name)
    start = time.monotonic()
    own = client is None
    client = client or new_client(pool=1)
    body: bytes | None = None
    error: str | None = None
    try:
        with anyio.move_on_after(timeout) as scope:
            body, error = await _fetch(client, url, timeout)
        if scope.cancelled_caught:
            error = f"timeout: no complete metrics page in {timeout:g} s"
    finally:
        if own:
            with anyio.CancelScope(shield=True):
                await client.aclose()
    elapsed = time.monotonic() - start
    if error is not None:
        return failed(error, hop=hop.name, url=url, scrape_s=elapsed)
    text = body.decode("utf-8", errors="replace")
    if len(body) > PARSE_IN_THREAD_BYTES:
        snapshots = await anyio.to_thread.run_sync(lambda: parse_metrics(text, hop=hop.name, url=url))
    else:
        snapshots = parse_metrics(text, hop=hop.name, url=url)
    snapshot = merge(snapshots, hop=hop.name, url=url)
    snapshot.scrape_s = time.monotonic() - start
    return snapshot


async def _fetch(client: httpx.AsyncClient, url: str, timeout: float) -> tuple[bytes | None, str | None]:
    try:
        # Redirects are followed: LiteLLM answers /metrics with 307 -> /metrics/. The deadline above
        # bounds the whole chain.
        async with client.stream("GET", url, timeout=httpx.Timeout(timeout), follow_redirects=True) as response:
            if response.status_code != 200:
                hint = " (SGLang serves /metrics only with --enable-metrics)" if response.status_code == 404 else ""
                return None, f"http {response.status_code} from {url}{hint}"
            chunks, size = [], 0
            async for chunk in response.aiter_bytes():  # decoded bytes: a gzip bomb is capped too
                size += len(chunk)
                if size > MAX_PAGE_BYTES:
                    return None, f"metrics page over the {MAX_PAGE_BYTES >> 20} MB cap: not a metrics page?"
                chunks.append(chunk)
            return b"".join(chunks), None
    except httpx.ConnectTimeout:
        return None, f"connect: timeout after {timeout:g} s"
    except httpx.ConnectError as exc:
        tls = rejection(exc)
        return None, tls.text if tls is not None else f"connect: {connect_reason(exc)}"
    except httpx.TimeoutException:
        return None, f"timeout: no complete metrics page in {timeout:g} s"
    except httpx.HTTPError as exc:
        return None, f"read: {type(exc).__name__}: {connect_reason(exc)}"
    except Exception as exc:  # e.g. httpx.InvalidURL or a socket error httpx did not wrap: report, never raise
        return None, f"{type(exc).__name__}: {exc}"


def refused(exc: BaseException) -> bool:
    """The connection was refused (nothing listens at the address): anyio's happy-eyeballs hides
    the ConnectionRefusedError in the cause chain, or in an exception group. Read from the
    exception's class or its errno (aiohttp's ClientConnectorError carries the socket's), never
    from its message."""
    seen, stack = set(), [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError) or getattr(current, "errno", None) == errno.ECONNREFUSED:
            return True
        stack += [current.__cause__, current.__context__, *getattr(current, "exceptions", ())]
    return False


def connect_reason(exc: BaseException) -> str:
    """Why a connection failed, in words."""
    if refused(exc):
        return "connection refused"
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())[:200]


def merge(snapshots: list[Snapshot], *, hop: str, url: str) -> Snapshot:
    """One snapshot per hop. A page with several components (a /federate page) becomes one whose
    counts are summed and whose workers and backends are concatenated; the first readable one sets
    the dialect."""
    good = [s for s in snapshots if s.ok]
    if not good:
        snapshot = snapshots[0]
    elif len(good) == 1:
        snapshot = good[0]
    else:
        snapshot = Snapshot(hop=hop, url=url, ok=True, dialect=good[0].dialect, labels=good[0].labels)
        for field in ("running", "queued", "in_flight", "held", "gen_tokens_total", "prompt_tokens_total", "itl_count",
                      "itl_sum"):
            values = [getattr(s, field) for s in good if getattr(s, field) is not None]
            setattr(snapshot, field, sum(values) if values else None)
        kv = [s.kv_usage for s in good if s.kv_usage is not None]
        snapshot.kv_usage = max(kv) if kv else None
        snapshot.workers = [w for s in good for w in s.workers]
        snapshot.backends = [b for s in good for b in s.backends]
    snapshot.hop, snapshot.url = hop, url
    return snapshot
