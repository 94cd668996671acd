"""`repro watch` in front of a real nginx (its stub_status page read) and the simulated engine:
what a hop's page did earlier in the watch is history the watch keeps (issue 31, defect 2), and
`repro_watch_hop_up` says whether the hop itself answers (defect 5)."""

from __future__ import annotations

import html
import json
import re
import time

import pytest

from repro.sim import SimConfig, serve_in_thread
from tests.support.stacks import nginx, started
from tests.support.waiting import wait_for
from tests.support.watching import FAST, arm, engine_hop, repro_watch

pytestmark = [pytest.mark.network, pytest.mark.timeout(240)]


def nginx_hop(proxy) -> str:
    return f"name=nginx,url={proxy.url},metrics={proxy.metrics_url},role=proxy"


def verdicts_in_log(watch) -> list[dict]:
    return [json.loads(line)["verdict"] for line in watch.log_lines() if '"type":"verdict"' in line]


def test_every_verdict_of_a_frozen_nginx_says_its_page_stopped_answering_and_when(tmp_path):
    """nginx read for a while, then frozen (SIGSTOP): every verdict of the incident, the first and
    the later ones whose rounds began long after the freeze, says its page stopped answering, and
    how long before that round's stall it last answered; none says "never seen answering". The
    status page shows the same sentence."""
    with serve_in_thread(SimConfig()) as sim, started(nginx, sim.url, tmp_path) as proxy, \
            repro_watch(tmp_path, "--hop", nginx_hop(proxy), "--hop", engine_hop(sim.url), *FAST) as watch:
        wait_for(lambda: (watch.sample("repro_watch_rounds_total", outcome="completed") or 0) >= 3, timeout=40,
                 what="rounds through nginx")
        wait_for(lambda: watch.sample("repro_watch_hop_in_flight", hop="nginx") is not None, timeout=20,
                 what="nginx's page read")
        proxy.freeze()
        try:
            def unresponsive() -> list[dict]:
                found = [v for v in verdicts_in_log(watch) if (v["where"], v["kind"]) == ("nginx", "hop-unresponsive")]
                return found if len(found) >= 4 else []

            verdicts = wait_for(unresponsive, timeout=150, what="four verdicts of the frozen nginx")
            # Frozen in front of a serving engine: nginx itself is down, the engine up.
            wait_for(lambda: watch.sample("repro_watch_hop_up", hop="nginx") == 0, timeout=20, what="nginx down")
            assert watch.sample("repro_watch_hop_up", hop="engine-0") == 1
            status = watch.status()
            page = watch.get("/").text
        finally:
            proxy.thaw()
    sentence = re.compile(r"its metrics page stopped answering \(last answered at (\d\d:\d\d:\d\d) UTC, "
                          r"(\d+\.\d) s before the stall\)")
    never = [v["summary"] for v in verdicts if "never seen answering" in json.dumps(v)]
    assert not never, never
    befores, last_answers = [], set()
    for verdict in verdicts:
        match = sentence.search(verdict["summary"])
        assert match, verdict["summary"]
        befores.append(float(match.group(2)))
        last_answers.add(match.group(1))
        entry = [e["value"] for e in verdict["evidence"] if e["hop"] == "nginx" and e["signal"] == "metrics page"]
        assert entry and entry[0].startswith(match.group(0).removeprefix("its metrics page ")), entry
    # The later rounds began after the freeze: their stall is further from the last answer.
    assert befores[-1] > befores[0] + 2, befores
    # One freeze: every verdict names the same last answer (a scrape every 0.5 s: within a second).
    assert len(last_answers) <= 2, last_answers
    incident = [i for i in status["open_incidents"] if (i["where"], i["kind"]) == ("nginx", "hop-unresponsive")]
    assert incident and sentence.search(incident[0]["summary"]), status["open_incidents"]
    assert "never seen answering" not in html.unescape(page)
    assert sentence.search(html.unescape(page)), "the status page shows the incident's sentence"


def test_hop_up_is_the_hop_itself_an_engine_hung_behind_nginx_leaves_nginx_up_a_frozen_nginx_is_down(tmp_path):
    """The engine hangs: nginx's canary times out as the engine's own does, but nginx answers (its
    stub_status page, /health relayed): hop_up{nginx} stays 1, hop_up{engine-0} goes 0, and the
    status page says why nginx is up. Then nginx is frozen: its page and /health go silent too,
    hop_up{nginx} goes 0."""
    with serve_in_thread(SimConfig()) as sim, started(nginx, sim.url, tmp_path) as proxy, \
            repro_watch(tmp_path, "--hop", nginx_hop(proxy), "--hop", engine_hop(sim.url), *FAST) as watch:
        wait_for(lambda: watch.sample("repro_watch_hop_up", hop="nginx") == 1
                 and watch.sample("repro_watch_hop_up", hop="engine-0") == 1, timeout=30, what="both hops up")
        arm(sim.url, "hang")
        wait_for(lambda: watch.sample("repro_watch_hop_up", hop="engine-0") == 0, timeout=30,
                 what="the hung engine's canary failing")
        # Several waves (a canary a second): nginx's canary fails every time, nginx stays up.
        seen = []
        for _ in range(8):
            seen.append(watch.sample("repro_watch_hop_up", hop="nginx"))
            time.sleep(0.5)
        assert seen.count(1.0) >= 7 and watch.sample("repro_watch_hop_up", hop="nginx") == 1, seen
        hops = {h["name"]: h for h in watch.status()["hops"]}
        assert hops["nginx"]["up"] is True and hops["nginx"]["explained_by"] == "engine-0", hops["nginx"]
        assert hops["engine-0"]["up"] is False
        assert "it answers; its canary fails as engine-0's behind it does" in html.unescape(watch.get("/").text)
        proxy.freeze()
        try:
            wait_for(lambda: watch.sample("repro_watch_hop_up", hop="nginx") == 0, timeout=30,
                     what="the frozen nginx down")
            assert {h["name"]: h for h in watch.status()["hops"]}["nginx"]["explained_by"] is None
        finally:
            proxy.thaw()
        arm(sim.url, None)
