"""One hop's metrics at one moment, whatever the engine or router calls them.

The payload of every probe sample (events.ProbeSample), read by the verdict (repro.core.classify):
hop, url, ok, error, dialect, running, queued, in_flight, held, gen_tokens_total, itl_count,
stale, workers, backends, scrape_s - plus a few extras that help a human reading the run log (the
raw series values used, the labels kept, rates filled in by the Sampler or the fleet source).
"""

from __future__ import annotations

from typing import Any, TypedDict

import msgspec


class Backend(TypedDict, total=False):
    """One upstream a proxy or gateway reports on (HAProxy server, Envoy cluster, Traefik service
    or server, Caddy upstream, NGINX Plus peer, LiteLLM deployment, EPP model-server pod).
    Every key is always written by probes/dialects.py; None where the component does not say."""

    name: str  # the component's own name for it: "backend/server", cluster, URL, pod
    kind: str  # server | backend | cluster | service | upstream | deployment | pod | endpoint
    in_flight: float | None  # requests the gateway has open to it now
    queued: float | None  # requests waiting for it at the gateway (or, for an EPP pod, in its engine queue)
    healthy: bool | None
    state: str | None  # the component's state word when it gives one (UP, DRAIN, draining, partial_outage, ...)
    labels: dict[str, str]  # identifying labels kept (proxy, service, upstream, api_base, pool, ...)


# What each dialect is. The role a page shows can differ from the role a hop was declared with:
# a "proxy" hop whose page reads as an engine is the engine's own /metrics passed through.
ROLE_OF_DIALECT: dict[str, str] = {
    "sglang": "engine", "vllm": "engine", "tgi": "engine", "llamacpp": "engine",
    "sglang-router": "router", "gie-epp": "router",
    "repro-proxy": "proxy", "haproxy": "proxy", "envoy": "proxy", "nginx": "proxy", "nginx-plus": "proxy",
    "caddy": "proxy", "traefik": "proxy", "litellm": "proxy",
}
ENGINE_DIALECTS: frozenset[str] = frozenset(d for d, role in ROLE_OF_DIALECT.items() if role == "engine")


class Snapshot(msgspec.Struct, kw_only=True):
    hop: str = ""
    url: str = ""
    ok: bool = False
    error: str | None = None
    # engines: sglang | vllm | tgi | llamacpp; routers: sglang-router | gie-epp; proxies and gateways:
    # repro-proxy | haproxy | envoy | nginx | nginx-plus | caddy | traefik | litellm; or unknown
    dialect: str = "unknown"
    running: float | None = None  # requests in the engine's batch
    queued: float | None = None  # requests waiting at the engine (incl. PD queues), or in a gateway's own queue
    in_flight: float | None = None  # requests a router/proxy/gateway (or SGLang's HTTP layer) holds open right now
    held: float | None = None  # flows our fault proxy deliberately holds
    gen_tokens_total: float | None = None  # counter; SGLang bumps it only when a request finishes
    prompt_tokens_total: float | None = None
    itl_count: float | None = None  # per-token progress counter (ITL histogram count, decode steps)
    itl_sum: float | None = None  # the ITL histogram's sum: with itl_count, the recent seconds per token
    kv_usage: float | None = None  # 0..1, max over series (a ratio does not add up)
    stale: list[str] = []  # gauge names judged not refreshed (see probes/staleness.py)
    workers: list[dict[str, Any]] = []  # router: {url, active, healthy, circuit, consecutive_failures}
    backends: list[Backend] = []  # proxy/gateway: one entry per upstream it reports on (see Backend)
    scrape_s: float = 0.0
    gen_tokens_per_s: float | None = None  # rates: filled from two samples by the Sampler / fleet
    itl_per_s: float | None = None
    series: dict[str, float] = {}  # raw series the numbers came from, combined per name
    labels: dict[str, str] = {}  # identity labels kept (model_name, engine_type, instance, ...)

    @property
    def role(self) -> str | None:
        """engine | router | proxy as the page shows it; None for an unknown page."""
        return ROLE_OF_DIALECT.get(self.dialect)

    @property
    def is_engine_page(self) -> bool:
        """A page read, and an engine's own: on a hop declared as a proxy, the engine's /metrics
        passed through (a proxy forwards every path), so its numbers are not the proxy's."""
        return self.ok and self.dialect in ENGINE_DIALECTS

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)


def failed(error: str, *, hop: str = "", url: str = "", dialect: str = "unknown", scrape_s: float = 0.0) -> Snapshot:
    return Snapshot(hop=hop, url=url, ok=False, error=error, dialect=dialect, scrape_s=scrape_s)
