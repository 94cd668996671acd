"""The addon as a script: `mitmdump -s proxies/faults.py`, started and stopped by the runner."""

from __future__ import annotations

import time

import httpx
import pytest

from proxies import start_proxy
from proxies.runner import ProxyStartError
from repro.sim import SimConfig, serve_in_thread
from tests.support.proxy_chat import STALL_S, chat, client_for, engine_state, metric

pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def sim():
    with serve_in_thread(SimConfig(ttft=0.02, itl=0.01)) as engine:
        yield engine


def test_mitmdump_wedge_after_and_admin_control(sim, tmp_path):
    log = tmp_path / "flows.jsonl"
    with start_proxy(sim.url, "wedge-after=1", flow_log=log, mode="subprocess") as proxy:
        assert proxy.mode == "subprocess"
        with client_for(proxy.url) as client:
            assert chat(client).done
            stalled = chat(client, read_timeout=STALL_S)
        assert isinstance(stalled.error, httpx.ReadTimeout)
        assert engine_state(sim)["running"] == 0
        # runtime control over the admin endpoint beside /metrics
        proxy.arm("hold-request")
        assert proxy.state()["fault"] == "hold-request"
        with client_for(proxy.url) as fresh:
            assert isinstance(chat(fresh, read_timeout=STALL_S).error, httpx.ReadTimeout)
        proxy.disarm()
        with client_for(proxy.url) as fresh:
            assert chat(fresh).done
        with pytest.raises(ValueError, match="unknown proxy fault"):
            proxy.arm("nonsense")
        assert metric(proxy, "repro_proxy_requests_total") == 4
        url = proxy.url
    events = [r["event"] for r in proxy.flows()]
    assert events.count("held") == 2 and "request_seen" in events
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=2)


def test_mitmdump_held_flow_is_released_on_sigterm(sim):
    import threading

    proxy = start_proxy(sim.url, "hold-request", mode="subprocess")
    results = []
    with client_for(proxy.url) as client:
        thread = threading.Thread(target=lambda: results.append(chat(client, read_timeout=30)))
        thread.start()
        time.sleep(0.4)
        started = time.monotonic()
        proxy.stop()
        thread.join(10)
    assert time.monotonic() - started < 6 and results and results[0].error is not None
    assert not isinstance(results[0].error, httpx.ReadTimeout)


def test_mitmdump_bad_spec_fails_fast(sim):
    from proxies.runner import SubprocessProxy

    started = time.monotonic()
    with pytest.raises(ProxyStartError, match="unknown proxy fault"):
        SubprocessProxy(sim.url, "bogus", flow_log=None, host="127.0.0.1", port=0, metrics_port=0,
                        hold_max=60).start()
    assert time.monotonic() - started < 10
