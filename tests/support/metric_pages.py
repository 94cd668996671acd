"""Metrics pages as the engines and the router expose them, built from the documented names and
labels (docs/engines.md): parsed by the dialect tests and served by the tests' hostile servers."""

SGLANG_CURRENT = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="qwen",pp_rank="0",tp_rank="0",dp_rank="0"} 7.0
sglang:num_running_reqs{engine_type="unified",model_name="qwen",pp_rank="0",tp_rank="1",dp_rank="0"} 7.0
sglang:num_running_reqs{engine_type="unified",model_name="qwen",pp_rank="0",tp_rank="0",dp_rank="1"} 5.0
sglang:num_running_reqs{engine_type="unified",model_name="qwen",pp_rank="0",tp_rank="1",dp_rank="1"} 5.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="qwen",pp_rank="0",tp_rank="0",dp_rank="0"} 2.0
sglang:num_queue_reqs{engine_type="unified",model_name="qwen",pp_rank="0",tp_rank="0",dp_rank="1"} 1.0
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="qwen",pp_rank="0",tp_rank="0",dp_rank="0"} 0.25
sglang:token_usage{engine_type="unified",model_name="qwen",pp_rank="0",tp_rank="0",dp_rank="1"} 0.5
# TYPE sglang:generation_tokens counter
sglang:generation_tokens_total{model_name="qwen"} 1234.0
sglang:generation_tokens_created{model_name="qwen"} 1.7e9
# TYPE sglang:prompt_tokens counter
sglang:prompt_tokens_total{model_name="qwen"} 999.0
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{le="0.002",model_name="qwen"} 10.0
sglang:inter_token_latency_seconds_bucket{le="+Inf",model_name="qwen"} 4321.0
sglang:inter_token_latency_seconds_count{model_name="qwen"} 4321.0
sglang:inter_token_latency_seconds_sum{model_name="qwen"} 21.5
# TYPE sglang:realtime_tokens counter
sglang:realtime_tokens_total{mode="prefill_compute",model_name="qwen"} 50.0
sglang:realtime_tokens_total{mode="decode",model_name="qwen"} 600.0
# TYPE sglang:http_requests_active gauge
sglang:http_requests_active{endpoint="/metrics",method="GET"} 1.0
sglang:http_requests_active{endpoint="/v1/chat/completions",method="POST"} 11.0
sglang:http_requests_active{endpoint="/generate",method="POST"} 1.0
"""


VLLM_V1 = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama"} 3.0
vllm:num_requests_running{engine="1",model_name="llama"} 4.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 1.0
vllm:num_requests_waiting{engine="1",model_name="llama"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.1
vllm:kv_cache_usage_perc{engine="1",model_name="llama"} 0.3
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="llama"} 100.0
vllm:generation_tokens_total{engine="1",model_name="llama"} 50.0
vllm:generation_tokens_created{engine="0",model_name="llama"} 1.75e9
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="llama"} 10.0
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="llama"} 140.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="llama"} 140.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="llama"} 4.0
"""


# sglang-router 0.3.2: Rust exporter, `# TYPE` only, no HELP, blank line between families (docs/engines.md#the-routers-exposition).
ROUTER_SMG = """\
# TYPE smg_http_requests_total counter
smg_http_requests_total{method="POST",path="/v1/chat/completions"} 12

# TYPE smg_router_requests_total counter
smg_router_requests_total{router_type="http",backend_type="regular",connection_mode="http",model="m",endpoint="chat",streaming="true"} 12

# TYPE smg_worker_requests_active gauge
smg_worker_requests_active{worker="http://127.0.0.1:8001"} 2
smg_worker_requests_active{worker="http://127.0.0.1:8002"} 1

# TYPE smg_worker_health gauge
smg_worker_health{worker="http://127.0.0.1:8001"} 1
smg_worker_health{worker="http://127.0.0.1:8002"} 0

# TYPE smg_worker_cb_state gauge
smg_worker_cb_state{worker="http://127.0.0.1:8001"} 0
smg_worker_cb_state{worker="http://127.0.0.1:8002"} 1

# TYPE smg_worker_cb_consecutive_failures gauge
smg_worker_cb_consecutive_failures{worker="http://127.0.0.1:8002"} 10

# TYPE smg_router_request_duration_seconds histogram
smg_router_request_duration_seconds_bucket{router_type="http",backend_type="regular",connection_mode="http",model="m",endpoint="chat",le="0.005"} 12
smg_router_request_duration_seconds_bucket{router_type="http",backend_type="regular",connection_mode="http",model="m",endpoint="chat",le="+Inf"} 12
smg_router_request_duration_seconds_sum{router_type="http",backend_type="regular",connection_mode="http",model="m",endpoint="chat"} 0.01
smg_router_request_duration_seconds_count{router_type="http",backend_type="regular",connection_mode="http",model="m",endpoint="chat"} 12
"""
