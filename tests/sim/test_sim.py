"""The simulated engine: real endpoints, metric dialects with their quirks, and every fault moving
the metrics it should (checked over real sockets on 127.0.0.1)."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from repro.core.faultspec import FaultSpecError
from repro.sim import SimConfig, parse_sim_fault, serve_in_thread, start_sim_process
from tests.support import waiting

pytestmark = pytest.mark.network

CHAT = {"model": "sim-model", "messages": [{"role": "user", "content": "hello there"}]}


def metrics(sim) -> dict[str, float]:
    text = httpx.get(sim.metrics_url, timeout=5).text
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def wait_for(predicate, timeout=5.0, what="condition"):
    return waiting.wait_for(predicate, timeout, what, every=0.02)


class Streamer:
    """A streamed request on its own thread, so the test can watch metrics while it is open."""

    def __init__(self, sim, max_tokens=16, read_timeout=10.0):
        self.events: list[str] = []
        self.status = None
        self.error = None
        self.client = httpx.Client(timeout=httpx.Timeout(5, read=read_timeout))
        self.thread = threading.Thread(target=self._run, args=(sim, max_tokens), daemon=True)
        self.thread.start()

    def _run(self, sim, max_tokens):
        try:
            with self.client.stream("POST", sim.url + "/v1/chat/completions",
                                    json={**CHAT, "stream": True, "max_tokens": max_tokens}) as r:
                self.status = r.status_code
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        self.events.append(line[6:])
        except Exception as exc:  # the test inspects it
            self.error = exc

    def close(self):
        self.client.close()
        self.thread.join(5)


def test_streamed_chat_has_role_tokens_usage_and_done():
    with serve_in_thread(SimConfig(max_tokens_default=5)) as sim:
        body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
        r = httpx.post(sim.url + "/v1/chat/completions", json=body, timeout=5)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        contents = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
        assert len([c for c in contents if c]) == 5
        assert chunks[-1]["usage"]["completion_tokens"] == 5
        # Deterministic: the same prompt gets the same reply.
        again = httpx.post(sim.url + "/v1/chat/completions", json=body, timeout=5)
        assert [line for line in again.text.splitlines() if '"content"' in line][0].split('"delta"')[1] == \
            [line for line in r.text.splitlines() if '"content"' in line][0].split('"delta"')[1]


def test_non_streamed_chat_and_models_and_worker_endpoints():
    with serve_in_thread(SimConfig()) as sim:
        r = httpx.post(sim.url + "/v1/chat/completions", json={**CHAT, "max_tokens": 3}, timeout=5).json()
        assert r["usage"]["completion_tokens"] == 3 and len(r["choices"][0]["message"]["content"].split()) == 3
        assert httpx.get(sim.url + "/v1/models", timeout=5).json()["data"][0]["id"] == "sim-model"
        info = httpx.get(sim.url + "/server_info", timeout=5).json()
        assert (json.loads(open(info["model_path"] + "/tokenizer.json").read())["model"]["type"]) == "WordLevel"
        assert httpx.get(sim.url + "/get_model_info", timeout=5).json()["is_generation"] is True
        loads = httpx.get(sim.url + "/v1/loads", timeout=5).json()  # SGLang 0.5.23: /get_load is gone
        assert loads["loads"][0]["num_running_reqs"] == 0 and loads["loads"][0]["dp_rank"] == 0
        assert httpx.get(sim.url + "/get_load", timeout=5).status_code == 404
        assert httpx.get(sim.url + "/health_generate", timeout=10).status_code == 200
        bad = httpx.post(sim.url + "/v1/chat/completions", content=b"{not json", timeout=5)
        assert bad.status_code == 400 and "not JSON" in bad.json()["message"]


def test_vllm_dialect_names_labels_and_no_sglang_info_endpoints():
    with serve_in_thread(SimConfig(dialect="vllm")) as sim:
        httpx.post(sim.url + "/v1/chat/completions", json={**CHAT, "max_tokens": 4}, timeout=5)
        text = httpx.get(sim.metrics_url, timeout=5).text
        assert 'vllm:num_requests_running{engine="0",model_name="sim-model"}' in text
        m = metrics(sim)
        assert m["vllm:generation_tokens_total"] == 4 and m["vllm:request_success_total"] == 1
        assert "vllm:kv_cache_usage_perc" in m and "vllm:num_requests_waiting" in m
        assert httpx.get(sim.url + "/server_info", timeout=5).status_code == 404


def test_sglang_token_counters_move_only_at_finish_but_itl_count_moves_per_token():
    with serve_in_thread(SimConfig(itl=0.01)) as sim:
        s = Streamer(sim, max_tokens=200)
        wait_for(lambda: len(s.events) > 20, what="20 events")
        m = metrics(sim)
        # The quirk: counted when the request finishes (a labelled counter: no series before that).
        assert m.get("sglang:generation_tokens_total", 0) == 0
        assert m["sglang:inter_token_latency_seconds_count"] >= 20
        assert m["sglang:realtime_tokens_total"] >= 20  # decode tokens move every step (plus prefill tokens)
        assert m["sglang:num_running_reqs"] == 1
        s.close()


def test_sglang_gauges_refresh_only_on_prefill_or_every_40_steps():
    with serve_in_thread(SimConfig(itl=0.005, max_running=4)) as sim:
        first = Streamer(sim, max_tokens=400)
        wait_for(lambda: metrics(sim)["sglang:num_running_reqs"] == 1, what="running 1")
        short = Streamer(sim, max_tokens=3)
        short.thread.join(5)
        # The short request finished, but no prefill happened since and fewer than 40 steps may
        # have passed: the published gauge may still say 2 while the truth is 1.
        assert sim.state()["running"] == 1
        wait_for(lambda: metrics(sim)["sglang:num_running_reqs"] == 1, timeout=3, what="the 40-step refresh")
        first.close()


def test_hang_keeps_requests_running_without_tokens_and_health_still_200():
    with serve_in_thread(SimConfig(fault="hang,after=1")) as sim:
        ok = httpx.post(sim.url + "/v1/chat/completions", json={**CHAT, "max_tokens": 3}, timeout=5)
        assert ok.status_code == 200  # the first request passes (after=1)
        s = Streamer(sim, max_tokens=5)
        wait_for(lambda: metrics(sim)["sglang:num_running_reqs"] == 1, what="running 1")
        before = metrics(sim)["sglang:inter_token_latency_seconds_count"]
        time.sleep(0.3)
        assert metrics(sim)["sglang:inter_token_latency_seconds_count"] == before
        assert s.events == [] and s.status == 200  # headers sent, no tokens: busy and stuck
        assert httpx.get(sim.url + "/health", timeout=5).status_code == 200
        s.close()


def test_lose_accepts_and_never_answers_while_engine_idle_then_disarm_releases():
    with serve_in_thread(SimConfig(fault="lose")) as sim:
        s = Streamer(sim, read_timeout=20)
        wait_for(lambda: sim.state()["parked"] == 1, what="parked request")
        m = metrics(sim)
        assert m["sglang:num_running_reqs"] == 0 and m["sglang:num_queue_reqs"] == 0
        assert s.status is None  # not even headers
        assert httpx.get(sim.url + "/health", timeout=5).status_code == 200
        httpx.request("DELETE", sim.url + "/sim/fault", timeout=5)
        s.thread.join(5)  # released: the held request now completes
        assert s.status == 200 and s.events[-1] == "[DONE]"
        s.close()


def test_saturate_grows_the_queue_and_slow_stretches_itl():
    with serve_in_thread(SimConfig(fault="saturate=1")) as sim:
        streams = [Streamer(sim, max_tokens=100) for _ in range(3)]
        wait_for(lambda: metrics(sim)["sglang:num_queue_reqs"] == 2, what="queue 2")
        assert metrics(sim)["sglang:num_running_reqs"] == 1
        for s in streams:
            s.close()
    with serve_in_thread(SimConfig(itl=0.002, fault="slow=10")) as sim:
        httpx.post(sim.url + "/v1/chat/completions", json={**CHAT, "max_tokens": 10}, timeout=5)
        m = metrics(sim)
        assert m["sglang:inter_token_latency_seconds_sum"] / m["sglang:inter_token_latency_seconds_count"] >= 0.015


def test_zombie_keeps_decoding_after_disconnect_and_vllm_gauge_sticks_after_abort():
    with serve_in_thread(SimConfig(itl=0.01, fault="zombie")) as sim:
        s = Streamer(sim, max_tokens=300)
        wait_for(lambda: len(s.events) > 2, what="events")
        s.close()
        time.sleep(0.2)
        assert sim.state()["running"] == 1  # client gone, engine still busy
        a = metrics(sim)["sglang:inter_token_latency_seconds_count"]
        time.sleep(0.2)
        assert metrics(sim)["sglang:inter_token_latency_seconds_count"] > a
    with serve_in_thread(SimConfig(dialect="vllm", itl=0.01, quirks=frozenset({"stuck-after-abort"}))) as sim:
        s = Streamer(sim, max_tokens=300)
        wait_for(lambda: len(s.events) > 2, what="events")
        s.close()
        wait_for(lambda: sim.state()["running"] == 0, what="abort")
        assert metrics(sim)["vllm:num_requests_running"] == 1  # the quirk: aborted, still "running"


def test_crash_stops_listening_and_metrics_down_fails_only_metrics():
    with serve_in_thread(SimConfig(fault="metrics-down")) as sim:
        assert httpx.get(sim.metrics_url, timeout=5).status_code == 503
        assert httpx.post(sim.url + "/v1/chat/completions", json=CHAT, timeout=5).status_code == 200
    with serve_in_thread(SimConfig(fault="crash,after=1")) as sim:
        assert httpx.post(sim.url + "/v1/chat/completions", json=CHAT, timeout=5).status_code == 200
        with pytest.raises(httpx.TransportError):
            httpx.post(sim.url + "/v1/chat/completions", json=CHAT, timeout=5)
        with pytest.raises(httpx.ConnectError):
            httpx.get(sim.url + "/health", timeout=2)


def test_runtime_arm_via_admin_endpoint_and_bad_spec_is_one_line():
    with serve_in_thread(SimConfig()) as sim:
        r = httpx.post(sim.url + "/sim/fault", json={"spec": "hang,after=2"}, timeout=5)
        assert r.json()["fault"] == "hang,after=2" and r.json()["fault_active"] is False
        bad = httpx.post(sim.url + "/sim/fault", json={"spec": "explode"}, timeout=5)
        assert bad.status_code == 400 and "unknown engine fault 'explode'" in bad.json()["message"]
    with pytest.raises(FaultSpecError, match="use one of"):
        parse_sim_fault("hnag")


def test_the_fault_the_banner_names_none_is_lifted_by_that_name():
    # The ready line says "fault none": that word, posted back, lifts a fault as DELETE does.
    with serve_in_thread(SimConfig(fault="none")) as sim:
        assert httpx.get(sim.url + "/sim/state", timeout=5).json()["fault"] is None
        assert httpx.post(sim.url + "/sim/fault", json={"spec": "hang"}, timeout=5).json()["fault"] == "hang"
        lifted = httpx.post(sim.url + "/sim/fault", json={"spec": "none"}, timeout=5)
        assert lifted.status_code == 200 and lifted.json()["fault"] is None
        assert httpx.post(sim.url + "/v1/chat/completions", json=CHAT, timeout=5).status_code == 200


def test_the_ready_banner_says_both_ways_to_lift_a_fault_within_80_columns():
    from repro.sim.server import READY_LINE, ready_banner

    banner = ready_banner("http://127.0.0.1:30000", SimConfig(fault="hang,after=3"))
    assert banner.startswith(READY_LINE + "http://127.0.0.1:30000 ")  # what SimProcess reads
    assert '{"spec": "none"}' in banner and "DELETE /sim/fault" in banner and "hang,after=3" in banner
    assert max(len(line) for line in banner.splitlines()) <= 80


def test_sim_process_starts_and_stops():
    sim = start_sim_process(SimConfig(dialect="vllm"))
    try:
        assert httpx.get(sim.url + "/health", timeout=5).status_code == 200
    finally:
        sim.stop()
    assert sim.process.poll() is not None


def test_tool_call_share_is_validated_and_reaches_the_sim_process():
    with pytest.raises(ValueError, match="--tool-call-share must be between 0 and 1, got 1.5"):
        SimConfig(tool_call_share=1.5).validate()
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]

    def finishes(sim) -> list[str]:
        return [httpx.post(sim.url + "/v1/chat/completions", timeout=5, json={
            **CHAT, "messages": [{"role": "user", "content": f"task {i}"}], "tools": tools}).json()
            ["choices"][0]["finish_reason"] for i in range(10)]

    with start_sim_process(SimConfig(tool_call_share=1.0)) as sim:  # through to_args and `repro sim`
        assert finishes(sim) == ["tool_calls"] * 10
    with serve_in_thread(SimConfig(tool_call_share=0.0)) as sim:
        assert finishes(sim) == ["length"] * 10
