"""Each HTTP fault end to end on 127.0.0.1: httpx client -> fault proxy (real mitmproxy) -> simulated engine.

What the client sees and what the engine shows must match the fault's help line in proxies.spec.HTTP_FAULTS.
Every read has a short deadline; a stall is asserted as "nothing arrived within the deadline".
"""

from __future__ import annotations

import time

import anyio
import httpx
import pytest

from probes.canary import run_canary
from proxies import start_proxy
from repro.core.harness_flows import read_flow_facts
from repro.core.hop import Hop
from repro.sim import SimConfig, serve_in_thread
from tests.support.proxy_chat import BODY, STALL_S, Outcome, chat, client_for, engine_state, metric

pytestmark = pytest.mark.network

# fault_proxy comes from the repro_proxies pytest11 entry point (proxies.pytest_plugin)



@pytest.fixture(scope="module")
def sim():
    with serve_in_thread(SimConfig(ttft=0.02, itl=0.01)) as engine:
        yield engine


def test_pass_through_streams_event_by_event(sim, fault_proxy):
    proxy = fault_proxy(sim.url, None)
    body = {**BODY, "max_tokens": 12}
    with client_for(proxy.url) as client:
        rounds = [chat(client, body=body) for _ in range(3)]
    for out in rounds:
        assert out.status == 200 and out.done, out.error
        # tokens 10 ms apart: streamed, the first arrives long before the last (buffered: all at once)
        assert out.times[-1] - out.times[0] > 0.06
    assert metric(proxy, "repro_proxy_open_flows") == 0
    assert metric(proxy, "repro_proxy_events_forwarded_total") == sum(len(o.events) for o in rounds)


def test_buffer_delivers_everything_at_once(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "buffer")
    with client_for(proxy.url) as client:
        out = chat(client, body={**BODY, "max_tokens": 12})
    assert out.done
    assert out.times[-1] - out.times[0] < 0.03  # TTFT ~ total


def test_wedge_after_two_stalls_round_three_on_the_reused_connection(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "wedge-after=2")
    seen_before = engine_state(sim)["requests_seen"]
    with client_for(proxy.url) as client:
        first, second = chat(client), chat(client)
        assert first.done and second.done
        third = chat(client, read_timeout=STALL_S)
        assert isinstance(third.error, httpx.ReadTimeout) and third.status is None and not third.events
    # the proxy holds it: a fresh connection through the same proxy still gets a reply
    with client_for(proxy.url) as fresh:
        assert chat(fresh).done
    state = engine_state(sim)
    assert state["requests_seen"] - seen_before == 3  # rounds 1, 2 and the fresh probe; never round 3
    assert state["running"] == 0
    flows = proxy.flows()
    held = [r for r in flows if r["event"] == "held"]
    assert len(held) == 1 and held[0]["stage"] == "request"


def test_wedge_held_gauge_while_stalled(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "wedge-after=1")
    with client_for(proxy.url) as client:
        assert chat(client).done
        import threading

        stalled: list[Outcome] = []
        thread = threading.Thread(target=lambda: stalled.append(chat(client, read_timeout=3)))
        thread.start()
        deadline = time.monotonic() + 2
        while metric(proxy, "repro_proxy_held_flows") != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert metric(proxy, "repro_proxy_held_flows") == 1
        assert engine_state(sim)["running"] == 0
        assert proxy.release() == 1  # admin release: the round continues to the engine
        thread.join(5)
    assert stalled[0].done


def test_hold_request_engine_never_sees_it(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "hold-request")
    seen_before = engine_state(sim)["requests_seen"]
    with client_for(proxy.url) as client:
        out = chat(client, read_timeout=STALL_S)
    assert isinstance(out.error, httpx.ReadTimeout) and out.status is None
    assert engine_state(sim)["requests_seen"] == seen_before


def test_hold_response_engine_finished_headers_withheld(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "hold-response")
    finished_before = engine_state(sim)["requests_finished"]
    with client_for(proxy.url) as client:
        out = chat(client, read_timeout=STALL_S)
    assert isinstance(out.error, httpx.ReadTimeout) and out.status is None
    state = engine_state(sim)
    assert state["requests_finished"] == finished_before + 1 and state["running"] == 0


def test_truncate_hold_k_events_then_silence(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "truncate-hold=3")
    with client_for(proxy.url) as client:
        out = chat(client, read_timeout=STALL_S)
    assert out.status == 200 and len(out.events) == 3 and "data: [DONE]" not in out.events
    assert isinstance(out.error, httpx.ReadTimeout)
    assert engine_state(sim)["running"] == 0


def test_hold_eom_everything_but_the_end(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "hold-eom")
    with client_for(proxy.url) as client:
        out = chat(client, read_timeout=STALL_S)
    assert out.events[-1] == "data: [DONE]"  # every event arrived ...
    assert isinstance(out.error, httpx.ReadTimeout)  # ... but a reader waiting for EOF hangs


def test_truncate_reset_k_events_then_close(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "truncate-reset=2")
    with client_for(proxy.url) as client:
        out = chat(client)
    assert len(out.events) == 2
    assert isinstance(out.error, httpx.RemoteProtocolError)  # incomplete chunked read


def test_drop_closes_without_response(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "drop")
    seen_before = engine_state(sim)["requests_seen"]
    with client_for(proxy.url) as client:
        out = chat(client)
    assert isinstance(out.error, httpx.RemoteProtocolError) and out.status is None
    assert "without sending" in str(out.error)
    assert engine_state(sim)["requests_seen"] == seen_before


def test_keepalive_race_fails_the_reused_connection_only(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "keepalive-race")
    with client_for(proxy.url) as client:
        assert chat(client).done
        reused = chat(client)
    assert isinstance(reused.error, httpx.RemoteProtocolError) and reused.status is None
    with client_for(proxy.url) as fresh:
        assert chat(fresh).done


def test_delay_adds_time_to_first_byte(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "delay=300")
    with client_for(proxy.url) as client:
        out = chat(client)
    assert out.done and out.times[0] >= 0.3


def test_slow_drip_spaces_events(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "slow-drip=80")
    with client_for(proxy.url) as client:
        out = chat(client)
        again = chat(client)  # the connection stays usable: framing was kept intact
    assert out.done and again.done
    # 80 ms per event (the engine alone: 10 ms); a busy client may read two at once, so judge the whole
    spread = out.times[-1] - out.times[0]
    assert spread >= 0.08 * (len(out.times) - 1) * 0.8, out.times


def test_idle_cut_closes_a_silent_stream():
    with serve_in_thread(SimConfig(ttft=0.02, itl=0.01, fault="hang")) as engine:
        with start_proxy(engine.url, "idle-cut=0.4") as proxy, client_for(proxy.url) as client:
            out = chat(client, read_timeout=5)
            assert isinstance(out.error, httpx.RemoteProtocolError)
            assert 0.35 <= time.monotonic() - out.started < 3


def test_after_n_arms_on_the_nth_request(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "hold-request,after=2")
    with client_for(proxy.url) as a, client_for(proxy.url) as b:
        assert chat(a).done and chat(b).done
        assert isinstance(chat(a, read_timeout=STALL_S).error, httpx.ReadTimeout)


def test_a_status_fault_with_times_lifts_after_k_answers(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "status=429,retry-after=1,after=1,times=2")
    with client_for(proxy.url) as client:
        statuses = [chat(client).status for _ in range(5)]
    assert statuses == [200, 429, 429, 200, 200]


def test_repro_canaries_through_the_proxy_never_move_the_round_a_fault_meets(sim, fault_proxy):
    proxy = fault_proxy(sim.url, "status=429,after=1")
    canary = {"x-repro-canary": "1"}
    with httpx.Client(base_url=proxy.url, timeout=5) as client:
        def status(headers=None):
            return client.post("/v1/chat/completions", json=BODY, headers=headers or {}).status_code
        assert [status(canary), status(canary), status(), status(canary), status()] == [200, 200, 200, 429, 429]


def test_the_flow_log_marks_repro_canaries_and_the_harness_facts_leave_them_out(sim, fault_proxy):
    # repro's own canary (probes.canary, as triage sends it) between a client's two rounds: the
    # proxy's flow log marks it, and a harness run's facts count only the client's rounds.
    proxy = fault_proxy(sim.url, None)
    with client_for(proxy.url) as client:
        assert chat(client).done
        outcome = anyio.run(lambda: run_canary(Hop("proxy", proxy.url), model=SimConfig().model, timeout=5))
        assert outcome.status == 200
        assert chat(client).done
    flows = proxy.flows()
    seen = [r for r in flows if r["event"] == "request_seen" and r["path"] == "/v1/chat/completions"]
    assert [r.get("canary") for r in seen] == [None, True, None]  # the client's carry no field at all
    facts = read_flow_facts(flows, engine_fault=False)
    assert facts.requests == 2 and facts.connections == 1


def test_runtime_arm_release_and_disarm(sim, fault_proxy):
    proxy = fault_proxy(sim.url, None)
    with client_for(proxy.url) as client:
        assert chat(client).done
        proxy.arm("hold-request")
        assert isinstance(chat(client, read_timeout=STALL_S).error, httpx.ReadTimeout)
    proxy.disarm()
    with client_for(proxy.url) as client:
        assert chat(client).done
    assert metric(proxy, "repro_proxy_held_flows") == 0


def test_stop_releases_holds_and_closes_the_port(sim):
    proxy = start_proxy(sim.url, "hold-request")
    import threading

    results: list[Outcome] = []
    with client_for(proxy.url) as client:
        thread = threading.Thread(target=lambda: results.append(chat(client, read_timeout=30)))
        thread.start()
        time.sleep(0.3)
        started = time.monotonic()
        proxy.stop()
        thread.join(10)
        assert time.monotonic() - started < 5
    assert isinstance(results[0].error, httpx.RemoteProtocolError | httpx.ReadError)
    with pytest.raises(httpx.ConnectError):
        httpx.get(proxy.url + "/health", timeout=2)  # refused, not a hang on a dead listener
    proxy.stop()  # idempotent


def test_bad_upstream_and_spec_are_one_line_errors(sim):
    with pytest.raises(ValueError, match="http:// or https://"):
        start_proxy("127.0.0.1:1", None)
    with pytest.raises(ValueError, match="unknown proxy fault"):
        start_proxy(sim.url, "wedge")


def test_port_in_use_fails_fast_with_the_reason(sim, fault_proxy):
    from proxies.runner import ProxyStartError

    taken = int(fault_proxy(sim.url).url.rsplit(":", 1)[1])
    started = time.monotonic()
    with pytest.raises(ProxyStartError, match="address already in use"):
        start_proxy(sim.url, None, port=taken)
    assert time.monotonic() - started < 5
