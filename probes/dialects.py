"""Dialect adapters: the series one serving component exposes -> the normalized Snapshot fields.

Pure code over plain data (no I/O, no clock): an adapter gets a `SeriesIndex` (sample name ->
{label set -> value}) and returns the fields it could fill. Names and quirks come from the
components' own sources (SGLang srt/metrics/collector.py, vLLM v1/metrics/loggers.py, the
sglang-router/smg Rust metrics module, TGI and llama.cpp server docs); each adapter lists exactly the sample names it reads (`reads`), so
the page parser can drop everything else before parsing - a router page is mostly histogram
buckets nobody here needs.

How several series of one metric become one number (`combine`), for every dialect:
- series that differ only in a *replica* label (tp_rank, pp_rank, moe_ep_rank, pid) describe the
  same requests seen by several ranks of one engine (SGLang TP ranks repeat the scheduler's
  value), so they are reduced with max;
- the remaining groups (dp_rank, vLLM `engine`, engine_type, model_name, ...) are different
  requests and are summed.
NaN and infinite values are dropped (a NaN gauge says nothing, and JSON cannot carry it).
Ratios (kv usage) are the max over every series instead: a ratio does not add up.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

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
    """SGLang, current names (v0.4+) and the first generation (v0.3.x: num_requests_*, label `name`).

    running/queued are scheduler gauges refreshed only on prefill or every 40 decode steps
    (staleness is judged over time by probes/staleness.py). Progress: the inter-token-latency
    histogram count moves per streamed batch; generation_tokens_total only when a request ends.
    """

    name = "sglang"
    RUNNING = ("sglang:num_running_reqs", "sglang:num_requests_running")
    QUEUED = ("sglang:num_queue_reqs", "sglang:num_requests_waiting")
    # PD disaggregation and grammar compilation: requests accepted but not yet in a batch.
    EXTRA_QUEUES = (
        "sglang:num_prefill_prealloc_queue_reqs",
        "sglang:num_prefill_inflight_queue_reqs",
        "sglang:num_decode_prealloc_queue_reqs",
        "sglang:num_decode_transfer_queue_reqs",
        "sglang:num_grammar_queue_reqs",
    )
    ITL = ("sglang:inter_token_latency_seconds_count", "sglang:time_per_output_token_seconds_count")
    ITL_SUM = ("sglang:inter_token_latency_seconds_sum", "sglang:time_per_output_token_seconds_sum")
    HTTP_ACTIVE = "sglang:http_requests_active"
    # The scrape itself (and other probes) show up in http_requests_active; they are not user requests.
    PROBE_ENDPOINTS = frozenset({"/metrics", "/health", "/health_generate", "/get_load", "/get_server_info",
                                 "/server_info", "/get_model_info", "/model_info", "/v1/models", "/ping"})
    keys = RUNNING + QUEUED + ITL
    reads = keys + ITL_SUM + EXTRA_QUEUES + (
        "sglang:generation_tokens_total", "sglang:prompt_tokens_total", "sglang:token_usage",
        "sglang:realtime_tokens_total", HTTP_ACTIVE, "sglang:gen_throughput",
    )

    def normalize(self, index: SeriesIndex) -> dict[str, Any]:
        used: dict[str, float] = {}
        running = self._pick(index, used, *self.RUNNING)
        queued = self._pick(index, used, *self.QUEUED)
        extra = total(index, self.EXTRA_QUEUES, used)
        if extra is not None:
            queued = (queued or 0.0) + extra
        active = [(labels, value) for labels, value in rows(index, self.HTTP_ACTIVE)
                  if dict(labels).get("endpoint") not in self.PROBE_ENDPOINTS]
        in_flight = None
        if self.HTTP_ACTIVE in index:  # newer SGLang only; 0 when only probe endpoints were active
            in_flight = used[self.HTTP_ACTIVE] = combine(active) or 0.0
        kv = ratio(rows(index, "sglang:token_usage"))
        self._pick(index, used, "sglang:realtime_tokens_total", mode="decode")
        self._pick(index, used, "sglang:gen_throughput")
        return dict(
            running=running, queued=queued, in_flight=in_flight,
            gen_tokens_total=self._pick(index, used, "sglang:generation_tokens_total"),
            prompt_tokens_total=self._pick(index, used, "sglang:prompt_tokens_total"),
            itl_count=self._pick(index, used, *self.ITL), itl_sum=self._pick(index, used, *self.ITL_SUM),
            kv_usage=kv, series=used, labels=kept_labels(index, self.RUNNING + self.QUEUED + self.ITL),
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


CIRCUIT_STATES = {0: "closed", 1: "open", 2: "half-open"}


class SGLangRouter(Dialect):
    """sglang-router / SGLang model gateway: `smg_*` (0.3.x) and the older `sgl_router_*`.

    One entry per worker; in_flight is the sum of the workers' active requests, which stays 1
    for the whole life of a stream (observed on 0.3.2). 0.3.2 emits smg_worker_requests_active
    only with cache_aware; with round_robin the router cannot tell, so in_flight stays None.
    """

    name = "sglang-router"
    ACTIVE = ("smg_worker_requests_active", "sgl_router_running_requests", "sgl_router_worker_load")
    HEALTH = ("smg_worker_health", "sgl_router_worker_health")
    REQUESTS = ("smg_router_requests_total", "sgl_router_requests_total")
    keys = ACTIVE + HEALTH + REQUESTS + ("smg_worker_pool_size", "sgl_router_active_workers")
    reads = keys + ("smg_worker_cb_state", "smg_worker_cb_consecutive_failures")

    def normalize(self, index: SeriesIndex) -> dict[str, Any]:
        used: dict[str, float] = {}
        workers: dict[str, dict[str, Any]] = {}

        def per_worker(names: tuple[str, ...]) -> dict[str, float]:
            for name in names:
                values: dict[str, float] = {}
                for labels, value in rows(index, name):
                    url = dict(labels).get("worker")
                    if url is not None:
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
            entry(url)["circuit"] = CIRCUIT_STATES.get(int(value), str(value))
        for url, value in per_worker(("smg_worker_cb_consecutive_failures",)).items():
            entry(url)["consecutive_failures"] = value
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


# Detection order: a page is the first dialect with one of its key names. Routers and proxies
# first, so that a page that also re-exports engine series (e.g. a router's /engine_metrics)
# is read as what it is.
DIALECTS: tuple[Dialect, ...] = (ReproProxy(), SGLangRouter(), SGLang(), VLLM(), TGI(), LlamaCpp())
READS: frozenset[str] = frozenset(name for d in DIALECTS for name in d.reads)
FAMILIES: frozenset[str] = frozenset(
    name.removesuffix(suffix) for name in READS for suffix in ("_total", "_count", "_sum", "")
    if name.endswith(suffix)
)
KNOWN_PREFIXES = ("sglang:", "vllm:", "tgi_", "llamacpp:", "smg_", "sgl_router_", "repro_proxy_")


def detect(index: SeriesIndex) -> Dialect | None:
    for dialect in DIALECTS:
        if any(name in index for name in dialect.keys):
            return dialect
    return None
