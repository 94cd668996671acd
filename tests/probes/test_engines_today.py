"""Engines as they are today: SGLang 0.5.23 and vLLM 0.33 names, labels and endpoints, on pages
written from their collectors and on the simulated engine that speaks them (127.0.0.1 only)."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from probes import parse_metrics
from probes.staleness import stale_gauges
from repro.core.snapshot import Snapshot
from repro.sim import SimConfig, serve_in_thread
from tests.support import waiting

pytestmark = pytest.mark.timeout(60)

CHAT = {"model": "sim-model", "messages": [{"role": "user", "content": "hello there"}]}


def one(text: str) -> Snapshot:
    [snapshot] = parse_metrics(text, hop="h", url="http://x/metrics")
    return snapshot


def page(sim) -> str:
    return httpx.get(sim.metrics_url, timeout=5).text


def samples(text: str) -> list:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def post_in_background(client: httpx.Client, url: str, body: dict, out: list) -> threading.Thread:
    """A request on its own thread; closing the client ends it (the error is the expected end)."""
    def run() -> None:
        try:
            out.append(client.post(url, json=body))
        except httpx.HTTPError as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def wait_for(predicate, timeout=5.0, what="condition"):
    return waiting.wait_for(predicate, timeout, what, every=0.02)


# --- pages as SGLang 0.5.23 writes them (python/sglang/srt/observability/metrics_collector.py) ------

SCHED = 'engine_type="{role}",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"'

UNIFIED = SCHED.format(role="unified")
PRIORITY_PAGE = (
    f'sglang:num_running_reqs{{{UNIFIED},priority=""}} 5\n'
    f'sglang:num_running_reqs{{{UNIFIED},priority="0"}} 3\n'
    f'sglang:num_running_reqs{{{UNIFIED},priority="10"}} 2\n'
    f'sglang:num_queue_reqs{{{UNIFIED},priority=""}} 4\n'
    f'sglang:num_queue_reqs{{{UNIFIED},priority="0"}} 4\n'
    f'sglang:token_usage{{{UNIFIED},priority=""}} 0.3\n'
    'sglang:inter_token_latency_seconds_count{engine_type="unified",model_name="m"} 10\n'
)


def test_priority_scheduling_keeps_the_total_row_only():
    s = one(PRIORITY_PAGE)
    assert (s.running, s.queued) == (5, 4)  # not 10 and 8
    assert s.series["sglang:num_running_reqs"] == 5


def test_priority_rows_without_a_total_are_still_summed():
    s = one('sglang:num_running_reqs{priority="0"} 3\nsglang:num_running_reqs{priority="1"} 2\n')
    assert s.running == 5


def test_prefill_bootstrap_queue_under_either_name_counts_as_queued():
    prefill = SCHED.format(role="prefill")
    base = f"sglang:num_running_reqs{{{prefill}}} 1\nsglang:num_queue_reqs{{{prefill}}} 1\n"
    today = one(base + f"sglang:num_prefill_bootstrap_queue_reqs{{{prefill}}} 4\n"
                f"sglang:num_prefill_inflight_queue_reqs{{{prefill}}} 2\n")
    assert today.queued == 7 and today.series["sglang:num_prefill_bootstrap_queue_reqs"] == 4
    older = one(base + f"sglang:num_prefill_prealloc_queue_reqs{{{prefill}}} 4\n")
    assert older.queued == 5
    # Both names on one page (a transitional build): one queue, counted once, today's name first.
    both = one(base + f"sglang:num_prefill_bootstrap_queue_reqs{{{prefill}}} 4\n"
               f"sglang:num_prefill_prealloc_queue_reqs{{{prefill}}} 4\n")
    assert both.queued == 5


def test_priority_rows_on_pd_queues_are_not_doubled():
    decode = SCHED.format(role="decode")
    s = one(f'sglang:num_running_reqs{{{decode},priority=""}} 0\n'
            f'sglang:num_decode_transfer_queue_reqs{{{decode},priority=""}} 3\n'
            f'sglang:num_decode_transfer_queue_reqs{{{decode},priority="0"}} 3\n')
    assert s.queued == 3


def test_realtime_decode_tokens_are_the_generated_token_counter():
    unified = SCHED.format(role="unified")
    text = (f"sglang:num_running_reqs{{{unified}}} 2\n"
            f'sglang:realtime_tokens_total{{{unified},mode="prefill_compute"}} 900\n'
            f'sglang:realtime_tokens_total{{{unified},mode="decode"}} 350\n'
            'sglang:generation_tokens_total{engine_type="unified",is_streaming="true",model_name="m"} 100\n'
            'sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="m"} 20\n')
    s = one(text)
    assert s.gen_tokens_total == 350  # live, not the 120 counted at request end
    assert s.series["sglang:generation_tokens_total"] == 120  # both is_streaming rows
    assert s.series["sglang:realtime_tokens_total{mode=prefill_compute}"] == 900
    # Prefill ran but no decode step yet: the decode row does not exist, and nothing was decoded.
    fresh = one(f"sglang:num_running_reqs{{{unified}}} 1\n"
                f'sglang:realtime_tokens_total{{{unified},mode="prefill_compute"}} 40\n')
    assert fresh.gen_tokens_total == 0
    # Before realtime tokens existed: the finish-time counter, as before.
    older = one('sglang:num_running_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 1\n'
                'sglang:generation_tokens_total{model_name="m"} 77\n')
    assert older.gen_tokens_total == 77


def test_a_prefill_worker_keeps_the_finish_time_counter():
    prefill = SCHED.format(role="prefill")
    s = one(f"sglang:num_running_reqs{{{prefill}}} 3\n"
            f'sglang:realtime_tokens_total{{{prefill},mode="prefill_compute"}} 5000\n'
            'sglang:generation_tokens_total{engine_type="prefill",is_streaming="true",model_name="m"} 12\n')
    assert s.gen_tokens_total == 12 and s.itl_count is None


def test_router_polls_and_readiness_are_not_user_requests():
    s = one('sglang:num_running_reqs{tp_rank="0"} 0\n'
            'sglang:http_requests_active{endpoint="/v1/loads",method="GET"} 1\n'
            'sglang:http_requests_active{endpoint="/ready",method="GET"} 1\n'
            'sglang:http_requests_active{endpoint="/v1/models/{model:path}",method="GET"} 1\n'
            'sglang:http_requests_active{endpoint="/v1/completions",method="POST"} 2\n')
    assert s.in_flight == 2


def prefill_history(prefilled: list[float]) -> list[dict]:
    return [{"ok": True, "dialect": "sglang", "running": 2, "queued": 0, "itl_count": None, "gen_tokens_total": 5,
             "in_flight": None, "series": {"sglang:num_running_reqs": 2,
                                           "sglang:realtime_tokens_total{mode=prefill_compute}": value}}
            for value in prefilled]


def test_a_prefill_worker_that_prefills_is_not_stale():
    # A 0.5.23 prefill worker has no ITL and never decodes: prefill tokens are its only progress.
    assert stale_gauges(prefill_history([0, 100, 200])) == []
    assert stale_gauges(prefill_history([100, 100, 100])) == ["sglang:num_running_reqs"]


# --- the simulated engine speaks today's dialect ------------------------------------------------------


@pytest.mark.network
def test_sim_sglang_labels_realtime_and_http_in_flight():
    with serve_in_thread(SimConfig(itl=0.01)) as sim:
        r = httpx.post(sim.url + "/v1/chat/completions", json={**CHAT, "max_tokens": 5, "stream": True}, timeout=5)
        assert r.status_code == 200
        httpx.post(sim.url + "/v1/chat/completions", json={**CHAT, "max_tokens": 3}, timeout=5)
        text = page(sim)
        by_name: dict[str, list] = {}
        for sample in samples(text):
            by_name.setdefault(sample.name, []).append(sample)
        [running] = by_name["sglang:num_running_reqs"]
        assert running.labels == {"model_name": "sim-model", "engine_type": "unified", "tp_rank": "0",
                                  "pp_rank": "0", "moe_ep_rank": "0"}
        gen = {s.labels["is_streaming"]: s.value for s in by_name["sglang:generation_tokens_total"]}
        assert gen == {"true": 5, "false": 3}
        assert {s.labels["is_streaming"] for s in by_name["sglang:time_to_first_token_seconds_count"]} == {"true", "false"}
        assert all(s.labels["engine_type"] == "unified" for s in by_name["sglang:prompt_tokens_total"])
        assert "is_streaming" not in by_name["sglang:inter_token_latency_seconds_count"][0].labels
        modes = {s.labels["mode"]: s.value for s in by_name["sglang:realtime_tokens_total"]}
        assert modes["decode"] == (5 - 1) + (3 - 1)  # every token but each request's first
        active = {(s.labels["endpoint"], s.labels["method"]): s.value for s in by_name["sglang:http_requests_active"]}
        assert active[("/metrics", "GET")] == 1  # this scrape
        assert active[("/v1/chat/completions", "POST")] == 0
        s = one(text)
        assert s.gen_tokens_total == 6 and s.in_flight == 0 and s.itl_count == 6


@pytest.mark.network
def test_sim_http_in_flight_sees_a_request_the_scheduler_never_got():
    with serve_in_thread(SimConfig(fault="lose")) as sim:
        client = httpx.Client(timeout=httpx.Timeout(5, read=20))
        result: list = []
        worker = post_in_background(client, sim.url + "/v1/chat/completions", {**CHAT, "stream": True}, result)
        try:
            wait_for(lambda: sim.state()["parked"] == 1, what="parked request")
            s = one(page(sim))
            assert (s.running, s.queued, s.in_flight) == (0, 0, 1)  # sglang#33858: the HTTP layer holds it
        finally:
            httpx.request("DELETE", sim.url + "/sim/fault", timeout=5)
            worker.join(10)
            client.close()
        assert result and result[0].status_code == 200


@pytest.mark.network
def test_sim_prefill_worker_bootstrap_queue_and_no_latency_series():
    with serve_in_thread(SimConfig(role="prefill")) as sim:
        httpx.post(sim.url + "/v1/chat/completions", json={**CHAT, "max_tokens": 8, "stream": True}, timeout=5)
        text = page(sim)
        names = {s.name for s in samples(text)}
        assert "sglang:num_prefill_bootstrap_queue_reqs" in names
        assert "sglang:num_prefill_prealloc_queue_reqs" not in names
        assert not names & {"sglang:inter_token_latency_seconds_count", "sglang:time_to_first_token_seconds_count"}
        s = one(text)
        assert s.itl_count is None and s.series["sglang:realtime_tokens_total{mode=prefill_compute}"] > 0
        assert s.gen_tokens_total == 1  # the prefill worker's one token, counted when it finished


@pytest.mark.network
def test_sim_older_release_quirk_keeps_the_old_names_and_endpoints():
    with serve_in_thread(SimConfig(role="prefill", quirks=frozenset({"decode-log-interval", "older-release"}))) as sim:
        text = page(sim)
        names = {s.name for s in samples(text)}
        assert "sglang:num_prefill_prealloc_queue_reqs" in names
        assert not names & {"sglang:num_prefill_bootstrap_queue_reqs", "sglang:realtime_tokens_total",
                            "sglang:http_requests_active"}
        [running] = [s for s in samples(text) if s.name == "sglang:num_running_reqs"]
        assert "moe_ep_rank" not in running.labels
        assert httpx.get(sim.url + "/get_load", timeout=5).json()[0]["num_reqs"] == 0
        assert httpx.get(sim.url + "/v1/loads", timeout=5).status_code == 404
        assert one(text).in_flight is None


@pytest.mark.network
def test_sim_priority_quirk_doubles_naive_sums_but_not_the_dialect():
    with serve_in_thread(SimConfig(itl=0.01, quirks=frozenset({"priority-scheduling"}))) as sim:
        client = httpx.Client(timeout=10)
        worker = post_in_background(client, sim.url + "/v1/chat/completions", {**CHAT, "max_tokens": 150}, [])
        try:
            wait_for(lambda: one(page(sim)).running == 1, what="running 1")
            text = page(sim)
            naive = sum(s.value for s in samples(text) if s.name == "sglang:num_running_reqs")
            assert naive == 2 and one(text).running == 1
        finally:
            worker.join(10)
            client.close()


@pytest.mark.network
def test_sim_v1_loads_matches_sglang_shape():
    with serve_in_thread(SimConfig()) as sim:
        body = httpx.get(sim.url + "/v1/loads?include=core,disagg,queues,memory", timeout=5).json()
        assert {"timestamp", "version", "loads"} <= set(body)
        [load] = body["loads"]
        assert load["dp_rank"] == 0 and load["num_running_reqs"] == 0 and load["num_waiting_reqs"] == 0
        assert load["disaggregation"]["mode"] == "null"
        assert httpx.get(sim.url + "/ready", timeout=5).status_code == 200
        assert httpx.get(sim.url + "/v1/models/sim-model", timeout=5).json()["id"] == "sim-model"
        assert httpx.get(sim.url + "/version", timeout=5).status_code == 404  # SGLang has no /version


@pytest.mark.network
def test_sim_completions_stream_text_chunks_not_chat_deltas():
    with serve_in_thread(SimConfig()) as sim:
        r = httpx.post(sim.url + "/v1/completions", timeout=5, json={
            "model": "sim-model", "prompt": "hello", "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True}})
        events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert all(c["object"] == "text_completion" for c in chunks)
        texts = [c["choices"][0]["text"] for c in chunks if c["choices"]]
        assert len([t for t in texts if t]) == 4 and all("delta" not in c["choices"][0] for c in chunks if c["choices"])
        assert chunks[-2]["choices"][0]["finish_reason"] == "length" and chunks[-1]["usage"]["completion_tokens"] == 4
        whole = httpx.post(sim.url + "/v1/completions", json={"model": "sim-model", "prompt": "hello", "max_tokens": 4},
                           timeout=5).json()
        assert whole["object"] == "text_completion" and whole["choices"][0]["text"] == "".join(texts)


@pytest.mark.network
def test_sim_native_generate_streams_cumulative_text():
    with serve_in_thread(SimConfig()) as sim:
        r = httpx.post(sim.url + "/generate", timeout=5, json={
            "text": "hello", "sampling_params": {"max_new_tokens": 3}, "stream": True})
        events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        outs = [json.loads(e) for e in events[:-1]]
        assert [len(o["text"].split()) for o in outs] == [1, 2, 3]
        assert outs[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 3}


@pytest.mark.network
def test_sim_vllm_version_and_load():
    with serve_in_thread(SimConfig(dialect="vllm", fault="hang")) as sim:
        assert httpx.get(sim.url + "/version", timeout=5).json()["version"].startswith("0.33.0")
        assert httpx.get(sim.url + "/load", timeout=5).json() == {"server_load": 0}
        client = httpx.Client(timeout=httpx.Timeout(5, read=20))
        worker = post_in_background(client, sim.url + "/v1/chat/completions", CHAT, [])
        try:
            wait_for(lambda: httpx.get(sim.url + "/load", timeout=5).json()["server_load"] == 1, what="load 1")
        finally:
            client.close()
            worker.join(10)
        assert httpx.get(sim.url + "/v1/loads", timeout=5).status_code == 404
