"""`repro wrap -- CMD`: a real openai-SDK harness (tests/harnesses/openai_chat.py) run under repro,
against the simulated engine, each way a run ends: a wedging fault proxy (client side, at the
proxy), a hung engine (server side), a frozen nginx (client side, at nginx), a healthy run (no verdict, the harness's code passed through),
the harness failing on its own mid-run (its code, no verdict), Ctrl-C (to the harness first, 130),
SIGINT/SIGTERM to a wrap attached by --pid (the watch ends, recorded, 130; the harness runs on),
and bad input (one line, exit 2).

Each test runs `repro wrap` as a user does (a subprocess, --json) with a bound on its wait; the
harness's own progress lines (its stdout, before wrap's JSON line) say what it did.
"""

from __future__ import annotations

import os
import signal

import pytest

from repro.cli import main
from repro.reporting.rejudge import rejudge
from repro.sim import SimConfig, serve_in_thread
from tests.support.columns import layout_faults
from tests.support.harness_process import harness
from tests.support.processes import alive, gone_within
from tests.support.stacks import nginx, started
from tests.support.waiting import wait_for
from tests.support.wrapping import WrapProcess, logged, openai_harness, run_wrap

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(90)]

FAST = ("--stall-after", "1.5", "--window", "1.5", "--canary-timeout", "2")
# Seconds between rounds where a test counts them: two rounds within one 0.25 s poll are seen as one
# (docs/wrap.md), so they are spaced by more than two polls, with room for a loaded machine.
SPACED = 0.6


@pytest.fixture(scope="module")
def engine():
    with serve_in_thread(SimConfig()) as sim:
        yield sim


def hop(sim, name: str = "engine-0") -> str:
    return f"name={name},url={sim.url}"


def started_rounds(lines: list[dict]) -> list[int]:
    return [line["round"] for line in lines if line["event"] == "start"]


def done_rounds(lines: list[dict]) -> list[int]:
    return [line["round"] for line in lines if line["event"] == "done"]


def test_a_wedging_proxy_is_judged_client_side_at_the_proxy(engine, tmp_path):
    out = run_wrap("--hop", hop(engine), "--inject", "wedge-after=2", *FAST, "--stop-on-verdict", "--out",
                   str(tmp_path / "run"), "--json", "--", *openai_harness("{proxy_url}/v1", rounds=6, think=SPACED))
    # The harness's own account: two rounds answered, the third begun and never answered.
    assert done_rounds(out.harness_lines) == [1, 2] and started_rounds(out.harness_lines) == [1, 2, 3], out.stderr
    assert out.verdicts == [("client", "proxy", "connection-wedged")], out.stderr
    assert out.code == 10 and out.result["exit"] == 10
    stall = out.result["stalls"][0]
    assert stall["phase"] == "before-first-byte" and stall["hop"] == "proxy" and stall["round"] == 3
    assert "CLIENT-SIDE" in out.stderr and "connection-wedged" in out.stderr
    assert not layout_faults(out.stderr, what="repro wrap's stderr")  # the panel and its lines fit 80 columns
    assert not alive(out.result["harness_pid"])
    # The run log draws the harness's timeline: its rounds on one connection, the third stalled.
    again = rejudge(tmp_path / "run")
    assert [(s.conv, s.round) for s in again.rounds] == [(1, 1), (1, 2), (1, 3)]
    assert [s.status for s in again.rounds] == ["completed", "completed", "stalled"]
    # and `repro report` re-judges the stall from the evidence recorded to the same verdict.
    assert [(v.side, v.where, v.kind) for v in again.verdicts] == out.verdicts


def test_a_stream_held_mid_way_by_the_proxy_is_judged_there(engine, tmp_path):
    # Three events of the third answer pass, the rest is held: the harness reads on, mid-stream.
    out = run_wrap("--hop", hop(engine), "--inject", "truncate-hold=3,after=2", *FAST, "--stop-on-verdict",
                   "--json", "--out", str(tmp_path / "run"), "--",
                   *openai_harness("{proxy_url}/v1", rounds=6, think=SPACED) + ["--max-tokens", "32"])
    assert done_rounds(out.harness_lines) == [1, 2] and started_rounds(out.harness_lines) == [1, 2, 3], out.stderr
    assert [(side, where) for side, where, _ in out.verdicts] == [("client", "proxy")], out.stderr
    stall = next(s for s in out.result["stalls"] if s["verdicts"])
    assert stall["phase"] == "mid-stream" and stall["hop"] == "proxy"
    assert out.code == 10


def test_a_hung_engine_is_judged_server_side(tmp_path):
    with serve_in_thread(SimConfig(fault="hang,after=2")) as sim:
        out = run_wrap("--hop", hop(sim), *FAST, "--stop-on-verdict", "--json", "--out", str(tmp_path / "run"),
                       "--", *openai_harness(sim.url + "/v1", rounds=6))
    assert done_rounds(out.harness_lines) == [1, 2], out.stderr
    assert [(side, where) for side, where, _ in out.verdicts] == [("server", "engine-0")], out.stderr
    assert out.code == 11
    assert out.result["stalls"][0]["hop"] == "engine-0"


def test_a_healthy_run_has_no_verdict_and_the_harness_exit_code(engine, tmp_path):
    # Through a shell that forks the harness (no exec): its sockets are its child's, followed. It
    # thinks longer than --stall-after between rounds, its answer read and its kept-alive connection
    # quiet (httpx leaves it unwatched: the round is done; Bun and Node keep watching it: judged, and
    # no hop holds it): never a stall made of an idle pause.
    out = run_wrap("--hop", hop(engine), *FAST, "--json", "--out", str(tmp_path / "run"), "--",
                   "sh", "-c", '"$@"; exit 3', "sh", *openai_harness(engine.url + "/v1", rounds=3, think=2.2))
    assert done_rounds(out.harness_lines) == [1, 2, 3], out.stderr
    assert out.code == 3 and out.result["harness_exit"] == 3  # the shell's own code, passed through
    assert out.result["verdicts"] == [], out.stderr
    assert all(s["phase"] == "mid-stream" and not s["verdicts"] for s in out.result["stalls"])
    # Rounds seconds apart, polled every 0.25 s: each seen on its own, on the forked child's connection.
    assert sum(c["rounds"] for c in out.result["connections"]) == 3
    assert {c["pid"] for c in out.result["connections"]} != {out.result["harness_pid"]}


def test_the_bound_stops_the_harness_and_exits_124(engine, tmp_path):
    # 6 s: a loaded machine takes seconds to import the SDK before its first round.
    out = run_wrap("--hop", hop(engine), *FAST, "--max-time", "6", "--json", "--out", str(tmp_path / "run"), "--",
                   *openai_harness(engine.url + "/v1", rounds=1000))
    assert done_rounds(out.harness_lines), out.stderr  # it ran
    assert out.code == 124 and out.result["bounded"] and out.result["verdicts"] == []
    assert out.result["harness_exit"] == 128 + signal.SIGTERM  # stopped by wrap, as a shell says it
    assert not alive(out.result["harness_pid"])


def test_a_harness_that_fails_on_its_own_passes_its_code_through(engine, tmp_path):
    # The proxy closes the third request's connection: the SDK (no retries) raises, the harness exits 1.
    out = run_wrap("--hop", hop(engine), "--inject", "drop,after=2", *FAST, "--json", "--out", str(tmp_path / "run"),
                   "--", *openai_harness("{proxy_url}/v1", rounds=6))
    assert done_rounds(out.harness_lines) == [1, 2] and "APIConnectionError" in out.stderr
    assert out.code == 1 and out.result["harness_exit"] == 1
    assert out.result["verdicts"] == []


def test_ctrl_c_goes_to_the_harness_first_and_exits_130(engine, tmp_path):
    wrap = WrapProcess("--hop", hop(engine), *FAST, "--json", "--out", str(tmp_path / "run"), "--",
                       *openai_harness(engine.url + "/v1", rounds=1000))
    try:
        wrap.wait_for("start", 1)
        os.kill(wrap.process.pid, signal.SIGINT)
        out = wrap.finish(timeout=30)
    finally:
        wrap.kill()
    assert out.code == 130 and out.result["interrupted"] == signal.SIGINT
    # The harness heard it (Python's KeyboardInterrupt), and ended on it: not stopped by force.
    assert "KeyboardInterrupt" in out.stderr and out.result["harness_exit"] == 130
    assert not gone_within([out.result["harness_pid"]], 5)


def test_a_frozen_nginx_is_judged_client_side_at_nginx(engine, tmp_path):
    with started(nginx, engine.url, tmp_path / "nginx") as proxy:
        wrap = WrapProcess("--hop", f"name=nginx,url={proxy.url},role=proxy", "--hop", hop(engine), *FAST,
                           "--stop-on-verdict", "--json", "--out", str(tmp_path / "run"), "--",
                           *openai_harness(proxy.url + "/v1", rounds=6, think=SPACED))
        try:
            wrap.wait_for("done", 2)
            proxy.freeze()  # before the third round: nginx's every process stopped, the kernel still accepts
            out = wrap.finish()
        finally:
            proxy.thaw()
            wrap.kill()
    # The request never left nginx (unread in its queue): request-withheld. (Frozen with the engine's
    # answer on its way back, it is response-withheld: test_wrap_real_harnesses.py.)
    assert out.verdicts == [("client", "nginx", "request-withheld")], out.stderr[-3000:]
    assert out.code == 10
    stall = next(s for s in out.result["stalls"] if s["verdicts"])
    assert stall["hop"] == "nginx" and stall["phase"] == "before-first-byte"


@pytest.mark.parametrize(("args", "names"), [
    (("--hop", "name=e,url=http://127.0.0.1:9", "--inject", "wedge-after", "--", "true"), "--inject"),
    (("--hop", "name=e,url=http://127.0.0.1:9"), "no harness command"),
    (("--", "true"), "no hops"),
    (("--hop", "name=e,url=http://127.0.0.1:9", "--config-template", "x.json", "--", "true"), "--config-template"),
    (("--hop", "name=e,url=http://127.0.0.1:9", "--stall-after", "0", "--", "true"), "--stall-after"),
])
def test_bad_input_is_one_line_and_exit_2(args, names, capsys):
    assert main(["wrap", *args]) == 2  # before anything starts: no harness, no proxy, no request
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and names in err and err.startswith("repro wrap: error:")


def test_attaching_to_a_running_harness_watches_it_and_never_signals_it(engine, tmp_path):
    with harness("async", engine.url + "/v1", think=0.3) as running:
        running.wait_for("done", 1)
        out = run_wrap("--hop", hop(engine), "--pid", str(running.pid), "--max-time", "3", *FAST, "--json",
                       "--out", str(tmp_path / "run"))
        assert running.process.poll() is None  # still running: wrap watched, never stopped it
        last = running.drain()[-1]["round"]
    assert out.code == 124 and out.result["bounded"] and out.result["harness_exit"] is None, out.stderr
    assert out.result["verdicts"] == []
    # About 3 s of rounds 0.3 s apart: several seen, none more than the harness itself began.
    seen = sum(c["rounds"] for c in out.result["connections"])
    assert 3 <= seen <= last


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_an_attached_watch_cleanly_and_never_reaches_the_harness(engine, tmp_path, sig):
    run = tmp_path / "run"
    with harness("async", engine.url + "/v1", think=0.3) as running:
        running.wait_for("done", 1)
        wrap = WrapProcess("--hop", hop(engine), "--pid", str(running.pid), "--max-time", "60", *FAST, "--json",
                           "--out", str(run))
        try:
            # Watching: it has seen rounds of the harness end (so its handlers are in place).
            wait_for(lambda: logged(run, "round_done"), timeout=30, what="a round_done in wrap's log")
            os.kill(wrap.process.pid, sig)
            out = wrap.finish(timeout=30)
        finally:
            wrap.kill()
        assert running.process.poll() is None  # never signalled: it runs on
        running.wait_for("done", running.drain()[-1]["round"] + 1)  # and goes on with its rounds
    assert out.code == 130 and out.result["interrupted"] == sig, out.stderr
    assert out.result["harness_exit"] is None and not out.result["bounded"]
    assert out.result["verdicts"] == []
    # What it saw is recorded: the rounds, and the run log closed with why it ended.
    assert sum(c["rounds"] for c in out.result["connections"]) >= 1
    finished = logged(run, "run_finished")
    assert [f["reason"] for f in finished] == [f"interrupted by {signal.Signals(sig).name}"]
