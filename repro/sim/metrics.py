"""The simulated engine's /metrics in the real engines' dialects, read from the scheduler at scrape time.

A custom prometheus_client collector (not Gauge/Counter objects updated per token): the step loop
only bumps plain integers, and the exposition is built when someone scrapes. Names and labels
follow the engines' own collectors. SGLang 0.5.23 (python/sglang/srt/observability/
metrics_collector.py): scheduler series carry model_name, engine_type, tp_rank, pp_rank,
moe_ep_rank (plus priority="" with priority scheduling); tokenizer series model_name and
engine_type, and prompt/generation/TTFT also is_streaming; sglang:http_requests_active{endpoint,
method} is the livesum gauge its HTTP metrics middleware keeps. The "older-release" quirk gives
the earlier names and labels. vLLM V1 (vllm/v1/metrics/loggers.py) carries model_name and engine.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from repro.sim.engine import Engine, Histogram


def _buckets(histogram: Histogram) -> list[tuple[str, float]]:
    out, running = [], 0
    # counts has one more slot than buckets (the overflow): +Inf is written from the total below.
    for bound, count in zip(histogram.buckets, histogram.counts, strict=False):
        running += count
        out.append((repr(float(bound)), running))
    out.append(("+Inf", histogram.count))
    return out


STREAMING = {False: "false", True: "true"}


class SglangCollector:
    def __init__(self, engine: Engine, http_active: Callable[[], dict[tuple[str, str], int]] = dict) -> None:
        self.engine = engine
        self.http_active = http_active  # (endpoint, method) -> open requests, kept by the HTTP front end

    def collect(self):
        e = self.engine
        config = e.config
        current = config.current_release
        model, engine_type = config.model, config.role
        sched_names = ["model_name", "engine_type", "tp_rank", "pp_rank"]
        sched = [model, engine_type, "0", "0"]
        if current:
            sched_names.append("moe_ep_rank")
            sched.append("0")
        priority = "priority-scheduling" in e.quirks
        if priority:
            sched_names.append("priority")
            sched.append("")
        running, queued = e.gauges()

        def gauge(name: str, doc: str, value: float, per_priority: bool = False) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=sched_names)
            g.add_metric(sched, value)
            if per_priority and priority:
                # Every simulated request has the default priority 0, so its row equals the total:
                # a reader that sums every row counts each request twice.
                g.add_metric(sched[:-1] + ["0"], value)
            return g

        yield gauge("sglang:num_running_reqs", "The number of running requests.", running, True)
        yield gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", queued, True)
        yield gauge("sglang:num_used_tokens", "The number of used tokens.", running * 64)
        yield gauge("sglang:token_usage", "The token usage.", min(1.0, running / max(1, config.max_running)))
        if engine_type == "prefill":
            # 0.5.23 renamed the queue of requests waiting on the prefill/decode handshake.
            bootstrap = "sglang:num_prefill_bootstrap_queue_reqs" if current else "sglang:num_prefill_prealloc_queue_reqs"
            yield gauge(bootstrap, "The number of requests in the prefill bootstrap queue.", 0, True)
            yield gauge("sglang:num_prefill_inflight_queue_reqs", "The number of requests in the prefill inflight queue.",
                        0, True)
        elif engine_type == "decode":
            yield gauge("sglang:num_decode_prealloc_queue_reqs", "The number of requests in the decode prealloc queue.",
                        0, True)
            yield gauge("sglang:num_decode_transfer_queue_reqs", "The number of requests in the decode transfer queue.",
                        len(e.parked), True)
        if current:
            realtime = CounterMetricFamily("sglang:realtime_tokens", "Total number of tokens processed, updated in "
                                           "realtime.", labels=[*sched_names, "mode"])
            for mode, value in e.realtime_tokens.items():
                if value:  # a labelled counter's series appears on its first increment
                    realtime.add_metric([*sched, mode], value)
            yield realtime

        tok_names = ["model_name", "engine_type"] if current else ["model_name"]
        tok = [model, engine_type] if current else [model]

        def counter(name: str, doc: str, values: dict[bool, int]) -> CounterMetricFamily:
            if not current:
                c = CounterMetricFamily(name, doc, labels=tok_names)
                c.add_metric(tok, sum(values.values()))
                return c
            c = CounterMetricFamily(name, doc, labels=[*tok_names, "is_streaming"])
            for streaming, value in values.items():
                if value:
                    c.add_metric([*tok, STREAMING[streaming]], value)
            return c

        yield counter("sglang:prompt_tokens", "Number of prefill tokens processed.", e.sglang_prompt_tokens)
        yield counter("sglang:generation_tokens", "Number of generation tokens processed.", e.sglang_generation_tokens)
        yield counter("sglang:num_requests", "Number of requests processed.", e.sglang_requests)

        def histogram(name: str, doc: str, hists: dict[tuple[str, ...], Histogram], labels: list[str], always=True):
            h = HistogramMetricFamily(name, doc, labels=labels)
            for values, hist in hists.items():
                if hist.count or always:
                    h.add_metric(list(values), _buckets(hist), hist.total)
            return h

        # Real SGLang shows the ITL series only after its first observation; the sim has always
        # shown it from the start, so the verdict's progress counter reads 0 rather than nothing
        # before the first token. A 0.5.23 prefill worker never observes it: none there.
        yield histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                        {tuple(tok): e.itl}, tok_names, always=e.observes_latency)
        if current:
            yield histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                            {(*tok, STREAMING[s]): h for s, h in e.ttft_by_stream.items()}, [*tok_names, "is_streaming"],
                            always=False)
            active = GaugeMetricFamily("sglang:http_requests_active", "Number of HTTP requests currently being "
                                       "processed.", labels=["endpoint", "method"])
            for (endpoint, method), value in sorted(self.http_active().items()):
                active.add_metric([endpoint, method], value)
            yield active
        else:
            yield histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                            {tuple(tok): e.ttft}, tok_names)


class VllmCollector:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self):
        e = self.engine
        names, values = ["model_name", "engine"], [e.config.model, "0"]
        running, queued = e.gauges()
        for name, doc, value in (
            ("vllm:num_requests_running", "Number of requests in model execution batches.", running),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", queued),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
             min(1.0, running / max(1, e.config.max_running))),
        ):
            g = GaugeMetricFamily(name, doc, labels=names)
            g.add_metric(values, value)
            yield g
        for name, doc, value in (
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", e.prompt_tokens_total),
            ("vllm:generation_tokens", "Number of generation tokens processed.", e.generation_tokens_total),
        ):
            c = CounterMetricFamily(name, doc, labels=names)
            c.add_metric(values, value)
            yield c
        success = CounterMetricFamily("vllm:request_success", "Count of successfully processed requests.",
                                      labels=[*names, "finished_reason"])
        for reason, count in e.finished_by_reason.items():
            success.add_metric([*values, reason], count)
        yield success
        for name, doc, hist in (
            ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", e.itl),
            ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", e.ttft),
        ):
            h = HistogramMetricFamily(name, doc, labels=names)
            h.add_metric(values, _buckets(hist), hist.total)
            yield h


def metrics_page(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


def registry_for(engine: Engine, http_active: Callable[[], dict[tuple[str, str], int]] = dict) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SglangCollector(engine, http_active) if engine.config.dialect == "sglang"
                      else VllmCollector(engine))
    return registry
