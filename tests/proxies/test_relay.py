"""The TCP relay's socket faults end to end: httpx client -> relay -> simulated engine."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from proxies.relay import parse_upstream, start_relay
from repro.core.faultspec import FaultSpecError
from repro.sim import SimConfig, serve_in_thread
from tests.support.proxy_chat import STALL_S, chat, client_for, engine_state

# fault_relay comes from the repro_proxies pytest11 entry point (proxies.pytest_plugin)


@pytest.fixture(scope="module")
def sim():
    with serve_in_thread(SimConfig(ttft=0.02, itl=0.01)) as engine:
        yield engine


@pytest.mark.network
def test_pass_relays_keepalive_rounds(sim, fault_relay):
    relay = fault_relay(sim.url)
    with client_for(relay.url) as client:
        assert all(chat(client).done for _ in range(3))
    assert relay.state()["connections"] == 1


@pytest.mark.network
def test_freeze_at_runtime_backs_up_then_release_resumes(sim, fault_relay):
    relay = fault_relay(sim.url)
    seen = engine_state(sim)["requests_seen"]
    with client_for(relay.url) as client:
        assert chat(client).done
        relay.arm("freeze")
        results = []
        thread = threading.Thread(target=lambda: results.append(chat(client, read_timeout=5)))
        thread.start()
        time.sleep(STALL_S)
        assert thread.is_alive() and engine_state(sim)["requests_seen"] == seen + 1  # never read, never sent
        assert relay.release() == 1
        thread.join(6)
    assert results[0].done


@pytest.mark.network
def test_half_open_swallows_everything(sim, fault_relay):
    relay = fault_relay(sim.url, "half-open")
    seen = engine_state(sim)["requests_seen"]
    with client_for(relay.url) as client:
        out = chat(client, read_timeout=STALL_S)
    assert isinstance(out.error, httpx.ReadTimeout)
    assert engine_state(sim)["requests_seen"] == seen


@pytest.mark.network
def test_reset_sends_rst(sim, fault_relay):
    relay = fault_relay(sim.url, "reset")
    with client_for(relay.url) as client:
        out = chat(client)
    assert isinstance(out.error, httpx.ReadError | httpx.RemoteProtocolError)
    assert out.status is None


@pytest.mark.network
def test_limit_data_cuts_the_stream(sim, fault_relay):
    relay = fault_relay(sim.url, "limit-data=400")
    with client_for(relay.url) as client:
        out = chat(client)
    assert out.error is not None and not out.done


@pytest.mark.network
def test_latency_and_slicer_keep_the_stream_intact(sim, fault_relay):
    slow = fault_relay(sim.url, "latency=150")
    with client_for(slow.url) as client:
        out = chat(client)
    assert out.done and out.times[0] >= 0.15
    sliced = fault_relay(sim.url, "slicer=5")
    with client_for(sliced.url) as client:
        assert chat(client).done and chat(client).done


@pytest.mark.network
def test_after_n_connections(sim, fault_relay):
    relay = fault_relay(sim.url, "half-open,after=1")
    with client_for(relay.url) as first:
        assert chat(first).done
    with client_for(relay.url) as second:
        assert isinstance(chat(second, read_timeout=STALL_S).error, httpx.ReadTimeout)


@pytest.mark.network
def test_stop_closes_frozen_connections_and_the_port(sim):
    relay = start_relay(sim.url, "freeze")
    results = []
    with client_for(relay.url) as client:
        thread = threading.Thread(target=lambda: results.append(chat(client, read_timeout=30)))
        thread.start()
        time.sleep(0.3)
        relay.stop()
        thread.join(5)
    assert results and results[0].error is not None and not isinstance(results[0].error, httpx.ReadTimeout)
    with pytest.raises(httpx.ConnectError):
        httpx.get(relay.url, timeout=2)


def test_bad_input():
    with pytest.raises(FaultSpecError, match="unknown relay fault"):
        start_relay("127.0.0.1:1", "wedge-after=2")
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_upstream("localhost")
    assert parse_upstream("http://127.0.0.1:8000/v1") == ("127.0.0.1", 8000)
