"""Discovery against a real Prometheus (Debian `prometheus`, started here on 127.0.0.1) scraping
simulated engines: the hops follow its targets as the config gains and loses them (reloaded on
SIGHUP, as a Kubernetes service discovery would change them)."""

from __future__ import annotations

import anyio
import pytest

from probes.discovery import discover_hops
from repro.core.hop_changes import describe_hop_changes, hop_changes
from repro.sim import SimConfig, serve_in_thread
from tests.support.prometheus import prometheus_servers
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.network, pytest.mark.timeout(120)]


@pytest.fixture
def prometheus(tmp_path):
    """A factory: Prometheus started on 127.0.0.1 scraping the targets it is given under job "sglang"."""
    with prometheus_servers(tmp_path) as start:
        yield lambda targets: start({"sglang": targets})


def address(sim) -> str:
    return sim.url.removeprefix("http://")


def test_discovery_follows_prometheus_targets_as_they_come_and_go(prometheus):
    with serve_in_thread(SimConfig(dialect="sglang")) as a, serve_in_thread(SimConfig(dialect="vllm")) as b, \
            serve_in_thread(SimConfig(dialect="sglang")) as c:
        server = prometheus([address(a), address(b)])
        discover = lambda: anyio.run(lambda: discover_hops(server.url, '{job="sglang"}', timeout=5))  # noqa: E731

        def named(*sims):
            def check():
                hops = discover()
                return hops if sorted(h.name for h in hops) == sorted(address(s) for s in sims) else None
            return check

        first = wait_for(named(a, b), timeout=30, what="prometheus's first targets")
        assert all(h.role == "engine" and h.canary for h in first)
        assert {h.name: (h.url, h.metrics_url) for h in first} == {
            address(s): (s.url, s.url + "/metrics") for s in (a, b)}

        server.reload({"sglang": [address(a), address(b), address(c)]})
        second = wait_for(named(a, b, c), timeout=30, what="the third engine discovered after SIGHUP")
        added, removed = hop_changes(first, second)
        assert ([h.name for h in added], removed) == ([address(c)], [])

        server.reload({"sglang": [address(b), address(c)]})
        third = wait_for(named(b, c), timeout=30, what="the first engine gone after SIGHUP")
        added, removed = hop_changes(second, third)
        assert (added, [h.name for h in removed]) == ([], [address(a)])
        assert describe_hop_changes(added, removed) == f"hops: 0 added, 1 removed: -{address(a)} ({a.url})"
