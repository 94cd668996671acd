"""The simulated engine's /metrics in the real engines' dialects, read from the scheduler at scrape time.

A custom prometheus_client collector (not Gauge/Counter objects updated per token): the step loop
only bumps plain integers, and the exposition is built when someone scrapes. Names and labels
follow the engines' own collectors (SGLang python/sglang/srt/metrics/collector.py, vLLM
vllm/v1/metrics/loggers.py): SGLang's scheduler gauges carry model_name, engine_type, tp_rank,
pp_rank; its tokenizer counters model_name; vLLM V1 carries model_name and engine.
"""

from __future__ import annotations

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


class SglangCollector:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self):
        e = self.engine
        model = e.config.model
        engine_type = e.config.role
        sched_names = ["model_name", "engine_type", "tp_rank", "pp_rank"]
        sched = [model, engine_type, "0", "0"]
        running, queued = e.gauges()

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=sched_names)
            g.add_metric(sched, value)
            return g

        yield gauge("sglang:num_running_reqs", "The number of running requests.", running)
        yield gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", queued)
        yield gauge("sglang:num_used_tokens", "The number of used tokens.", running * 64)
        yield gauge("sglang:token_usage", "The token usage.", min(1.0, running / max(1, e.config.max_running)))
        if engine_type == "prefill":
            yield gauge("sglang:num_prefill_prealloc_queue_reqs", "Prefill prealloc queue.", 0)
            yield gauge("sglang:num_prefill_inflight_queue_reqs", "Prefill inflight queue.", 0)
        elif engine_type == "decode":
            yield gauge("sglang:num_decode_prealloc_queue_reqs", "Decode prealloc queue.", 0)
            yield gauge("sglang:num_decode_transfer_queue_reqs", "Decode transfer queue.", len(e.parked))

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=["model_name"])
            c.add_metric([model], value)
            return c

        yield counter("sglang:prompt_tokens", "Number of prefill tokens processed.", e.sglang_prompt_tokens_total)
        yield counter("sglang:generation_tokens", "Number of generation tokens processed.",
                      e.sglang_generation_tokens_total)
        yield counter("sglang:num_requests", "Number of requests processed.", e.requests_finished)
        for name, doc, hist in (
            ("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", e.itl),
            ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", e.ttft),
        ):
            h = HistogramMetricFamily(name, doc, labels=["model_name"])
            h.add_metric([model], _buckets(hist), hist.total)
            yield h


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


def registry_for(engine: Engine) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SglangCollector(engine) if engine.config.dialect == "sglang" else VllmCollector(engine))
    return registry
