"""`repro watch --prometheus`: hops found through a real Prometheus (started here on 127.0.0.1)
scraping two simulated engines; the canary conversations go to each engine directly, so a
verdict's `where` is the engine that failed, and only that engine's conversations clear it; a
Prometheus that stops answering leaves the watched set as it was."""

from __future__ import annotations

import httpx
import pytest

from repro.sim import SimConfig, serve_in_thread
from tests.support.waiting import wait_for
from tests.support.watching import open_incidents, repro_watch, rounds

pytest.importorskip("probes.discovery", reason="discovery is built on its own branch")
prometheus_support = pytest.importorskip("tests.support.prometheus", reason="the Prometheus launcher")

pytestmark = [pytest.mark.network, pytest.mark.timeout(180)]

FAST = ("--think", "0.2", "--rounds", "3", "--stall-after", "2", "--probe-interval", "0.5",
        "--canary-every", "1", "--canary-timeout", "1", "--discover-every", "1")


def test_discovered_engines_are_talked_to_directly_and_kept_when_prometheus_stops(tmp_path):
    with prometheus_support.prometheus_servers(tmp_path) as start_prometheus, \
            serve_in_thread(SimConfig()) as healthy, serve_in_thread(SimConfig()) as failing:
        instances = [url.removeprefix("http://") for url in (healthy.url, failing.url)]
        prometheus = start_prometheus({"sglang": instances})
        wait_for(lambda: len(prometheus.targets_up()) == 2, timeout=30, what="both engines scraped")
        with repro_watch(tmp_path, "--prometheus", prometheus.url, "--selector", '{job="sglang"}', *FAST) as watch:
            wait_for(lambda: rounds(watch, "completed") >= 4, timeout=30, what="rounds on both engines")
            assert watch.sample("repro_watch_hops") == 2
            assert {h["name"] for h in watch.status()["hops"]} == set(instances)
            assert "2 canary conversations of 3 rounds" in watch.said  # one per discovered engine
            # One engine hangs: the verdict names it, not the fleet. A hang is judged a stall
            # trigger after each round starts, so the healthy engine's short conversations start and
            # complete between two of its verdicts, which must not clear it.
            assert httpx.post(f"{failing.url}/sim/fault", json={"spec": "hang"}, timeout=5,
                              trust_env=False).status_code == 200
            wait_for(lambda: ("server", instances[1], "engine-hung") in open_incidents(watch), timeout=40,
                     what="the incident at the engine that hangs")
            assert not any(where == instances[0] for _side, where, _kind in open_incidents(watch))
            assert watch.sample("repro_watch_hop_up", hop=instances[0]) == 1
            # The healthy engine's conversations go on completing; they prove nothing about the other:
            # its incident never clears (no flapping alert).
            completed = rounds(watch, "completed")
            wait_for(lambda: rounds(watch, "completed") >= completed + 6, timeout=30, what="two more conversations")
            assert ("server", instances[1], "engine-hung") in open_incidents(watch)
            assert not [line for line in watch.log_lines() if "incident cleared" in line and instances[1] in line]
            prometheus.stop()  # discovery gets no answer: the set stays, said once
            wait_for(lambda: "keeping the last 2 hops" in watch.said, timeout=20, what="the discovery warning")
            completed = rounds(watch, "completed")
            wait_for(lambda: rounds(watch, "completed") > completed, timeout=20, what="rounds going on")
            assert watch.sample("repro_watch_hops") == 2
            assert watch.said.count("keeping the last 2 hops") == 1
            assert watch.stop() == 0
