"""What `repro triage` (with and without --pid), `repro probe` and `repro scenarios` print at 80 columns and wider,
against stored text (tests/fixtures/console; tests/support/golden.py says how to regenerate it).
The values are those a real triage of a hung simulated engine read (docs/commands.md#repro-triage)."""

from __future__ import annotations

import pytest

from repro.commands.probe import probe_table
from repro.commands.scenarios import scenario_table
from repro.commands.triage import hop_table, short_frame, socket_table, thread_table
from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.hop import Hop
from repro.core.snapshot import Snapshot
from repro.core.socket_state import SocketState
from repro.core.thread_state import ProcessThreads, ThreadState
from repro.lab.runner import ScenarioResult
from repro.live.triage import PidSockets, TriageResult
from tests.support.columns import layout_faults
from tests.support.golden import assert_fits, assert_golden, assert_words_whole, render_text

WIDTHS = [80, 132]
HOPS = [Hop("nginx", "http://127.0.0.1:18080/v1", "http://127.0.0.1:18081/status", "proxy"),
        Hop("engine-0", "http://127.0.0.1:18091/v1"), Hop("engine-1", "http://127.0.0.1:18092/v1"),
        Hop("gone", "http://127.0.0.1:18093/v1")]
TIMEOUT = "timeout: no SSE data event in 3 s (status 200)"
REFUSED = "connect: connection refused"


def canary(hop: Hop, *, ok: bool, error: str | None = None, total: float = 0.03) -> ev.CanaryResult:
    return ev.CanaryResult(t=2.0, hop=hop.name, outcome=CanaryOutcome(hop=hop.name, url=hop.url, ok=ok, error=error,
                                                                      status=200 if ok else None, total_s=total))


def sample(hop: Hop, **figures) -> ev.ProbeSample:
    ok = "error" not in figures
    return ev.ProbeSample(t=2.0, hop=hop.name, snapshot=Snapshot(hop=hop.name, url=hop.metrics_url or "", ok=ok,
                                                                 dialect="sglang" if ok else "unknown", **figures))


def triage_result(**extra) -> TriageResult:
    nginx, e0, e1, gone = HOPS
    return TriageResult(
        hops=HOPS, verdict=None, ruled_out=[], window_s=2.0,
        latest={"nginx": sample(nginx, in_flight=3),
                "engine-0": sample(e0, running=2, queued=0, in_flight=1),
                "engine-1": sample(e1, running=0, queued=0, in_flight=0),
                "gone": sample(gone, error=REFUSED)},
        canaries={"nginx": canary(nginx, ok=False, error=TIMEOUT, total=3.0),
                  "engine-0": canary(e0, ok=False, error=TIMEOUT, total=3.0),
                  "engine-1": canary(e1, ok=True), "gone": canary(gone, ok=False, error=REFUSED, total=0.001)},
        **extra)


@pytest.mark.parametrize("width", WIDTHS)
def test_triage_hop_table_keeps_hop_names_and_reads_each_canary_by_its_first_words(width):
    text = render_text(hop_table(triage_result(), width=width), width)
    assert_golden(f"triage_hops_{width}", text)
    assert_fits(text, width)
    assert_words_whole(text, ["hop", "role", "metrics", "load", "fresh", "canary", *(h.name for h in HOPS),
                              *TIMEOUT.split(), *REFUSED.split(), "running,", "queued,", "flight"])
    assert "?" not in text  # a gauge not read is left out, never printed as ?
    rows = [line for line in text.splitlines() if line.split() and line.split()[0] in {h.name for h in HOPS}]
    assert len(text.splitlines()) - 3 <= 3 * len(rows)  # at most three lines a hop (eight before)


SOCKETS = PidSockets(pid=16967, t=4.0, name="python", connections=[
    ev.SocketSample(t=4.0, socket=SocketState(local="127.0.0.1:50412", remote="127.0.0.1:18091", state="ESTABLISHED",
                                              rqueue=0, wqueue=0, unacked=0, last_data_recv_s=6.8,
                                              last_data_sent_s=6.8, bytes_received=159, bytes_acked=651, inode=1001,
                                              hop="engine-0")),
    ev.SocketSample(t=4.0, socket=SocketState(local="127.0.0.1:50420", remote="127.0.0.1:18080", state="ESTABLISHED",
                                              rqueue=0, wqueue=1412, unacked=2, last_data_recv_s=12.4,
                                              last_data_sent_s=0.2, bytes_received=48211, bytes_acked=220512,
                                              inode=1002, hop="nginx")),
    ev.SocketSample(t=4.0, socket=SocketState(local="127.0.0.1:50430", remote="10.20.30.40:443", state="CLOSE_WAIT",
                                              rqueue=31, wqueue=0, inode=1003)),
])
FRAMES = ["SyncStream.read (/work/main/.venv/lib/python3.12/site-packages/httpcore/_backends/sync.py:128)",
          "HTTP11Connection._receive_event (/work/main/.venv/lib/python3.12/site-packages/httpcore/_sync/http11.py:206)",
          "HTTP11Connection._receive_response_body (/work/main/.venv/lib/python3.12/site-packages/httpcore/_sync/"
          "http11.py:194)",
          "main (/work/main/tests/harnesses/openai_chat.py:88)"]
THREADS = ProcessThreads(pid=16967, t=4.0, stacks_by="py-spy 0.4.3", threads=[
    ThreadState(tid=16967, name="MainThread", state="S", syscall="poll", wchan="poll_schedule_timeout.constprop.0",
                sockets=[1001], stack=FRAMES),
    ThreadState(tid=16970, name="ThreadPoolExecutor-0_0", state="S", syscall="futex", wchan="futex_wait_queue"),
])


@pytest.mark.parametrize("width", WIDTHS)
def test_triage_pid_tables_keep_addresses_whole(width):
    text = render_text(socket_table(SOCKETS, width=width), width) + render_text(
        thread_table(THREADS, SOCKETS, width=width), width)
    assert_golden(f"triage_pid_{width}", text)
    assert_fits(text, width)
    assert_words_whole(text, ["127.0.0.1:18091", "127.0.0.1:18080", "10.20.30.40:443", "ESTABLISHED", "CLOSE_WAIT",
                              "engine-0", "nginx", "48211", "220512", "1412", "MainThread", "ThreadPoolExecutor-0_0",
                              "(poll_schedule_timeout)", "HTTP11Connection._receive_response_body", "(http11.py:194)"])
    assert "/work/main" not in text  # a frame's folder is in --json; its file's name tells it apart


def test_a_frame_keeps_its_function_file_and_line():
    assert short_frame(FRAMES[0]) == "SyncStream.read (sync.py:128)"
    assert short_frame("<module>") == "<module>"


PROBED = [
    {"url": "http://127.0.0.1:18091/metrics", "role": "engine", "dialect": "sglang", "ok": True, "running": 2,
     "queued": 0, "in_flight": 1, "held": None, "gen_tokens_per_s": 183.5, "itl_count": 5120, "error": None,
     "stale": ["num_running_reqs"]},
    {"url": "http://127.0.0.1:18092/metrics", "role": "engine", "dialect": "vllm", "ok": True, "running": 0,
     "queued": 0, "in_flight": None, "held": None, "gen_tokens_per_s": 0, "itl_count": 0, "error": None},
    {"url": "http://127.0.0.1:29000/metrics", "role": "router", "dialect": "sglang-router", "ok": True,
     "running": None, "queued": None, "in_flight": 3, "held": None, "error": None},
    {"url": "http://127.0.0.1:18091", "role": "worker", "via": "http://127.0.0.1:29000/metrics",
     "dialect": "sglang-router", "ok": True, "running": None, "queued": None, "in_flight": 3, "healthy": True,
     "circuit": "closed", "error": None},
    {"url": "http://127.0.0.1:18093/metrics", "role": "?", "dialect": "unknown", "ok": False, "running": None,
     "queued": None, "in_flight": None, "held": None, "error": REFUSED},
    {"url": "https://gateway.example.internal:8443/prometheus/metrics/v2", "role": "?", "dialect": "unknown",
     "ok": False, "error": "http 404: Not Found"},
]


@pytest.mark.parametrize("width", WIDTHS)
def test_probe_table_shows_each_page_by_host_and_port(width):
    text = render_text(probe_table(PROBED, width=width, title="repro probe · 08:01:49"), width)
    assert_golden(f"probe_{width}", text)
    assert_fits(text, width)
    tokens = text.split()
    for port in (18091, 18092, 29000, 18093):  # host and port whole; the path may be left out when narrow
        assert any(t.startswith(f"127.0.0.1:{port}") for t in tokens), port
    assert_words_whole(text, ["running", "queued", "flight",
                              "tok/s", "itl", "count", "sglang-router", *REFUSED.split(), "num_running_reqs"])
    assert "http:…" not in text
    # The long address keeps its port and path tail in the table, and is whole in its note.
    page = next(line.split()[0] for line in text.splitlines() if line.startswith("https://"))
    if width == 80:
        assert page.startswith("https://gate") and page.endswith("…:8443")
        assert "https://gateway.example.internal:8443/…/v2: http 404: Not Found" in text
    else:
        assert page == "https://gateway.example.internal:8443/…/v2"


@pytest.mark.parametrize("width", WIDTHS)
def test_scenario_table_writes_a_verdict_as_expected_once_and_a_mismatch_whole(width):
    ran = [ScenarioResult("direct/healthy", "no-stall", "no-stall", True),
           ScenarioResult("direct/hang", "server/engine-0/engine-hung", "server/engine-0/engine-hung", True,
                          confidence="high", time_to_verdict_s=1.79, verdict_budget_s=2.5),
           ScenarioResult("nginx/upstream-freeze", "client/nginx/connection-wedged +nginx:canary",
                          "server/engine-0/engine-hung", False, confidence="medium", time_to_verdict_s=2.41,
                          verdict_budget_s=2.5),
           # The longest name of the matrix: the other columns once squeezed the times to "1.80" / "(2.50)".
           ScenarioResult("haproxy/engine-frozen-mid-stream", "server/engine-0/engine-unresponsive mid-stream",
                          "server/engine-0/engine-unresponsive mid-stream", True, confidence="high",
                          time_to_verdict_s=1.81, verdict_budget_s=2.5)]
    text = render_text(scenario_table(ran, skipped=1, width=width), width)
    assert_golden(f"scenarios_{width}", text)
    assert_fits(text, width)
    assert not layout_faults(text, width), layout_faults(text, width)
    assert_words_whole(text, ["direct/hang", "server", "engine-0", "engine-hung", "client", "nginx",
                              "connection-wedged", "+nginx:canary", "nginx/upstream-freeze", "confidence",
                              "2.41", "1.81", "haproxy/engine-frozen-mid-stream"])
    assert "verdict budget 2.50 s" in text  # the one budget of these scenarios, said once
    assert text.split().count("same") == 3 and "3/4 match, 1 skipped" in text
    # Times on lines of their own: each a whole figure on the row of its scenario.
    assert any(line.startswith("haproxy/engine-frozen-mid-stream") and line.rstrip().endswith("1.81")
               for line in text.splitlines())


def test_scenarios_with_different_budgets_show_each_beside_its_time():
    ran = [ScenarioResult("direct/hang", "server/engine-0/engine-hung", "server/engine-0/engine-hung", True,
                          confidence="high", time_to_verdict_s=1.79, verdict_budget_s=2.5),
           ScenarioResult("nginx/hang", "server/engine-0/engine-hung", "server/engine-0/engine-hung", True,
                          confidence="high", time_to_verdict_s=3.1, verdict_budget_s=4.0)]
    text = render_text(scenario_table(ran, skipped=0, width=80), 80)
    assert "1.79/2.50" in text.split() and "3.10/4.00" in text.split() and "verdict budget" not in text
