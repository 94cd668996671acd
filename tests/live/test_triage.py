"""`repro triage` on live stacks with no load of its own: healthy, a proxy holding requests while
the engine idles, and a hung engine. Real sockets, the real mitmproxy fault proxy."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import httpx
import pytest

from proxies import start_proxy
from repro.sim import SimConfig, serve_in_thread

pytestmark = [pytest.mark.network, pytest.mark.timeout(90)]
BODY = {"model": "sim-model", "stream": True, "messages": [{"role": "user", "content": "stuck?"}]}


def triage(*hops: str) -> tuple[int, dict, str]:
    args = [sys.executable, "-m", "repro", "triage", "--window", "1.5", "--interval", "0.5",
            "--canary-timeout", "1.5", "--json"]
    for hop in hops:
        args += ["--hop", hop]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    return out.returncode, json.loads(out.stdout or "{}"), out.stderr


def stuck_requests(url: str, count: int, hold_for: float = 8.0) -> list[threading.Thread]:
    def one() -> None:
        try:
            httpx.post(url + "/v1/chat/completions", json=BODY, timeout=hold_for)
        except httpx.HTTPError:
            pass
    threads = [threading.Thread(target=one, daemon=True) for _ in range(count)]
    for t in threads:
        t.start()
    return threads


def engine_hop(sim) -> str:
    return f"name=engine-0,url={sim.url},metrics={sim.metrics_url},role=engine"


def test_healthy_stack_finds_nothing_and_exits_0():
    with serve_in_thread(SimConfig()) as sim:
        code, result, err = triage(engine_hop(sim))
    assert code == 0, err
    assert result["verdicts"] == [] and result["hops"][0]["canary"]["ok"] is True


def test_proxy_holding_requests_while_engine_idles_is_client_side_at_the_proxy():
    with serve_in_thread(SimConfig()) as sim, start_proxy(sim.url, "hold-request") as proxy:
        stuck_requests(proxy.url, 3)
        code, result, err = triage(f"name=proxy,url={proxy.url},metrics={proxy.metrics_url},role=proxy",
                                   engine_hop(sim))
        proxy.release()
    assert code == 10, err
    verdict = result["verdicts"][0]
    assert (verdict["side"], verdict["where"], verdict["kind"]) == ("client", "proxy", "request-withheld")
    held = next(e for e in verdict["evidence"] if e["hop"] == "proxy" and e["signal"] == "holds requests")
    # The three stuck requests, plus our own canary and its /health check when the latest sample
    # caught them held too (the fault holds every request; both give up at the canary timeout).
    assert held["value"] in ("3", "4", "5"), held


def test_hung_engine_is_server_side():
    with serve_in_thread(SimConfig(fault="hang")) as sim:
        stuck_requests(sim.url, 2)
        code, result, err = triage(engine_hop(sim))
    assert code == 11, err
    assert result["verdicts"][0]["kind"] == "engine-hung"


def test_an_engine_hop_given_without_metrics_is_read_at_its_api_port():
    """As docs/commands.md#repro-triage shows it: `--hop name=engine-0,url=URL,role=engine`, no metrics=. The engine's
    gauges must be read (its /metrics), so a hung engine is engine-hung, never 'idle'."""
    with serve_in_thread(SimConfig(fault="hang")) as sim:
        stuck_requests(sim.url, 2)
        code, result, err = triage(f"name=engine-0,url={sim.url},role=engine")
    assert code == 11, err
    (hop,) = result["hops"]
    assert hop["metrics_url"] == sim.url + "/metrics" and hop["sample"]["ok"] is True
    assert hop["sample"]["running"] >= 2  # the two stuck requests (and the canary, stuck too)
    assert result["verdicts"][0]["kind"] == "engine-hung"


@pytest.mark.parametrize("command", ["triage", "run"])
def test_a_hop_name_given_twice_is_a_one_line_usage_error(command):
    args = [sys.executable, "-m", "repro", command, "--hop", "name=e,url=http://127.0.0.1:9",
            "--hop", "name=e,url=http://127.0.0.1:10", "--model", "m"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "hop name 'e' appears twice" in out.stderr, out.stderr


def test_inject_next_to_a_hop_named_proxy_is_a_usage_error():
    args = [sys.executable, "-m", "repro", "run", "--hop", "name=proxy,url=http://127.0.0.1:9", "--model", "m",
            "--inject", "wedge-after=2"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--inject adds a hop named 'proxy'" in out.stderr, out.stderr


def test_triage_gathers_its_own_evidence_wave_without_the_live_judge(monkeypatch):
    """Triage classifies from one evidence wave it gathers itself (repro.live.evidence_wave):
    the live judge, which judges a run's rounds, is neither imported nor built."""
    import inspect

    import anyio

    from repro.core.hop import Hop
    from repro.live import live_judge
    from repro.live import triage as triage_module

    def no_live_judge(*args, **kwargs):
        raise AssertionError("triage built a LiveJudge")

    monkeypatch.setattr(live_judge.LiveJudge, "__init__", no_live_judge)
    assert "live_judge" not in inspect.getsource(triage_module)
    with serve_in_thread(SimConfig()) as sim:
        hops = [Hop("engine-0", sim.url, sim.metrics_url, "engine")]
        result = anyio.run(lambda: triage_module.triage(hops, model="sim-model", window=1.0, interval=0.5,
                                                        canary_timeout=1.0))
    assert result.verdict is None and result.canaries["engine-0"].outcome.ok
    assert result.latest["engine-0"].snapshot.ok


def test_a_page_never_seen_answering_is_not_said_to_have_stopped(tmp_path):
    """nginx frozen before triage starts: its canary and its stub_status page never answer. It
    answers nothing (hop-unresponsive), but triage never saw its page answer, so it does not say
    the page 'stopped answering', and is less sure (a wrong metrics URL looks the same)."""
    from tests.support.claims import unbacked_claims
    from tests.support.stacks import nginx, started

    with serve_in_thread(SimConfig()) as sim, started(nginx, sim.url, tmp_path) as proxy:
        proxy.freeze()
        code, result, err = triage(proxy.hop_flag("nginx"), engine_hop(sim))
        proxy.thaw()
    assert code == 10, err
    verdict = result["verdicts"][0]
    assert (verdict["side"], verdict["where"], verdict["kind"]) == ("client", "nginx", "hop-unresponsive"), verdict
    assert "stopped answering" not in verdict["summary"], verdict["summary"]
    assert "its metrics page answered no read (never seen answering)" in verdict["summary"]
    assert verdict["confidence"] == "medium"
    assert verdict["phase"] is None and verdict["stalled_for_s"] is None  # triage watched no round
    assert unbacked_claims(verdict) == []


def test_triage_of_a_busy_healthy_stack_blames_no_hop():
    """Someone else's long stream runs through the proxy while triage watches: the engine runs it and
    moves tokens. Triage has no round of its own outstanding, so nothing is withheld from anyone."""
    with serve_in_thread(SimConfig(itl=0.02)) as sim, start_proxy(sim.url, None) as proxy:
        body = {**BODY, "max_tokens": 400}

        def stream() -> None:
            try:
                with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=body, timeout=20) as response:
                    for _ in response.iter_bytes():
                        pass
            except httpx.HTTPError:
                pass

        worker = threading.Thread(target=stream, daemon=True)
        worker.start()
        code, result, err = triage(f"name=proxy,url={proxy.url},metrics={proxy.metrics_url},role=proxy",
                                   engine_hop(sim))
        worker.join(15)
    engine = result["hops"][1]
    assert engine["sample"]["running"] >= 1, engine  # it was busy with the stream
    assert code == 0 and result["verdicts"] == [], result["verdicts"]
