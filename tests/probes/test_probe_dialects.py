"""parse_metrics on exposition text built from the documented names and labels (docs/engines.md)."""

from __future__ import annotations

import math

import pytest

from probes import parse_metrics
from probes.exposition import MAX_PAGE_BYTES
from repro.core.snapshot import Snapshot
from tests.support.metric_pages import ROUTER_SMG, SGLANG_CURRENT, VLLM_V1


def one(text: str, **kw) -> Snapshot:
    snapshots = parse_metrics(text, hop="h", url="http://x/metrics", **kw)
    assert len(snapshots) == 1
    return snapshots[0]


def test_sglang_current_combines_tp_with_max_and_dp_with_sum():
    s = one(SGLANG_CURRENT)
    assert s.ok and s.error is None and s.dialect == "sglang"
    assert s.running == 12  # max over tp ranks (7, 5), sum over dp ranks
    assert s.queued == 3
    # realtime decode tokens move every decode step; generation_tokens_total only at request end
    assert s.gen_tokens_total == 600 and s.prompt_tokens_total == 999
    assert s.series["sglang:generation_tokens_total"] == 1234
    assert s.itl_count == 4321
    assert s.in_flight == 12  # the scrape's own /metrics request is not a user request
    assert s.kv_usage == 0.5  # a ratio: max, not sum
    assert s.series["sglang:realtime_tokens_total{mode=decode}"] == 600
    assert s.labels == {"engine_type": "unified", "model_name": "qwen"}
    assert s.stale == [] and s.workers == []


def test_sglang_pd_queues_add_to_queued():
    page = """\
sglang:num_running_reqs{engine_type="decode",model_name="m",pp_rank="0",tp_rank="0"} 4
sglang:num_queue_reqs{engine_type="decode",model_name="m",pp_rank="0",tp_rank="0"} 1
sglang:num_decode_prealloc_queue_reqs{engine_type="decode",model_name="m",pp_rank="0",tp_rank="0"} 2
sglang:num_decode_transfer_queue_reqs{engine_type="decode",model_name="m",pp_rank="0",tp_rank="0"} 3
"""
    s = one(page)
    assert s.running == 4 and s.queued == 6
    assert s.in_flight is None  # older SGLang: no HTTP in-flight gauge, so unknown rather than 0


SGLANG_03 = """\
# HELP sglang:num_requests_running Number of requests currently running on GPU
# TYPE sglang:num_requests_running gauge
sglang:num_requests_running{name="google/gemma-2-9b-it"} 3.0
# HELP sglang:num_requests_waiting Number of requests waiting to be processed.
# TYPE sglang:num_requests_waiting gauge
sglang:num_requests_waiting{name="google/gemma-2-9b-it"} 4.0
# TYPE sglang:time_per_output_token_seconds histogram
sglang:time_per_output_token_seconds_bucket{le="+Inf",name="google/gemma-2-9b-it"} 77.0
sglang:time_per_output_token_seconds_count{name="google/gemma-2-9b-it"} 77.0
sglang:generation_tokens_total{name="google/gemma-2-9b-it"} 80.0
"""


def test_sglang_03_names_and_name_label():
    s = one(SGLANG_03)
    assert (s.dialect, s.running, s.queued, s.itl_count, s.gen_tokens_total) == ("sglang", 3, 4, 77, 80)
    assert s.labels == {"name": "google/gemma-2-9b-it"}


def test_vllm_v1_sums_engines():
    s = one(VLLM_V1)
    assert (s.dialect, s.running, s.queued, s.gen_tokens_total, s.prompt_tokens_total) == ("vllm", 7, 1, 150, 10)
    assert s.itl_count == 140 and math.isclose(s.kv_usage, 0.3)
    assert s.labels["model_name"] == "llama"


def test_vllm_v0_swapped_is_queued_and_old_kv_name():
    page = """\
vllm:num_requests_running{model_name="opt"} 2.0
vllm:num_requests_waiting{model_name="opt"} 1.0
vllm:num_requests_swapped{model_name="opt"} 5.0
vllm:gpu_cache_usage_perc{model_name="opt"} 0.75
vllm:time_per_output_token_seconds_count{model_name="opt"} 9.0
vllm:generation_tokens_total{model_name="opt"} 12.0
"""
    s = one(page)
    assert (s.running, s.queued, s.kv_usage, s.itl_count) == (2, 6, 0.75, 9)


def test_tgi():
    page = """\
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 6
# TYPE tgi_queue_size gauge
tgi_queue_size 3
# TYPE tgi_batch_inference_count counter
tgi_batch_inference_count{method="prefill"} 10
tgi_batch_inference_count{method="decode"} 500
tgi_request_generated_tokens_sum 480
"""
    s = one(page)
    assert (s.dialect, s.running, s.queued, s.itl_count, s.gen_tokens_total) == ("tgi", 6, 3, 500, 480)


def test_llamacpp():
    page = """\
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 300
llamacpp:prompt_tokens_total 40
llamacpp:n_decode_total 290
llamacpp:kv_cache_usage_ratio 0.2
"""
    s = one(page)
    assert (s.dialect, s.running, s.queued, s.gen_tokens_total, s.itl_count, s.kv_usage) == (
        "llamacpp", 1, 2, 300, 290, 0.2)


def test_llamacpp_metrics_served_as_a_json_string():
    page = '"llamacpp:requests_processing 1\\nllamacpp:requests_deferred 0\\n"'
    s = one(page)
    assert s.ok and s.running == 1 and s.queued == 0


def test_router_smg_workers_and_in_flight():
    s = one(ROUTER_SMG)
    assert s.dialect == "sglang-router" and s.ok
    assert s.in_flight == 3 and s.running is None and s.queued is None
    assert s.workers == [
        {"url": "http://127.0.0.1:8001", "active": 2, "healthy": True, "circuit": "closed", "consecutive_failures": None},
        {"url": "http://127.0.0.1:8002", "active": 1, "healthy": False, "circuit": "open", "consecutive_failures": 10},
    ]
    assert s.series["smg_router_requests_total"] == 12


def test_router_smg_1_13_half_open_removed_worker_and_engine_loads():
    # smg 1.13: HELP "0=closed, 1=open, 2=half_open"; a removed worker's gauges go to -1
    # (remove_worker_metrics, smg model_gateway/src/observability/metrics.rs).
    page = """\
smg_worker_requests_active{worker="http://a:1"} 1
smg_worker_requests_active{worker="http://gone:1"} 0
smg_worker_health{worker="http://a:1"} 1
smg_worker_health{worker="http://gone:1"} -1
smg_worker_cb_state{worker="http://a:1"} 2
smg_worker_cb_state{worker="http://gone:1"} -1
smg_engine_running_requests{worker="http://a:1",model="m",dp_rank="0"} 3
smg_engine_waiting_requests{worker="http://a:1",model="m",dp_rank="0"} 1
"""
    s = one(page)
    assert s.in_flight == 1
    assert s.workers == [{"url": "http://a:1", "active": 1, "healthy": True, "circuit": "half_open",
                          "consecutive_failures": None}]
    assert s.series["smg_engine_running_requests"] == 3 and s.series["smg_engine_waiting_requests"] == 1


def test_router_round_robin_has_no_active_gauge():
    page = 'smg_worker_health{worker="http://a:1"} 1\nsmg_router_requests_total{model="m"} 3\n'
    s = one(page)
    assert s.dialect == "sglang-router" and s.in_flight is None
    assert s.workers == [{"url": "http://a:1", "active": None, "healthy": True, "circuit": None,
                          "consecutive_failures": None}]


def test_router_legacy_sgl_router_names():
    page = """\
sgl_router_requests_total{route="/generate"} 5
sgl_router_active_workers 2
sgl_router_worker_health{worker="http://w1:8000"} 1
sgl_router_worker_health{worker="http://w2:8000"} 1
sgl_router_running_requests{worker="http://w1:8000"} 3
sgl_router_running_requests{worker="http://w2:8000"} 0
"""
    s = one(page)
    assert s.dialect == "sglang-router" and s.in_flight == 3
    assert [(w["url"], w["active"], w["healthy"]) for w in s.workers] == [
        ("http://w1:8000", 3, True), ("http://w2:8000", 0, True)]


def test_repro_proxy():
    page = """\
# HELP repro_proxy_open_flows Flows open.
# TYPE repro_proxy_open_flows gauge
repro_proxy_open_flows 4.0
# TYPE repro_proxy_held_flows gauge
repro_proxy_held_flows 2.0
repro_proxy_requests_total 9.0
"""
    s = one(page)
    assert (s.dialect, s.in_flight, s.held) == ("repro-proxy", 4, 2)
    assert s.to_dict()["held"] == 2


def test_to_dict_is_the_contract():
    d = one(SGLANG_CURRENT).to_dict()
    for key in ("hop", "url", "ok", "error", "dialect", "running", "queued", "in_flight", "held",
                "gen_tokens_total", "itl_count", "stale", "workers", "backends", "scrape_s"):
        assert key in d
    assert d["hop"] == "h" and d["url"] == "http://x/metrics"
    import json

    json.dumps(d, allow_nan=False)


# --- damaged pages ----------------------------------------------------------------------------


def test_nan_and_inf_are_dropped_not_reported():
    page = ('sglang:num_running_reqs{tp_rank="0"} NaN\nsglang:num_queue_reqs{tp_rank="0"} +Inf\n'
            'sglang:inter_token_latency_seconds_count 3\n')
    s = one(page)
    assert s.ok and s.running is None and s.queued is None and s.itl_count == 3
    import json

    json.dumps(s.to_dict(), allow_nan=False)


def test_duplicated_series_are_not_counted_twice():
    page = SGLANG_CURRENT + SGLANG_CURRENT.replace("7.0", "8.0")  # a concatenated page
    s = one(page)
    assert s.running == 13  # the last copy (8 on dp 0) wins, 5 on dp 1


def test_missing_help_and_type():
    page = "\n".join(line for line in SGLANG_CURRENT.splitlines() if not line.startswith("#")) + "\n"
    s = one(page)
    assert s.ok and s.running == 12 and s.itl_count == 4321


def test_openmetrics_eof_page():
    page = """\
# TYPE vllm:num_requests_running gauge
# HELP vllm:num_requests_running Number of requests in model execution batches.
vllm:num_requests_running{engine="0",model_name="m"} 2.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 33.0
vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.1",model_name="m"} 3.0 # {trace_id="abc"} 0.05 1.7e9
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 4.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 0.2
# TYPE process_cpu_seconds counter
process_cpu_seconds_total 1.5
# EOF
"""
    s = one(page)
    assert (s.ok, s.dialect, s.running, s.gen_tokens_total, s.itl_count) == (True, "vllm", 2, 33, 4)


def test_openmetrics_broken_structure_is_an_error():
    page = """\
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.1"} 3.0
vllm:inter_token_latency_seconds_count{engine="0"} 4.0
# EOF
"""
    s = one(page)
    assert not s.ok and "OpenMetrics" in s.error and "+Inf" in s.error


@pytest.mark.parametrize("cut", [40, 200, 333, len(SGLANG_CURRENT) - 30])
def test_partial_page_cut_mid_line(cut):
    text = SGLANG_CURRENT[:cut]
    s = one(text)
    # Either the cut fell between lines (a shorter but valid page) or the error says what broke.
    if not s.ok:
        assert s.error and ("malformed" in s.error or "no " in s.error or "not " in s.error)


def test_partial_page_mid_label_is_malformed():
    s = one('sglang:num_running_reqs{model_name="q",tp_ra')
    assert not s.ok and s.error.startswith("malformed Prometheus text page")
    assert s.running is None


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "empty"),
        ("\n\n   \n", "empty"),
        ("# just a comment\n", "only comments"),
        ("<!doctype html><html><body>Not Found</body></html>", "HTML"),
        ('{"detail": "Not Found"}', "JSON"),
        ("lorem ipsum dolor sit amet\nconsectetur adipiscing", "not Prometheus text"),
        ("\x00\x01\x02\xff garbage \x7f", "not Prometheus text"),
        ("python_gc_objects_collected_total{generation=\"0\"} 1\nprocess_cpu_seconds_total 2\n", "no LLM-serving"),
        ("sglang:cache_hit_rate 0.5\n", "none this probe reads"),
    ],
)
def test_unreadable_pages_give_a_clear_error(text, words):
    [s] = parse_metrics(text, hop="h", url="u")
    assert not s.ok and words in s.error, s.error
    assert "\n" not in s.error and len(s.error) <= 300
    assert s.hop == "h" and s.url == "u"


def test_huge_page_is_refused_fast():
    text = "x" * (MAX_PAGE_BYTES + 1)
    [s] = parse_metrics(text)
    assert not s.ok and "cap" in s.error


def test_non_text_input_does_not_raise():
    [s] = parse_metrics(b"sglang:num_running_reqs 1")  # type: ignore[arg-type]
    assert not s.ok


def test_federate_page_gives_one_snapshot_per_instance():
    page = """\
sglang:num_running_reqs{instance="10.0.0.1:30000",job="sglang",tp_rank="0"} 1
sglang:num_running_reqs{instance="10.0.0.2:30000",job="sglang",tp_rank="0"} 2
sglang:num_queue_reqs{instance="10.0.0.2:30000",job="sglang",tp_rank="0"} 5
"""
    snapshots = parse_metrics(page, hop="fleet")
    assert [(s.url, s.running, s.queued) for s in snapshots] == [
        ("10.0.0.1:30000", 1, None), ("10.0.0.2:30000", 2, 5)]
