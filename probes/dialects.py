"""Dialect adapters: the series one serving component exposes -> the normalized Snapshot fields.

Pure code over plain data (no I/O, no clock): an adapter gets a `SeriesIndex` (sample name ->
{label set -> value}) and returns the fields it could fill. Names and quirks come from the
components' own sources (SGLang srt/metrics/collector.py, vLLM v1/metrics/loggers.py, the
sglang-router/smg Rust metrics module, TGI and llama.cpp server docs; for proxies and gateways
see each adapter); each adapter lists exactly the sample names it reads (`reads`), so the page
parser can drop everything else before parsing - a router page is mostly histogram buckets
nobody here needs, a gateway page mostly per-route and per-code counters.

Proxies and gateways fill in_flight (requests the hop holds open now), queued where the hop has
a queue of its own, and `backends` (one repro.core.snapshot.Backend per upstream they report on);
an adapter may also return ok=False with an error when the page itself says it knows nothing
(an exporter that cannot reach its nginx). Nothing is made up: what a page does not say stays None.

How several series of one metric become one number (`combine`), for every dialect:
- series that differ only in a *replica* label (tp_rank, pp_rank, moe_ep_rank, pid) describe the
  same requests seen by several ranks of one engine (SGLang TP ranks repeat the scheduler's
  value), so they are reduced with max;
- the remaining groups (dp_rank, vLLM `engine`, engine_type, model_name, ...) are different
  requests and are summed.
Before that, SGLang's queue gauges under priority scheduling keep only their total rows
(`priority_totals`): the per-priority rows beside them count the same requests again.
NaN and infinite values are dropped (a NaN gauge says nothing, and JSON cannot carry it).
Ratios (kv usage) are the max over every series instead: a ratio does not add up.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

Labels = tuple[tuple[str, str], ...]
SeriesIndex = dict[str, dict[Labels, float]]

REPLICA_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "pid"})
KEPT_LABELS = ("model_name", "name", "engine_type", "instance", "job")


def rows(index: SeriesIndex, name: str, **match: str) -> list[tuple[Labels, float]]:
    out = []
    for labels, value in index.get(name, {}).items():
        if not math.isfinite(value):
            continue
        if match and any(dict(labels).get(k) != v for k, v in match.items()):
            continue
        out.append((labels, value))
    return out


def combine(series: Iterable[tuple[Labels, float]]) -> float | None:
    """Max over replica labels, sum over everything else (see the module docstring)."""
    groups: dict[Labels, float] = {}
    for labels, value in series:
        key = tuple(item for item in labels if item[0] not in REPLICA_LABELS)
        groups[key] = max(groups.get(key, value), value)
    return sum(groups.values()) if groups else None


def priority_totals(series: Iterable[tuple[Labels, float]]) -> list[tuple[Labels, float]]:
    """With --enable-priority-scheduling SGLang writes each queue gauge (running, waiting, the PD
    queues) as a total under priority="" plus one row per priority (_log_gauge_queue_count in
    python/sglang/srt/observability/metrics_collector.py): keep the total rows when there are any.
    Only for those gauges: on the tokenizer's counters priority="" is the requests that had no
    priority, not a total (collect_metrics in python/sglang/srt/managers/tokenizer_manager.py)."""
    series = list(series)
    if any(dict(labels).get("priority") == "" for labels, _ in series):
        return [(labels, value) for labels, value in series if dict(labels).get("priority", "") == ""]
    return series


def ratio(series: Iterable[tuple[Labels, float]]) -> float | None:
    values = [value for _, value in series]
    return max(values) if values else None


def first(index: SeriesIndex, *names: str, **match: str) -> tuple[str | None, float | None]:
    """The first of several alternative names (current, then older) that has a value."""
    for name in names:
        value = combine(rows(index, name, **match))
        if value is not None:
            return name, value
    return None, None


def total(index: SeriesIndex, names: Iterable[str], used: dict[str, float]) -> float | None:
    """Sum of the combined values of the names present (None when none is)."""
    result = None
    for name in names:
        value = combine(rows(index, name))
        if value is not None:
            used[name] = value
            result = (result or 0.0) + value
    return result


def kept_labels(index: SeriesIndex, names: Iterable[str]) -> dict[str, str]:
    for name in names:
        for labels in index.get(name, {}):
            return {k: v for k, v in labels if k in KEPT_LABELS}
    return {}


class Dialect:
    name = "unknown"
    keys: tuple[str, ...] = ()  # any of these present on a page identifies the dialect
    reads: tuple[str, ...] = ()  # every sample name normalize() looks at

    def normalize(self, index: SeriesIndex) -> dict[str, Any]:
        raise NotImplementedError

    def _pick(self, index: SeriesIndex, used: dict[str, float], *names: str, **match: str) -> float | None:
        name, value = first(index, *names, **match)
        if name is not None:
            used[name if not match else f"{name}{{{','.join(f'{k}={v}' for k, v in match.items())}}}"] = value
        return value


class SGLang(Dialect):
    """SGLang: 0.5.23 names and labels (python/sglang/srt/observability/metrics_collector.py), the
    v0.4-0.5 ones before (num_prefill_prealloc_queue_reqs) and the first generation (v0.3.x:
    num_requests_*, label `name`).

    running/queued are scheduler gauges refreshed only on prefill or every 40 decode steps
    (staleness is judged over time by probes/staleness.py); the queue gauges keep their
    priority="" totals only. Progress: the inter-token-latency histogram count moves per streamed
    batch (never on a 0.5.23 PD prefill worker). gen_tokens_total is
    realtime_tokens_total{mode="decode"} where the engine has it: bumped on every decode step
    (report_decode_stats in srt/managers/scheduler_components/metrics_reporter.py), so it moves
    while streams run, whereas generation_tokens_total moves only when a request ends. It counts
    the tokens decode steps made, i.e. every generated token but each request's first (that one
    comes out of prefill); a prefill worker never decodes, so there it stays
    generation_tokens_total.
    """

    name = "sglang"
    RUNNING = ("sglang:num_running_reqs", "sglang:num_requests_running")
    QUEUED = ("sglang:num_queue_reqs", "sglang:num_requests_waiting")
    # PD disaggregation and grammar compilation: requests accepted but not yet in a batch. Each
    # entry lists one queue's names, current first: 0.5.23 renamed the prefill prealloc queue
    # (requests waiting on the prefill/decode handshake) to the bootstrap queue.
    EXTRA_QUEUES = (
        ("sglang:num_prefill_bootstrap_queue_reqs", "sglang:num_prefill_prealloc_queue_reqs"),
        ("sglang:num_prefill_inflight_queue_reqs",),
        ("sglang:num_decode_prealloc_queue_reqs",),
        ("sglang:num_decode_transfer_queue_reqs",),
        ("sglang:num_grammar_queue_reqs",),
    )
    ITL = ("sglang:inter_token_latency_seconds_count", "sglang:time_per_output_token_seconds_count")
    ITL_SUM = ("sglang:inter_token_latency_seconds_sum", "sglang:time_per_output_token_seconds_sum")
    REALTIME = "sglang:realtime_tokens_total"
    HTTP_ACTIVE = "sglang:http_requests_active"
    # The scrape itself (and other probes and routers' polls) show up in http_requests_active;
    # they are not user requests. 0.5.23 routes: srt/entrypoints/http_server.py, v1_loads.py.
    PROBE_ENDPOINTS = frozenset({"/metrics", "/health", "/health_generate", "/ready", "/get_load", "/v1/loads",
                                 "/get_server_info", "/server_info", "/get_model_info", "/model_info", "/v1/models",
                                 "/v1/models/{model:path}", "/ping"})
    keys = RUNNING + QUEUED + ITL
    reads = keys + ITL_SUM + tuple(name for names in EXTRA_QUEUES for name in names) + (
        "sglang:generation_tokens_total", "sglang:prompt_tokens_total", "sglang:token_usage",
        REALTIME, HTTP_ACTIVE, "sglang:gen_throughput",
    )

    def normalize(self, index: SeriesIndex) -> dict[str, Any]:
        used: dict[str, float] = {}

        def queue(*names: str) -> float | None:
            for name in names:
                value = combine(priority_totals(rows(index, name)))
                if value is not None:
                    used[name] = value
                    return value
            return None

        running = queue(*self.RUNNING)
        queued = queue(*self.QUEUED)
        for names in self.EXTRA_QUEUES:
            extra = queue(*names)
            if extra is not None:
                queued = (queued or 0.0) + extra
        active = [(labels, value) for labels, value in rows(index, self.HTTP_ACTIVE)
                  if dict(labels).get("endpoint") not in self.PROBE_ENDPOINTS]
        in_flight = None
        if self.HTTP_ACTIVE in index:  # newer SGLang only; 0 when only probe endpoints were active
            in_flight = used[self.HTTP_ACTIVE] = combine(active) or 0.0
        kv = ratio(rows(index, "sglang:token_usage"))
        labels = kept_labels(index, self.RUNNING + self.QUEUED + self.ITL)
        decode = self._pick(index, used, self.REALTIME, mode="decode")
        self._pick(index, used, self.REALTIME, mode="prefill_compute")
        self._pick(index, used, "sglang:gen_throughput")
        generated = self._pick(index, used, "sglang:generation_tokens_total")
        if rows(index, self.REALTIME) and labels.get("engine_type") != "prefill":
            # The counter's mode rows appear on their first increment: a page with realtime
            # tokens but no decode row has decoded nothing yet.
            generated = decode or 0.0
        return dict(
            running=running, queued=queued, in_flight=in_flight, gen_tokens_total=generated,
            prompt_tokens_total=self._pick(index, used, "sglang:prompt_tokens_total"),
            itl_count=self._pick(index, used, *self.ITL), itl_sum=self._pick(index, used, *self.ITL_SUM),
            kv_usage=kv, series=used, labels=labels,
        )


class VLLM(Dialect):
    """vLLM V1 (label `engine` per DP engine, summed) and V0 (swapped requests count as queued).

    Gauges are set every engine step and generation_tokens_total moves per step, but both keep
    their last value after an abort-all (vllm#22545, #29928): a canary tells that from a hang.
    """

    name = "vllm"
    ITL = ("vllm:inter_token_latency_seconds_count", "vllm:time_per_output_token_seconds_count")
    ITL_SUM = ("vllm:inter_token_latency_seconds_sum", "vllm:time_per_output_token_seconds_sum")
    keys = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:generation_tokens_total")
    reads = keys + ITL + ITL_SUM + ("vllm:num_requests_swapped", "vllm:prompt_tokens_total", "vllm:kv_cache_usage_perc",
                          "vllm:gpu_cache_usage_perc")

    def normalize(self, index: SeriesIndex) -> dict[str, Any]:
        used: dict[str, float] = {}
        queued = total(index, ("vllm:num_requests_waiting", "vllm:num_requests_swapped"), used)
        kv = ratio(rows(index, "vllm:kv_cache_usage_perc")) or ratio(rows(index, "vllm:gpu_cache_usage_perc"))
        return dict(
            running=self._pick(index, used, "vllm:num_requests_running"), queued=queued,
            gen_tokens_total=self._pick(index, used, "vllm:generation_tokens_total"),
            prompt_tokens_total=self._pick(index, used, "vllm:prompt_tokens_total"),
            itl_count=self._pick(index, used, *self.ITL), itl_sum=self._pick(index, used, *self.ITL_SUM),
            kv_usage=kv, series=used, labels=kept_labels(index, self.keys),
        )


class TGI(Dialect):
    """Hugging Face TGI: decode forward passes are the per-token progress counter."""

    name = "tgi"
    DECODES = ("tgi_batch_inference_count", "tgi_batch_inference_count_total")
    keys = ("tgi_batch_current_size", "tgi_queue_size") + DECODES
    reads = keys + ("tgi_request_generated_tokens_sum", "tgi_request_input_length_sum")

    def normalize(self, index: SeriesIndex) -> dict[str, Any]:
        used: dict[str, float] = {}
        return dict(
            running=self._pick(index, used, "tgi_batch_current_size"),
            queued=self._pick(index, used, "tgi_queue_size"),
            itl_count=self._pick(index, used, *self.DECODES, method="decode"),
            gen_tokens_total=self._pick(index, used, "tgi_request_generated_tokens_sum"),
            prompt_tokens_total=self._pick(index, used, "tgi_request_input_length_sum"),
            series=used, labels={},
        )


class LlamaCpp(Dialect):
    """llama.cpp llama-server (--metrics): llama_decode calls are the progress counter."""

    name = "llamacpp"
    keys = ("llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:tokens_predicted_total")
    reads = keys + ("llamacpp:n_decode_total", "llamacpp:prompt_tokens_total", "llamacpp:kv_cache_usage_ratio")

    def normalize(self, index: SeriesIndex) -> dict[str, Any]:
        used: dict[str, float] = {}
        return dict(
            running=self._pick(index, used, "llamacpp:requests_processing"),
            queued=self._pick(index, used, "llamacpp:requests_deferred"),
            gen_tokens_total=self._pick(index, used, "llamacpp:tokens_predicted_total"),
            prompt_tokens_total=self._pick(index, used, "llamacpp:prompt_tokens_total"),
            itl_count=self._pick(index, used, "llamacpp:n_decode_total"),
            kv_usage=ratio(rows(index, "llamacpp:kv_cache_usage_ratio")), series=used, labels={},
        )


# smg_worker_cb_state: "0=closed, 1=open, 2=half_open", the HELP text in both sglang-router 0.3.2 and smg 1.13.
CIRCUIT_STATES = {0: "closed", 1: "open", 2: "half_open"}
# smg marks a removed worker's circuit and health gauges -1 until its exporter can drop series
# (remove_worker_metrics in model_gateway/src/observability/metrics.rs); 1.13 was seen dropping
# them a few seconds after the removal instead.
REMOVED = -1


class SGLangRouter(Dialect):
    """The SGLang model gateway: smg 1.13 (pip `smg`) and sglang-router 0.3.x, both `smg_*`, and
    the older `sgl_router_*`.

    One entry per worker; in_flight is the sum of the workers' active requests, which stays 1
    for the whole life of a stream (observed on 0.3.2 and smg 1.13). 0.3.2 emits
    smg_worker_requests_active only with cache_aware; with round_robin the router cannot tell, so
    in_flight stays None. A worker whose series say -1 has been removed from the router: no
    longer one of its workers, so it is left out. smg also re-exports what it last polled from
    each engine's load endpoint (smg_engine_*, every --load-monitor-interval): kept as raw series.
    """

    name = "sglang-router"
    ACTIVE = ("smg_worker_requests_active", "sgl_router_running_requests", "sgl_router_worker_load")
    HEALTH = ("smg_worker_health", "sgl_router_worker_health")
    REQUESTS = ("smg_router_requests_total", "sgl_router_requests_total")
    ENGINE = ("smg_engine_running_requests", "smg_engine_waiting_requests", "smg_engine_pd_prefill_queue_reqs",
              "smg_engine_pd_decode_queue_reqs")
    keys = ACTIVE + HEALTH + REQUESTS + ("smg_worker_pool_size", "sgl_router_active_workers")
    reads = keys + ("smg_worker_cb_state", "smg_worker_cb_consecutive_failures") + ENGINE

    def normalize(self, index: SeriesIndex) -> dict[str, Any]:
        used: dict[str, float] = {}
        workers: dict[str, dict[str, Any]] = {}
        removed = {dict(labels).get("worker") for name in (*self.HEALTH, "smg_worker_cb_state")
                   for labels, value in rows(index, name) if value == REMOVED}

        def per_worker(names: tuple[str, ...]) -> dict[str, float]:
            for name in names:
                values: dict[str, float] = {}
                for labels, value in rows(index, name):
                    url = dict(labels).get("worker")
                    if url is not None and url not in removed:
                        values[url] = values.get(url, 0.0) + value
                if values:
                    used[name] = sum(values.values())
                    return values
            return {}

        def entry(url: str) -> dict[str, Any]:
            return workers.setdefault(url, {"url": url, "active": None, "healthy": None, "circuit": None,
                                            "consecutive_failures": None})

        active = per_worker(self.ACTIVE)
        for url, value in active.items():
            entry(url)["active"] = value
        for url, value in per_worker(self.HEALTH).items():
            entry(url)["healthy"] = value >= 1
        for url, value in per_worker(("smg_worker_cb_state",)).items():
            entry(url)["circuit"] = CIRCUIT_STATES.get(int(value), f"{value:g}")
        for url, value in per_worker(("smg_worker_cb_consecutive_failures",)).items():
            entry(url)["consecutive_failures"] = value
        for name in self.ENGINE:
            per_worker((name,))
        if active:
            # The gauge appears per worker on its first request: a worker without one has none open.
            for worker in workers.values():
                if worker["active"] is None:
                    worker["active"] = 0.0
        self._pick(index, used, *self.REQUESTS)
        return dict(
            in_flight=sum(active.values()) if active else None,
            workers=[workers[url] for url in sorted(workers)], series=used, labels={},
        )


class ReproProxy(Dialect):
    """Our own fault proxy (proxies/): open flows are in flight, held flows are being withheld."""

    name = "repro-proxy"
    keys = ("repro_proxy_open_flows", "repro_proxy_held_flows")
    reads = keys + ("repro_proxy_requests_total", "repro_proxy_events_forwarded_total",
                    "repro_proxy_bytes_forwarded_total")

    def normalize(self, index: SeriesIndex) -> dict[str, Any]:
        used: dict[str, float] = {}
        for name in self.reads[2:]:
            self._pick(index, used, name)
        return dict(
            in_flight=self._pick(index, used, "repro_proxy_open_flows"),
            held=self._pick(index, used, "repro_proxy_held_flows"), series=used, labels={},
        )


# --- proxies and gateways -----------------------------------------------------------------------
# Names and labels checked against each project's source and docs (see each
# docstring). A gateway's own scrape shows up in some of its gauges; where the source says so (or
# it was measured), that one request is taken off, as SGLang's PROBE_ENDPOINTS are.


def backend(name: str, kind: str, *, in_flight: float | None = None, queued: float | None = None,
            healthy: bool | None = None, state: str | None = None, labels: Mapping[str, str] | None = None
            ) -> dict[str, Any]:
    """One Snapshot.backends entry (repro.core.snapshot.Backend): every key, always."""
    return {"name": name, "kind": kind, "in_flight": in_flight, "queued": queued, "healthy": healthy,
            "state": state, "labels": dict(labels or {})}


def per_label(index: SeriesIndex, name: str, *keys: str, **match: str) -> dict[tuple[str, ...], float]:
    """Finite values of one metric summed per value of `keys` (rows lacking one of them are skipped)."""
    out: dict[tuple[str, ...], float] = {}
    for labels, value in rows(index, name, **match):
        d = dict(labels)
        key = tuple(d.get(k) for k in keys)
        if None not in key:
            out[key] = out.get(key, 0.0) + value  # type: ignore[index]
    return out


def enum_state(index: SeriesIndex, name: str, *keys: str) -> dict[tuple[str, ...], str | float]:
    """A state gauge per `keys`: the `state` label whose value is 1 (HAProxy 2.4+ enums), or the
    bare value when the series has no `state` label (older exporters)."""
    out: dict[tuple[str, ...], str | float] = {}
    for labels, value in rows(index, name):
        d = dict(labels)
        key = tuple(d.get(k) for k in keys)
        if None in key:
            continue
        if "state" in d:
            if value == 1:
                out[key] = d["state"]  # type: ignore[index]
        else:
            out.setdefault(key, value)  # type: ignore[index]
    return out


def minus_own_request(value: float | None) -> float | None:
    """A gauge that counts the very request reading it (the scrape): the others, never below 0."""
    return None if value is None else max(0.0, value - 1.0)


class HAProxy(Dialect):
    """HAProxy's built-in exporter (PROMEX: `http-request use-service prometheus-exporter`; haproxy
    addons/promex, labels `proxy` and `server`). Checked against HAProxy 2.6's own page.

    in_flight is the sum of haproxy_backend_current_sessions: streams assigned to a backend, being
    forwarded or waiting in its queue. Not the frontend count: a frontend session is a client
    connection, so it also counts idle keep-alive connections and this scrape itself (both seen on
    2.6). queued is every backend queue (no server assigned yet) plus every server queue. One
    backends entry per server; per backend when the page has no server series (?scope=backend).
    """

    name = "haproxy"
    BE_SESSIONS, BE_QUEUE = "haproxy_backend_current_sessions", "haproxy_backend_current_queue"
    SRV_SESSIONS, SRV_QUEUE = "haproxy_server_current_sessions", "haproxy_server_current_queue"
    SRV_STATUS, BE_STATUS = "haproxy_server_status", "haproxy_backend_status"
    keys = (BE_SESSIONS, SRV_SESSIONS, BE_QUEUE, SRV_QUEUE, "haproxy_frontend_current_sessions",
            "haproxy_process_current_connections")
    # Responses per status class, counted where they left: the frontends count every answer, the
    # backends only those that came from a server. A 4xx counted by a frontend alone is HAProxy's own.
    RESPONSES = ("haproxy_frontend_http_responses_total", "haproxy_backend_http_responses_total")
    reads = keys + (SRV_STATUS, BE_STATUS, "haproxy_server_check_status", "haproxy_backend_active_servers") + RESPONSES

    def normalize(self, index: SeriesIndex) -> dict[str, Any]:
        used: dict[str, float] = {}
        for name in ("haproxy_frontend_current_sessions", "haproxy_process_current_connections",
                     "haproxy_backend_active_servers"):
            self._pick(index, used, name)  # context for a human, not a number the verdict reads
        for name in self.RESPONSES:
            for status_class in ("4xx", "5xx"):
                self._pick(index, used, name, code=status_class)  # who answered a failed round (core/failures.py)
        in_flight = self._pick(index, used, self.BE_SESSIONS)
        if in_flight is None:
            in_flight = self._pick(index, used, self.SRV_SESSIONS)
        else:
            self._pick(index, used, self.SRV_SESSIONS)
        queued = total(index, (self.BE_QUEUE, self.SRV_QUEUE), used)
        backends = []
        servers = per_label(index, self.SRV_SESSIONS, "proxy", "server")
        server_queue = per_label(index, self.SRV_QUEUE, "proxy", "server")
        status = enum_state(index, self.SRV_STATUS, "proxy", "server")
        check = enum_state(index, "haproxy_server_check_status", "proxy", "server")
        for key in sorted(set(servers) | set(server_queue) | set(status)):
            state = status.get(key)
            labels = {"proxy": key[0], "server": key[1]}
            if isinstance(check.get(key), str):
                labels["check"] = check[key]  # type: ignore[assignment]
            backends.append(backend(
                f"{key[0]}/{key[1]}", "server", in_flight=servers.get(key), queued=server_queue.get(key),
                healthy=self._up(state), state=state if isinstance(state, str) else None, labels=labels))
        if not backends:
            sessions, queue = per_label(index, self.BE_SESSIONS, "proxy"), per_label(index, self.BE_QUEUE, "proxy")
            be_status = enum_state(index, self.BE_STATUS, "proxy")
            for key in sorted(set(sessions) | set(queue)):
                state = be_status.get(key)
                backends.append(backend(
                    key[0], "backend", in_flight=sessions.get(key), queued=queue.get(key),
                    healthy=self._up(state), state=state if isinstance(state, str) else None, labels={"proxy": key[0]}))
        return dict(in_flight=in_flight, queued=queued, backends=backends, series=used, labels={})

    @staticmethod
    def _up(state: str | float | None) -> bool | None:
        # 2.4+: the state word (UP, DOWN, MAINT, DRAIN, NOLB); before: a number, 1 being UP.
        if state is None:
            return None
        return state == "UP" if isinstance(state, str) else state == 1


class Envoy(Dialect):
    """Envoy's /stats/prometheus (tag extraction: `cluster.<name>.X` -> envoy_cluster_X{envoy_cluster_name},
    `http.<prefix>.X` -> envoy_http_X{envoy_http_conn_manager_prefix}; cluster_stats.rst, stats.rst).
    Also what Envoy AI Gateway's data plane serves: its own gen_ai_* page has no in-flight gauge.

    in_flight is downstream_rq_active summed over HTTP connection managers, except the admin one
    (prefix "admin"): the admin listener serves this scrape. queued is upstream_rq_pending_active
    (requests waiting for a connection pool slot) over every cluster. One backends entry per cluster,
    healthy when membership_healthy > 0; xDS and other internal clusters are listed as they are.
    """

    name = "envoy"
    DOWNSTREAM = "envoy_http_downstream_rq_active"
    UPSTREAM = "envoy_cluster_upstream_rq_active"
    PENDING = "envoy_cluster_upstream_rq_pending_active"
    HEALTHY, MEMBERS = "envoy_cluster_membership_healthy", "envoy_cluster_membership_total"
    ADMIN_PREFIXES = frozenset({"admin"})
    keys = (DOWNSTREAM, UPSTREAM, PENDING)
    reads = keys + (HEALTHY, MEMBERS, "envoy_http_downstream_cx_active", "envoy_cluster_upstream_cx_active",
                    "envoy_cluster_upstream_rq_pending_overflow", "envoy_cluster_upstream_rq_timeout")

    def normalize(self, index: SeriesIndex) -> dict[str, Any]:
        used: dict[str, float] = {}
        for name in self.reads[3:]:
            self._pick(index, used, name)
        downstream = [(labels, value) for labels, value in rows(index, self.DOWNSTREAM)
                      if dict(labels).get("envoy_http_conn_manager_prefix") not in self.ADMIN_PREFIXES]
        in_flight = combine(downstream)
        if in_flight is not None:
            used[self.DOWNSTREAM] = in_flight
        queued = self._pick(index, used, self.PENDING)
        self._pick(index, used, self.UPSTREAM)
        active = per_label(index, self.UPSTREAM, "envoy_cluster_name")
        pending = per_label(index, self.PENDING, "envoy_cluster_name")
        healthy = per_label(index, self.HEALTHY, "envoy_cluster_name")
        members = per_label(index, self.MEMBERS, "envoy_cluster_name")
        backends = []
        for key in sorted(set(active) | set(pending) | set(healthy)):
            state = None
            if key in healthy and key in members:
                state = f"{healthy[key]:g}/{members[key]:g} healthy"
            backends.append(backend(key[0], "cluster", in_flight=active.get(key), queued=pending.get(key),
                                    healthy=None if key not in healthy else healthy[key] > 0, state=state,
                                    labels={"envoy_cluster_name": key[0]}))
        return dict(in_flight=in_flight, queued=queued, backends=backends, series=used, labels={})


def nginx_in_flight(reading: float | None, writing: float | None) -> float | None:
    """Requests nginx is serving now, from stub_status's Reading + Writing (also used for the plain
    stub_status page, probes/status_pages.py). Writing counts a request from the end of its header
    until it is finalized - waiting for an upstream and streaming its answer included - and Reading
    the requests whose header is still arriving; Active also holds idle keep-alive connections
    (Waiting), which are not requests. The status request itself is always in Writing (an idle
    nginx shows Writing: 1), whether read by us or by nginx-prometheus-exporter: taken off."""
    if writing is None:
        return None
    return max(0.0, (reading or 0.0) + writing - 1.0)


class Nginx(Dialect):
    """nginx-prometheus-exporter over stub_status (collector/nginx.go: nginx_up,
    nginx_connections_{accepted,active,handled,reading,waiting,writing}, nginx_http_requests_total; no
    labels). OSS nginx has no per-upstream numbers, so no backends. nginx_up 0 means the exporter
    could not read stub_status: reported as a failed read, not as zero requests."""

    name = "nginx"
    keys = ("nginx_connections_writing", "nginx_connections_active", "nginx_connections_reading", "nginx_up")
    reads = keys + ("nginx_connections_waiting", "nginx_connections_accepted", "nginx_connections_handled",
                    "nginx_http_requests_total")

    def normalize(self, index: SeriesIndex) -> dict[str, Any]:
        used: dict[str, float] = {}
        for name in self.reads:
            self._pick(index, used, name)
        if "nginx_connections_writing" not in used and "nginx_up" in used:
            # The exporter answered but got nothing from nginx: nginx_up 0 on a network error,
            # 1 with no counts on an HTTP or parse error (collector/nginx.go handleScrapeError).
            return dict(ok=False, error=f"nginx-prometheus-exporter has no stub_status counts this scrape "
                        f"(nginx_up {used['nginx_up']:g}): it cannot read nginx's stub_status - nginx down, "
                        "or a wrong --nginx.scrape-uri", series=used)
        in_flight = nginx_in_flight(used.get("nginx_connections_reading"), used.get("nginx_connections_writing"))
        return dict(in_flight=in_flight, series=used, labels={})


NGINX_PLUS_STATES = {1: "up", 2: "draining", 3: "down", 4: "unavail", 5: "checking", 6: "unhealthy"}


class NginxPlus(Dialect):
    """nginx-prometheus-exporter over the NGINX Plus API (collector/nginx_plus.go): in_flight is
    nginxplus_http_requests_current ("Current http requests"; whether it counts the exporter's own
    API call is not verified here, so nothing is taken off); one backends entry per upstream peer
    from nginxplus_upstream_server_active{upstream,server} and _state (1 up ... 6 unhealthy)."""

    name = "nginx-plus"
    ACTIVE, STATE = "nginxplus_upstream_server_active", "nginxplus_upstream_server_state"
    keys = ("nginxplus_http_requests_current", ACTIVE, STATE, "nginxplus_up", "nginxplus_connections_active")
    reads = keys + ("nginxplus_server_zone_processing", "nginxplus_connections_idle", "nginxplus_http_requests_total")

    def normalize(self, index: SeriesIndex) -> dict[str, Any]:
        used: dict[str, float] = {}
        for name in self.reads[1:]:
            if name != self.STATE:  # an enum: a sum of states means nothing
                self._pick(index, used, name)
        if used.get("nginxplus_up") == 0 and "nginxplus_http_requests_current" not in index:
            return dict(ok=False, error="nginx-prometheus-exporter reports nginxplus_up 0: it cannot read the "
                        "NGINX Plus API", series=used)
        active = per_label(index, self.ACTIVE, "upstream", "server")
        states = per_label(index, self.STATE, "upstream", "server")
        backends = []
        for key in sorted(set(active) | set(states)):
            state = states.get(key)
            backends.append(backend(key[1], "server", in_flight=active.get(key),
                                    healthy=None if state is None else state == 1,
                                    state=None if state is None else NGINX_PLUS_STATES.get(int(state), f"{state:g}"),
                                    labels={"upstream": key[0], "server": key[1]}))
        return dict(in_flight=self._pick(index, used, "nginxplus_http_requests_current"), backends=backends,
                    series=used, labels={})


class Caddy(Dialect):
    """Caddy with `metrics` on (modules/caddyhttp/metrics.go: caddy_http_requests_in_flight{server,
    handler[,host]}; reverseproxy/metrics.go: caddy_reverse_proxy_upstreams_healthy{upstream}).

    Caddy counts a request once per route level it passes (a `handle` block is a subroute whose
    inner route is counted again), so the series do not add up. in_flight is the reverse_proxy
    handler's series when there are any - the requests held open to an upstream; otherwise the
    largest handler per server (a lower bound). The `metrics` handler (a site serving /metrics
    itself) is this scrape and never counts. One backends entry per upstream, health only.
    """

    name = "caddy"
    IN_FLIGHT, HEALTHY = "caddy_http_requests_in_flight", "caddy_reverse_proxy_upstreams_healthy"
    keys = (IN_FLIGHT, HEALTHY)
    reads = keys + ("caddy_http_requests_total",)

    def normalize(self, index: SeriesIndex) -> dict[str, Any]:
        used: dict[str, float] = {}
        self._pick(index, used, "caddy_http_requests_total")
        series = [(dict(labels), value) for labels, value in rows(index, self.IN_FLIGHT)]
        proxied = [value for labels, value in series if labels.get("handler") == "reverse_proxy"]
        in_flight = None
        if proxied:
            in_flight = sum(proxied)
        elif series:
            largest: dict[tuple[str | None, str | None], float] = {}
            for labels, value in series:
                if labels.get("handler") != "metrics":
                    key = (labels.get("server"), labels.get("host"))
                    largest[key] = max(largest.get(key, value), value)
            in_flight = sum(largest.values())
        if in_flight is not None:
            used[self.IN_FLIGHT] = in_flight
        self._pick(index, used, self.HEALTHY)
        backends = [backend(key[0], "upstream", healthy=value >= 1, labels={"upstream": key[0]})
                    for key, value in sorted(per_label(index, self.HEALTHY, "upstream").items())]
        return dict(in_flight=in_flight, backends=backends, series=used, labels={})


class Traefik(Dialect):
    """Traefik v2 and v3 (pkg/metrics/prometheus.go; doc.traefik.io observability/metrics).

    v2's traefik_entrypoint_open_connections{method,protocol,entrypoint} is set by the metrics
    middleware per request (it carries the method), so it is in_flight - summed over entrypoints
    except `traefik` and `metrics`, the internal ones that serve this scrape. v3 replaced it with
    traefik_open_connections{entrypoint,protocol}: TCP connections, idle keep-alive ones included,
    so it stays a raw series and in_flight stays unknown rather than over-counted. backends: per
    service (v2 traefik_service_open_connections) and per server URL (traefik_service_server_up).
    """

    name = "traefik"
    EP_OPEN, SVC_OPEN = "traefik_entrypoint_open_connections", "traefik_service_open_connections"
    OPEN_V3, SERVER_UP = "traefik_open_connections", "traefik_service_server_up"
    INTERNAL_ENTRYPOINTS = frozenset({"traefik", "metrics"})
    keys = (EP_OPEN, SVC_OPEN, OPEN_V3, SERVER_UP, "traefik_entrypoint_requests_total",
            "traefik_service_requests_total", "traefik_config_reloads_total")
    reads = keys + ("traefik_service_retries_total",)

    def normalize(self, index: SeriesIndex) -> dict[str, Any]:
        used: dict[str, float] = {}
        for name in (self.OPEN_V3, "traefik_entrypoint_requests_total", "traefik_service_requests_total",
                     "traefik_service_retries_total"):
            self._pick(index, used, name)
        entry = [(labels, value) for labels, value in rows(index, self.EP_OPEN)
                 if dict(labels).get("entrypoint") not in self.INTERNAL_ENTRYPOINTS]
        in_flight = combine(entry)
        if in_flight is not None:
            used[self.EP_OPEN] = in_flight
        services = per_label(index, self.SVC_OPEN, "service")
        if services:
            used[self.SVC_OPEN] = sum(services.values())
            if in_flight is None and self.EP_OPEN not in index:
                in_flight = used[self.SVC_OPEN]
        backends = [backend(key[0], "service", in_flight=value, labels={"service": key[0]})
                    for key, value in sorted(services.items())]
        for (service, url), value in sorted(per_label(index, self.SERVER_UP, "service", "url").items()):
            backends.append(backend(url, "server", healthy=value >= 1, labels={"service": service, "url": url}))
        return dict(in_flight=in_flight, backends=backends, series=used, labels={})


LITELLM_STATES = {0: "healthy", 1: "partial_outage", 2: "complete_outage"}


class LiteLLM(Dialect):
    """LiteLLM proxy with the prometheus callback (docs proxy/prometheus.md; litellm/proxy/middleware/
    in_flight_requests_middleware.py). litellm_in_flight_requests (no labels, livesum across
    workers) is bumped by an ASGI middleware for every HTTP request, this scrape included: one is
    taken off. One backends entry per deployment from litellm_deployment_state (0 healthy, 1
    partial outage, 2 complete outage). /health/backlog's JSON is read by probes/status_pages.py.
    """

    name = "litellm"
    IN_FLIGHT, STATE = "litellm_in_flight_requests", "litellm_deployment_state"
    UNLICENSED = ("litellm_not_a_premium_user_metric_total", "litellm_not_a_premium_user_metric")
    REQUESTS = ("litellm_proxy_total_requests_metric_total", "litellm_requests_metric_total")
    keys = (IN_FLIGHT, STATE) + REQUESTS + ("litellm_proxy_failed_requests_metric_total",
                                            "litellm_deployment_total_requests_total") + UNLICENSED
    reads = keys + ("litellm_deployment_failure_responses_total",)

    def normalize(self, index: SeriesIndex) -> dict[str, Any]:
        used: dict[str, float] = {}
        for name in self.keys[2:] + self.reads[len(self.keys):]:
            self._pick(index, used, name)
        if set(used) <= set(self.UNLICENSED) and self.IN_FLIGHT not in index and self.STATE not in index:
            return dict(ok=False, error="LiteLLM serves only litellm_not_a_premium_user_metric: its Prometheus "
                        "metrics were Enterprise-only before BerriAI/litellm#16689 (read /health/backlog instead)",
                        series=used)
        raw = self._pick(index, used, self.IN_FLIGHT)
        backends = []
        for labels, value in sorted(rows(index, self.STATE)):
            d = dict(labels)
            name = d.get("api_base") or d.get("model_id") or d.get("litellm_model_name") or "?"
            backends.append(backend(name, "deployment", healthy=value == 0,
                                    state=LITELLM_STATES.get(int(value), f"{value:g}"),
                                    labels={k: v for k, v in d.items()
                                            if k in ("litellm_model_name", "model_id", "api_base", "api_provider")}))
        return dict(in_flight=minus_own_request(raw), backends=backends, series=used, labels={})


class GIEEndpointPicker(Dialect):
    """The Gateway API Inference Extension's endpoint picker (pkg/epp/metrics/metrics.go and
    collectors/inference_pool.go; objective metrics were inference_model_* through v1.0.x), and the
    renamed copies in llm-d-router (pkg/epp/metrics/llm_d_router_metrics.go: llm_d_router_epp_*;
    llm_d_epp_* at other commits) - that project moves fast, so its names are best effort.

    in_flight: inference_objective_running_requests{model_name}, requests the EPP has routed and
    not seen finish. queued: the EPP's own flow-control queue, when flow control is on. kv_usage:
    the pool's average KV-cache utilization. One backends entry per model-server pod with its
    engine queue as the EPP last scraped it (inference_pool_per_pod_queue_size).
    """

    name = "gie-epp"
    RUNNING = ("inference_objective_running_requests", "inference_model_running_requests",
               "llm_d_router_epp_running_requests")
    FLOW_QUEUE = ("inference_extension_flow_control_queue_size", "llm_d_router_epp_flow_control_queue_size",
                  "llm_d_epp_flow_control_queue_size")
    POD_QUEUES = (("inference_pool_per_pod_queue_size", "model_server_pod"),
                  ("llm_d_router_epp_per_endpoint_queue_size", "model_server_endpoint"))
    KV = ("inference_pool_average_kv_cache_utilization", "llm_d_router_epp_average_kv_cache_utilization",
          "llm_d_epp_average_kv_cache_utilization")
    EXTRA = ("inference_pool_average_queue_size", "inference_pool_ready_pods", "llm_d_router_epp_average_queue_size",
             "llm_d_router_epp_ready_endpoints", "llm_d_epp_ready_endpoints", "inference_objective_request_total",
             "inference_model_request_total", "llm_d_router_epp_request_total", "inference_objective_request_error_total",
             "inference_extension_flow_control_pool_saturation")
    ENDPOINT_IN_FLIGHT = "llm_d_epp_inflight_requests"  # llm-d-router: per endpoint_name, namespace
    # The info gauges identify an idle EPP, whose per-model gauges exist only after a first request.
    keys = (RUNNING + FLOW_QUEUE + tuple(name for name, _ in POD_QUEUES) + KV + EXTRA[:5]
            + (ENDPOINT_IN_FLIGHT, "inference_extension_info", "llm_d_router_epp_info"))
    reads = keys + EXTRA[5:]

    def normalize(self, index: SeriesIndex) -> dict[str, Any]:
        used: dict[str, float] = {}
        for name in self.EXTRA:
            self._pick(index, used, name)
        in_flight = self._pick(index, used, *self.RUNNING)
        queued = self._pick(index, used, *self.FLOW_QUEUE)
        kv = None
        for name in self.KV:
            kv = ratio(rows(index, name))
            if kv is not None:
                used[name] = kv
                break
        pods: dict[str, dict[str, Any]] = {}
        for name, pod_label in self.POD_QUEUES:
            for (pool, pod), value in sorted(per_label(index, name, "name", pod_label).items()):
                pods[pod] = backend(pod, "pod", queued=value, labels={"pool": pool})
            if pods:
                used[name] = sum(p["queued"] for p in pods.values())
                break
        for (pod, namespace), value in sorted(per_label(index, self.ENDPOINT_IN_FLIGHT, "endpoint_name", "namespace").items()):
            entry = pods.setdefault(pod, backend(pod, "pod", labels={"namespace": namespace}))
            entry["in_flight"] = (entry["in_flight"] or 0.0) + value
        self._pick(index, used, self.ENDPOINT_IN_FLIGHT)
        return dict(in_flight=in_flight, queued=queued, kv_usage=kv, backends=[pods[p] for p in sorted(pods)],
                    series=used, labels=kept_labels(index, self.KV + self.RUNNING))


# Detection order: a page is the first dialect with one of its key names. Proxies and gateways
# first, then routers, then engines, so that a page that also carries engine series (a router's
# /engine_metrics, a gateway that re-exports its upstreams') is read as what the hop itself is.
# (An Istio sidecar's merged page - envoy_* beside the app's vllm:* - therefore reads as Envoy.)
DIALECTS: tuple[Dialect, ...] = (
    ReproProxy(), HAProxy(), Envoy(), NginxPlus(), Nginx(), Caddy(), Traefik(), LiteLLM(),
    GIEEndpointPicker(), SGLangRouter(),
    SGLang(), VLLM(), TGI(), LlamaCpp(),
)
READS: frozenset[str] = frozenset(name for d in DIALECTS for name in d.reads)
FAMILIES: frozenset[str] = frozenset(
    name.removesuffix(suffix) for name in READS for suffix in ("_total", "_count", "_sum", "")
    if name.endswith(suffix)
)
KNOWN_PREFIXES = ("sglang:", "vllm:", "tgi_", "llamacpp:", "smg_", "sgl_router_", "repro_proxy_", "haproxy_",
                  "envoy_", "nginx_", "nginxplus_", "caddy_", "traefik_", "litellm_", "inference_", "llm_d_")

def detect(index: SeriesIndex) -> Dialect | None:
    for dialect in DIALECTS:
        if any(name in index for name in dialect.keys):
            return dialect
    return None
