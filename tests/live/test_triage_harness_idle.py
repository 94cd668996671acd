"""`repro triage --pid` on a harness deadlocked in its own code: real openai SDK, real nginx or
socat, the simulated engine. The harness (tests/harnesses/openai_chat.py) runs two rounds and
then deadlocks: a threading.Lock taken twice (sync, or the async client's own event-loop thread),
or an asyncio.Event nothing sets. Both canaries answer and no hop holds anything: the verdict is
`harness-idle` at the harness, never a hop for its idle pooled connection, with the thread that
waits and its Python stack (py-spy) in the evidence.
"""

from __future__ import annotations

import contextlib
import time

import pytest

from repro.sim import SimConfig, serve_in_thread
from tests.support.claims import unbacked_claims
from tests.support.harness_process import harness, run_triage
from tests.support.stacks import nginx, socat, started

pytestmark = [pytest.mark.network, pytest.mark.timeout(120), pytest.mark.slow]
LAUNCHERS = {"nginx": nginx, "socat": socat}


def triage_deadlocked(client: str, how: str, proxy_kind: str, tmp_path) -> dict:
    with serve_in_thread(SimConfig(keepalive=60)) as sim, \
            started(LAUNCHERS[proxy_kind], sim.url, tmp_path) as proxy, \
            harness(client, proxy.url + "/v1", think=0.2, extra=("--deadlock-after", "2", "--deadlock", how)) as h:
        deadlocked = h.wait_for("deadlocked", 2)["t"]
        time.sleep(1.0)  # stuck for a while before anyone looks, as in an incident
        metrics = f",metrics={proxy.metrics_url}" if proxy.metrics_url else ""
        code, result, err, began, ended = run_triage(
            "--pid", str(h.pid), "--hop", f"name={proxy_kind},url={proxy.url}/v1{metrics},role=proxy",
            "--hop", f"name=engine-0,url={sim.url},role=engine", "--window", "2", "--json")
        assert not [line for line in h.drain() if line["event"] == "start" and line["round"] == 3], \
            "the harness was not deadlocked"
        return {"code": code, "result": result, "stderr": err, "pid": h.pid, "deadlocked": deadlocked,
                "began": began, "ended": ended, "proxy": proxy_kind}


CASES = [("async", "event", "nginx"), ("async", "lock", "socat"), ("sync", "lock", "nginx")]


@pytest.fixture(scope="module", params=CASES, ids=["-".join(c) for c in CASES])
def deadlocked(request, tmp_path_factory) -> dict:
    client, how, proxy_kind = request.param
    return {**triage_deadlocked(client, how, proxy_kind, tmp_path_factory.mktemp(proxy_kind)),
            "client": client, "how": how}


def test_a_harness_deadlocked_in_its_own_code_is_harness_idle_at_the_harness(deadlocked):
    out = deadlocked
    assert out["code"] == 10, out["stderr"]
    verdict = out["result"]["verdicts"][0]
    assert (verdict["side"], verdict["where"], verdict["kind"], verdict["confidence"]) == \
        ("client", "harness", "harness-idle", "high"), verdict["summary"]
    assert "it is not waiting on the network" in verdict["summary"]
    hops = {h["name"]: h for h in out["result"]["hops"]}
    assert hops[out["proxy"]]["canary"]["ok"] and hops["engine-0"]["canary"]["ok"], out["stderr"]
    assert unbacked_claims(verdict) == []
    assert verdict["phase"] is None  # no request outstanding: no phase to have


def test_the_idle_pooled_connection_is_shown_and_names_no_hop(deadlocked):
    out = deadlocked
    verdict = out["result"]["verdicts"][0]
    (read,) = out["result"]["sockets"]
    to_proxy = [c for c in read["connections"] if c["hop"] == out["proxy"] and c["state"] == "ESTABLISHED"]
    if out["client"] == "async":
        # AsyncOpenAI keeps its one connection alive: idle, its last request answered (bytes came
        # after it), nothing queued either way; the case that was judged connection-wedged at the proxy.
        (conn,) = to_proxy
        assert conn["rqueue"] == 0 and conn["wqueue"] == 0 and conn["bytes_received"] > 0, conn
        assert conn["last_data_recv_s"] <= conn["last_data_sent_s"], conn
        assert f"{out['proxy']} {conn['local']}: its last request answered" in verdict["summary"]
        # Observed, not triage's window: quiet since the deadlock, read at triage's last look.
        assert out["began"] - out["deadlocked"] - 0.3 <= verdict["stalled_for_s"] \
            <= out["ended"] - out["deadlocked"] + 0.5, (verdict["stalled_for_s"], out)
    else:
        # OpenAI (sync) closes its connection after each streamed completion: none is open.
        assert to_proxy == [], to_proxy
        assert f"pid {out['pid']} has no connection open to any hop" in verdict["summary"]
        assert verdict["stalled_for_s"] is None


def test_the_waiting_thread_and_its_python_stack_are_the_evidence(deadlocked):
    out = deadlocked
    verdict = out["result"]["verdicts"][0]
    (read,) = out["result"]["threads"]
    assert read["pid"] == out["pid"] and read["error"] is None and read["stacks_by"].startswith("py-spy"), read
    main = next(t for t in read["threads"] if t["tid"] == out["pid"])
    tcp = {c["inode"] for c in out["result"]["sockets"][0]["connections"]}
    assert not any(tcp.intersection(t["sockets"]) for t in read["threads"]), read  # no thread on a connection
    if out["how"] == "lock":
        # The non-reentrant lock taken again: the thread sleeps in the kernel's futex, in compact_history.
        assert main["syscall"] == "futex" and main["state"] == "S", main
        assert main["stack"][0].startswith("compact_history (openai_chat.py:"), main["stack"]
        assert any(frame.startswith("save_history (openai_chat.py:") for frame in main["stack"]), main["stack"]
    else:
        # The event never set: the loop idles in epoll_wait; the pooled connection is not even watched
        # (anyio pauses reading between receives), so no thread waits on the network.
        assert main["syscall"] in ("epoll_wait", "epoll_pwait"), main
        assert main["stack"][0].startswith("EpollSelector.select (selectors.py:"), main["stack"]
    entry = next(e for e in verdict["evidence"] if e["signal"].startswith(f"pid {out['pid']} thread {out['pid']} "))
    assert entry["hop"] == "harness" and main["stack"][0] in entry["value"], entry
    assert main["stack"][0] in verdict["summary"]


@pytest.mark.parametrize("client", ["async", "sync"])
def test_a_harness_running_rounds_is_not_judged_idle(client, tmp_path):
    """A healthy harness pointed at by mistake, between rounds at triage's looks or mid-round: its
    connections carry bytes, open and close, and its threads wake between the looks. Nothing is
    stuck: no verdict, exit 0, and what moved is said."""
    with serve_in_thread(SimConfig(keepalive=60)) as sim, started(nginx, sim.url, tmp_path) as proxy, \
            harness(client, proxy.url + "/v1", think=0.3) as h:
        h.wait_for("done", 2)
        code, result, err, _, _ = run_triage(
            "--pid", str(h.pid), "--hop", f"name=nginx,url={proxy.url}/v1,metrics={proxy.metrics_url},role=proxy",
            "--hop", f"name=engine-0,url={sim.url},role=engine", "--window", "2", "--json")
        rounds_done = max(line["round"] for line in h.drain() if line["event"] == "done")
    assert rounds_done >= 5, "the harness did not keep running"
    assert code == 0 and result["verdicts"] == [], (result.get("verdicts"), err)
    moved = [line for line in result["ruled_out"] if line.startswith("harness: in use during the window (")]
    assert moved, result["ruled_out"]


@pytest.mark.parametrize("front", ["nginx", "engine"])
def test_a_keepalive_connection_the_server_closed_is_idle_not_an_overloaded_client(front, tmp_path):
    """Issue 31, defect 1. The harness deadlocks between rounds; its one pooled keep-alive connection
    is closed by the server (nginx's keepalive_timeout, or the engine's own, 1 s): CLOSE_WAIT, the
    peer's FIN unread, which sock_diag counts as one byte of the receive queue. That FIN is not data
    the harness fails to read: not client-overloaded, but a harness idle in its own code."""
    with serve_in_thread(SimConfig(keepalive=1 if front == "engine" else 60)) as sim, \
            contextlib.ExitStack() as stack:
        if front == "nginx":
            proxy = stack.enter_context(started(nginx, sim.url, tmp_path, keepalive_timeout=1))
            url, hops = proxy.url, ["--hop", f"name=nginx,url={proxy.url}/v1,metrics={proxy.metrics_url},role=proxy"]
        else:
            url, hops = sim.url, []
        h = stack.enter_context(harness("async", url + "/v1", think=0.2,
                                        extra=("--deadlock-after", "2", "--deadlock", "lock")))
        h.wait_for("deadlocked", 2)
        time.sleep(2.0)  # past the server's keep-alive timeout: it closed the idle connection
        code, result, err, _, _ = run_triage(
            "--pid", str(h.pid), *hops, "--hop", f"name=engine-0,url={sim.url},role=engine", "--window", "2", "--json")
    (read,) = result["sockets"]
    closed = [c for c in read["connections"] if c["state"] == "CLOSE_WAIT" and c["hop"]]
    assert closed and all(c["rqueue"] == 0 for c in closed), read["connections"]  # the FIN is not counted
    assert code == 10, err
    verdict = result["verdicts"][0]
    assert (verdict["side"], verdict["where"], verdict["kind"]) == ("client", "harness", "harness-idle"), \
        verdict["summary"]
    assert "CLOSE_WAIT: closed by one side" in verdict["summary"] and "unread" not in verdict["summary"]
    assert unbacked_claims(verdict) == []
