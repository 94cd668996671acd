"""Proxy and gateway pages -> Snapshot: HAProxy, Envoy, nginx (stub_status, exporter, Plus), Caddy,
Traefik, LiteLLM, the GIE endpoint picker. Fixture pages (tests/fixtures/) are written from the
names and labels in the projects' sources and docs; haproxy_2.6.txt is a
trimmed capture of the real exporter."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest

from probes import parse_metrics
from probes.dialects import DIALECTS, READS
from probes.scrape import merge
from repro.core.snapshot import ENGINE_DIALECTS, ROLE_OF_DIALECT, Snapshot, failed
from tests.support.metric_pages import ROUTER_SMG, SGLANG_CURRENT, VLLM_V1

FIXTURES = Path(__file__).parent.parent / "fixtures"


def page(name: str) -> str:
    return (FIXTURES / name).read_text()


def one(text: str) -> Snapshot:
    snapshots = parse_metrics(text, hop="gw", url="http://gw/metrics")
    assert len(snapshots) == 1
    snapshot = snapshots[0]
    json.dumps(snapshot.to_dict(), allow_nan=False)  # the run log can carry it
    if snapshot.error is not None:
        assert "\n" not in snapshot.error and len(snapshot.error) <= 300
    return snapshot


def by_name(snapshot: Snapshot) -> dict[str, dict]:
    return {b["name"]: b for b in snapshot.backends}


# --- one fixture per dialect --------------------------------------------------------------------


def test_haproxy_real_exporter_page():
    s = one(page("haproxy_2.6.txt"))
    assert (s.ok, s.dialect) == (True, "haproxy")
    # 5 streams on backend sglang_engines: 2 on engine-0, 2 in the backend queue, 1 in engine-0's own.
    # Not the frontends' 6: that counts the exporter's own request (frontend "prometheus").
    assert s.in_flight == 5 and s.queued == 3
    assert s.running is None and s.kv_usage is None and s.workers == []
    servers = by_name(s)
    assert list(servers) == ["sglang_engines/engine-0", "sglang_engines/engine-1", "vllm_engines/vllm-0"]
    assert servers["sglang_engines/engine-0"] == {
        "name": "sglang_engines/engine-0", "kind": "server", "in_flight": 2, "queued": 1, "healthy": True,
        "state": "UP", "labels": {"proxy": "sglang_engines", "server": "engine-0", "check": "L4OK"}}
    down = servers["sglang_engines/engine-1"]
    assert (down["healthy"], down["state"], down["labels"]["check"], down["in_flight"]) == (False, "DOWN", "L4CON", 0)
    assert s.series["haproxy_frontend_current_sessions"] == 6  # kept for a human, not used


def test_haproxy_backend_scope_and_numeric_status():
    # ?scope=backend: no server series, so one entry per backend; a pre-2.4 numeric status (no `state`).
    text = """\
# TYPE haproxy_backend_current_sessions gauge
haproxy_backend_current_sessions{proxy="engines"} 4
haproxy_backend_current_sessions{proxy="embed"} 0
# TYPE haproxy_backend_current_queue gauge
haproxy_backend_current_queue{proxy="engines"} 1
# TYPE haproxy_backend_status gauge
haproxy_backend_status{proxy="engines"} 1
haproxy_backend_status{proxy="embed"} 0
"""
    s = one(text)
    assert (s.dialect, s.in_flight, s.queued) == ("haproxy", 4, 1)
    assert [(b["name"], b["kind"], b["in_flight"], b["queued"], b["healthy"], b["state"]) for b in s.backends] == [
        ("embed", "backend", 0, None, False, None), ("engines", "backend", 4, 1, True, None)]


def test_envoy_front_proxy():
    s = one(page("envoy_stats.txt"))
    assert (s.ok, s.dialect) == (True, "envoy")
    assert s.in_flight == 7  # ingress_http only: the admin connection manager is this scrape
    assert s.queued == 2  # vllm_pool's pending requests (no connection-pool slot yet)
    clusters = by_name(s)
    assert sorted(clusters) == ["sglang_pool", "vllm_pool", "xds_cluster"]
    vllm = clusters["vllm_pool"]
    assert (vllm["kind"], vllm["in_flight"], vllm["queued"], vllm["healthy"], vllm["state"]) == (
        "cluster", 4, 2, True, "1/2 healthy")
    assert s.series["envoy_cluster_upstream_rq_timeout"] == 3


def test_envoy_unhealthy_cluster_and_nan_gauge():
    text = """\
envoy_http_downstream_rq_active{envoy_http_conn_manager_prefix="ingress_http"} NaN
envoy_http_downstream_rq_active{envoy_http_conn_manager_prefix="admin"} 1
envoy_cluster_upstream_rq_active{envoy_cluster_name="engines"} 0
envoy_cluster_membership_healthy{envoy_cluster_name="engines"} 0
envoy_cluster_membership_total{envoy_cluster_name="engines"} 2
"""
    s = one(text)
    assert s.ok and s.dialect == "envoy"
    assert s.in_flight is None  # a NaN says nothing, and the admin HCM is not traffic
    assert s.queued is None  # no pending gauge on the page: unknown, not 0
    [cluster] = s.backends
    assert (cluster["healthy"], cluster["state"]) == (False, "0/2 healthy")


def test_nginx_stub_status_page():
    s = one(page("nginx_stub_status.txt"))
    assert (s.ok, s.dialect) == (True, "nginx")
    assert s.in_flight == 6 + 179 - 1  # Reading + Writing, less this status request; Waiting is idle keep-alive
    assert s.queued is None and s.backends == []
    assert s.series["stub_status.waiting"] == 106 and s.series["stub_status.active"] == 291
    assert s.series["stub_status.dropped"] == 8  # accepts - handled: worker_connections was hit


def test_nginx_exporter_page_matches_stub_status():
    s = one(page("nginx_exporter.txt"))
    assert (s.ok, s.dialect, s.in_flight) == (True, "nginx", 184)
    assert s.series["nginx_connections_waiting"] == 106


@pytest.mark.parametrize("text, up", [
    ("# TYPE nginx_up gauge\nnginx_up 0\n", "0"),
    ('nginx_up 1\nnginx_scrape_errors_total{type="http"} 3\n', "1"),
])
def test_nginx_exporter_that_cannot_read_nginx_is_a_failed_read(text, up):
    s = one(text)
    assert not s.ok and s.dialect == "nginx" and s.in_flight is None
    assert f"nginx_up {up}" in s.error and "stub_status" in s.error


def test_nginx_plus_exporter_upstream_peers():
    s = one(page("nginx_plus_exporter.txt"))
    assert (s.ok, s.dialect, s.in_flight) == (True, "nginx-plus", 9)
    assert [(b["name"], b["in_flight"], b["healthy"], b["state"], b["labels"]["upstream"]) for b in s.backends] == [
        ("10.0.0.5:8000", 5, True, "up", "vllm"), ("10.0.0.6:8000", 3, False, "draining", "vllm"),
        ("10.0.0.7:8000", 0, False, "unhealthy", "vllm")]
    assert "nginxplus_upstream_server_state" not in s.series  # an enum is not summed


def test_caddy_prefers_the_reverse_proxy_handler():
    s = one(page("caddy.txt"))
    assert (s.ok, s.dialect) == (True, "caddy")
    assert s.in_flight == 3  # not 1 + 3 + 4: the subroute counts the same requests again
    assert [(b["name"], b["kind"], b["healthy"]) for b in s.backends] == [
        ("10.0.0.5:8000", "upstream", True), ("10.0.0.6:8000", "upstream", False)]


def test_caddy_without_reverse_proxy_takes_the_largest_handler_and_not_its_own_scrape():
    text = """\
caddy_http_requests_in_flight{handler="subroute",server="srv0"} 2
caddy_http_requests_in_flight{handler="file_server",server="srv0"} 1
caddy_http_requests_in_flight{handler="metrics",server="srv0"} 1
caddy_http_requests_in_flight{handler="static_response",server="srv1"} 1
"""
    s = one(text)
    assert (s.dialect, s.in_flight, s.backends) == ("caddy", 3, [])


def test_traefik_v2():
    s = one(page("traefik_v2.txt"))
    assert (s.ok, s.dialect) == (True, "traefik")
    assert s.in_flight == 7  # web 5 + websecure 2; the internal `traefik` entrypoint is this scrape
    services = [b for b in s.backends if b["kind"] == "service"]
    servers = [b for b in s.backends if b["kind"] == "server"]
    assert [(b["name"], b["in_flight"]) for b in services] == [("sglang@docker", 1), ("vllm@file", 6)]
    assert {(b["name"], b["healthy"], b["labels"]["service"]) for b in servers} == {
        ("http://10.0.0.5:8000", True, "vllm@file"), ("http://10.0.0.6:8000", False, "vllm@file"),
        ("http://172.17.0.3:30000", True, "sglang@docker")}


def test_traefik_v3_connections_are_not_requests():
    s = one(page("traefik_v3.txt"))
    assert (s.ok, s.dialect) == (True, "traefik")
    assert s.in_flight is None  # TCP connections, idle keep-alive included: not invented into requests
    assert s.series["traefik_open_connections"] == 13
    assert [b["healthy"] for b in s.backends] == [True, True]


def test_litellm():
    s = one(page("litellm.txt"))
    assert (s.ok, s.dialect) == (True, "litellm")
    assert s.in_flight == 3  # 4 less this scrape, which the ASGI middleware counts too
    assert [(b["name"], b["healthy"], b["state"]) for b in s.backends] == [
        ("http://10.0.0.5:8000/v1", True, "healthy"), ("http://10.0.0.6:8000/v1", False, "complete_outage"),
        ("http://10.0.0.7:8000/v1", False, "partial_outage")]
    assert s.backends[0]["labels"] == {"api_base": "http://10.0.0.5:8000/v1", "api_provider": "hosted_vllm",
                                       "litellm_model_name": "hosted_vllm/Qwen/Qwen2.5-7B-Instruct",
                                       "model_id": "3f2a9c0d"}
    assert s.series["litellm_proxy_total_requests_metric_total"] == 42


def test_litellm_idle_page_reads_zero_not_minus_one():
    s = one("litellm_in_flight_requests 1.0\n")
    assert (s.dialect, s.in_flight) == ("litellm", 0)


def test_litellm_without_license_says_so():
    s = one("# TYPE litellm_not_a_premium_user_metric counter\nlitellm_not_a_premium_user_metric_total 1.0\n")
    assert not s.ok and s.dialect == "litellm" and "Enterprise" in s.error


def test_gie_endpoint_picker():
    s = one(page("gie_epp.txt"))
    assert (s.ok, s.dialect) == (True, "gie-epp")
    assert s.in_flight == 8  # running requests over both objectives
    assert s.queued == 4  # the EPP's own flow-control queue
    assert s.kv_usage == 0.42
    assert s.labels == {"name": "vllm-llama3-8b"}
    assert [(b["name"], b["kind"], b["queued"], b["labels"]) for b in s.backends] == [
        ("vllm-llama3-8b-7d9c5f-2xkqp", "pod", 3, {"pool": "vllm-llama3-8b"}),
        ("vllm-llama3-8b-7d9c5f-9hbzt", "pod", 0, {"pool": "vllm-llama3-8b"})]
    assert s.series["inference_pool_ready_pods"] == 2


def test_gie_v1_0_names_and_llm_d_router_names():
    v10 = one('inference_model_running_requests{model_name="m1"} 1\ninference_model_running_requests{model_name="m2"} 1\n'
              'inference_pool_average_kv_cache_utilization{name="p1"} NaN\n')
    assert (v10.dialect, v10.in_flight, v10.queued, v10.kv_usage) == ("gie-epp", 2, None, None)
    llmd = one("""\
llm_d_router_epp_running_requests{fairness_id="tenant-x",model_name="m1",priority="10",target_model_name="t1"} 3
llm_d_router_epp_per_endpoint_queue_size{model_server_endpoint="pod-a",name="pool"} 2
llm_d_router_epp_average_kv_cache_utilization{name="pool"} 0.7
llm_d_epp_inflight_requests{endpoint_name="pod-a",namespace="ns",producer_name="inflight"} 3
""")
    assert (llmd.dialect, llmd.in_flight, llmd.kv_usage) == ("gie-epp", 3, 0.7)
    assert [(b["name"], b["in_flight"], b["queued"]) for b in llmd.backends] == [("pod-a", 3, 2)]


# --- detection order and roles --------------------------------------------------------------------


@pytest.mark.parametrize("gateway, dialect", [
    ("envoy_stats.txt", "envoy"), ("haproxy_2.6.txt", "haproxy"), ("nginx_exporter.txt", "nginx"),
    ("caddy.txt", "caddy"), ("traefik_v2.txt", "traefik"), ("litellm.txt", "litellm"), ("gie_epp.txt", "gie-epp"),
])
@pytest.mark.parametrize("engine", [VLLM_V1, SGLANG_CURRENT, ROUTER_SMG])
def test_a_gateway_page_with_engine_series_is_still_the_gateway(gateway, dialect, engine):
    # e.g. an Istio sidecar merging the app's /metrics into Envoy's: the hop is read as the gateway.
    for text in (page(gateway) + engine, engine + page(gateway)):
        s = one(text)
        assert s.dialect == dialect
        assert s.running is None and s.gen_tokens_total is None and s.workers == []  # no engine number leaks in
        assert not s.is_engine_page


def test_router_before_engines_still_holds():
    assert one(ROUTER_SMG + VLLM_V1).dialect == "sglang-router"


def test_page_is_engines_flags_an_engine_page_behind_a_proxy_hop():
    engine = one(VLLM_V1)  # what a proxy hop's /metrics returns when the proxy forwards every path
    assert engine.is_engine_page
    assert one(SGLANG_CURRENT).is_engine_page
    assert not one(page("envoy_stats.txt")).is_engine_page
    assert not one(ROUTER_SMG).is_engine_page
    assert not failed("connect: connection refused", dialect="vllm").is_engine_page
    assert not Snapshot(ok=True, dialect="unknown").is_engine_page


def test_every_dialect_has_a_role_and_reads_its_keys():
    for dialect in DIALECTS:
        assert ROLE_OF_DIALECT.get(dialect.name) in ("engine", "router", "proxy"), dialect.name
        assert set(dialect.keys) <= set(dialect.reads), dialect.name
    assert {"sglang", "vllm", "tgi", "llamacpp"} == ENGINE_DIALECTS
    assert ROLE_OF_DIALECT.get("unknown") is None
    assert all(re.fullmatch(r"[A-Za-z0-9_:]+", name) for name in READS)  # the fleet query's regex needs this


def test_unknown_gateway_page_invents_nothing():
    s = one("envoy_server_live 1\nenvoy_server_uptime 3600\n")
    assert not s.ok and s.dialect == "unknown" and "none this probe reads" in s.error
    assert (s.in_flight, s.queued, s.backends) == (None, None, [])
    s = one("caddy_admin_http_requests_total{code=\"200\",handler=\"metrics\",method=\"GET\",path=\"/metrics\"} 4\n")
    assert not s.ok and "metrics` enabled" in s.error
    s = one('gen_ai_client_token_usage_sum{gen_ai_token_type="output"} 120\n')
    assert not s.ok and "in-flight" in s.error and "/stats/prometheus" in s.error


# --- LiteLLM /health/backlog (JSON) -------------------------------------------------------------


def test_litellm_health_backlog_json():
    s = one('{"in_flight_requests":1,"admitted_requests":0,"queued_requests":0,"rejected_requests":0}')
    assert (s.ok, s.dialect, s.in_flight, s.queued) == (True, "litellm", 0, 0)  # the 1 is this request
    s = one('{"in_flight_requests": 6, "queued_requests": 2}')
    assert (s.in_flight, s.queued, s.series["health_backlog.in_flight_requests"]) == (5, 2, 6)


@pytest.mark.parametrize("text, words", [
    ('{"in_flight_requests": "many"}', "not a number"),
    ('{"in_flight_requests": 1e999}', "not a number"),
    ('{"in_flight_requests": ' + "9" * 400 + "}", "not a number"),
    ('{"detail": "Not Found"}', "got JSON"),
    ('{"in_flight_requests": [', "got JSON"),
])
def test_bad_backlog_json(text, words):
    s = one(text)
    assert not s.ok and words in s.error and s.in_flight is None


# --- nginx stub_status, damaged -----------------------------------------------------------------


def test_stub_status_variants():
    crlf = page("nginx_stub_status.txt").replace("\n", "\r\n")
    assert one(crlf).in_flight == 184
    tight = "Active connections: 1\nserver accepts handled requests\n1 1 1\nReading: 0 Writing: 1 Waiting: 0"
    s = one(tight)
    assert (s.ok, s.in_flight, s.series["stub_status.dropped"]) == (True, 0, 0)  # idle: only this request


@pytest.mark.parametrize("text, words", [
    ("Active connections: 3\n", "1 non-empty lines"),
    ("Active connections: x\nserver accepts handled requests\n 1 1 1\nReading: 0 Writing: 1 Waiting: 0\n", "line 1"),
    ("Active connections: 1\nserver accepts handled\n 1 1 1\nReading: 0 Writing: 1 Waiting: 0\n", "line 2"),
    ("Active connections: 1\nserver accepts handled requests\n 1 1\nReading: 0 Writing: 1 Waiting: 0\n", "line 3"),
    ("Active connections: 1\nserver accepts handled requests\n 1 1 1\nReading: 0 Writing: 1\n", "line 4"),
    ("Active connections: 1\nserver accepts handled requests\n 1 1 1\nReading: 0 Writing: -1 Waiting: 0\n", "line 4"),
    ("Active connections: 1\nserver accepts handled requests\n 1 1 1\nReading: 0 Writing: 1 Waiting: 0\n<html>\n",
     "5 non-empty lines"),
    ("Active connections: 1\nserver accepts handled requests\n " + "9" * 40 + " 1 1\nReading: 0 Writing: 1 Waiting: 0",
     "out of range"),
    ("Active connections: " + "1\n" * 40000, "not an nginx stub_status page"),
])
def test_malformed_stub_status_is_a_failed_read_with_one_line(text, words):
    s = one(text)
    assert not s.ok and s.dialect == "nginx" and s.in_flight is None
    assert "stub_status" in s.error and words in s.error, s.error


# --- the Snapshot contract ----------------------------------------------------------------------


def test_backends_survive_the_run_log_and_merge():
    s = one(page("haproxy_2.6.txt"))
    assert msgspec.json.decode(msgspec.json.encode(s), type=Snapshot) == s
    d = s.to_dict()
    assert set(d["backends"][0]) == {"name", "kind", "in_flight", "queued", "healthy", "state", "labels"}
    merged = merge([s, one(page("envoy_stats.txt"))], hop="gw", url="u")
    assert merged.in_flight == 12 and merged.queued == 5 and len(merged.backends) == 6
    assert one(VLLM_V1).backends == []  # engines have none


def test_idle_epp_is_recognized_without_inventing_zeroes():
    s = one('inference_extension_info{build_ref="v1.5.0",commit="84436a96"} 1\ninference_pool_ready_pods{name="p"} 0\n')
    assert (s.ok, s.dialect, s.in_flight, s.queued, s.backends) == (True, "gie-epp", None, None, [])
