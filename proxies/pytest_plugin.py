"""pytest fixtures for putting a fault proxy in front of your own server.

Registered as a pytest11 entry point, or in a test module: pytest_plugins = ["proxies.pytest_plugin"]

    def test_my_client_survives_a_wedged_connection(fault_proxy, my_server_url):
        proxy = fault_proxy(my_server_url, "wedge-after=2")   # started, ready
        client = MyClient(base_url=proxy.url)
        ...                                                    # rounds 1, 2 pass; round 3 is held
        proxy.release()                                        # let it through
        assert [r["event"] for r in proxy.flows()].count("held") == 1

Every proxy the factory started is stopped at teardown (listeners closed, holds released).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # imported lazily: every pytest session loads this plugin, few need mitmproxy
    from proxies.relay import RelayHandle
    from proxies.runner import ProxyHandle


@pytest.fixture
def fault_proxy(tmp_path: Path) -> Callable[..., ProxyHandle]:
    """Factory: fault_proxy(upstream_url, spec=None, **start_proxy_kwargs) -> ProxyHandle (with a flow log)."""
    from proxies.runner import start_proxy

    started: list[ProxyHandle] = []

    def start(upstream: str, spec: str | None = None, **kwargs) -> ProxyHandle:
        kwargs.setdefault("flow_log", tmp_path / f"proxy-flows-{len(started)}.jsonl")
        proxy = start_proxy(upstream, spec, **kwargs)
        started.append(proxy)
        return proxy

    yield start
    for proxy in reversed(started):
        proxy.stop()


@pytest.fixture
def fault_relay() -> Callable[..., RelayHandle]:
    """Factory: fault_relay("127.0.0.1:PORT" or URL, spec=None) -> RelayHandle (TCP-level faults)."""
    from proxies.relay import start_relay

    started: list[RelayHandle] = []

    def start(upstream: str, spec: str | None = None, **kwargs) -> RelayHandle:
        relay = start_relay(upstream, spec, **kwargs)
        started.append(relay)
        return relay

    yield start
    for relay in reversed(started):
        relay.stop()
