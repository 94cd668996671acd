"""`repro audit` on real stacks: nginx and HAProxy with short keep-alive timeouts and small body
limits in front of the simulated engine, measured within the tolerances below; a healthy stack with
no finding; nginx pooling upstream connections longer than the engine keeps them, a mismatch."""

from __future__ import annotations

import pytest

from repro.lab.router_launcher import router_available, start_router
from repro.sim import SimConfig, start_sim_process
from tests.support.audits import CAP, STEP, by_name, run_audit
from tests.support.runs import repro_run
from tests.support.stacks import caddy, haproxy, nginx, started

pytestmark = [pytest.mark.network, pytest.mark.timeout(120)]

# A timeout measured from the end of the answer to the close: the hop's timer runs from about the same
# instant, and the close reaches us over loopback. nginx and HAProxy check their timers to the millisecond.
KEEPALIVE_TOLERANCE_S = 0.5


def audit(capsys, *flags: str) -> tuple[int, dict, str]:
    """Keep-alive and bodies: cancel runs and idle streams are measured in test_audit_cancel and _idle_stream."""
    return run_audit(capsys, *flags, "--no-cancel", "--no-idle-stream")


def test_nginx_keepalive_and_body_limit_measured(tmp_path, capsys):
    with start_sim_process(SimConfig(keepalive=5.0)) as sim, \
            started(nginx, sim.url, tmp_path, keepalive_timeout=2, client_max_body_size="64k") as proxy:
        code, result, err = audit(capsys, "--hop", f"name=nginx,url={proxy.url},role=proxy",
                                  "--hop", f"name=engine-0,url={sim.url},role=engine", "--keepalive-limit", "8",
                                  "--no-race")
    hops = by_name(result)
    assert abs(hops["nginx"]["keepalive_timeout_s"] - 2.0) <= KEEPALIVE_TOLERANCE_S, hops["nginx"]
    assert abs(hops["engine-0"]["keepalive_timeout_s"] - 5.0) <= KEEPALIVE_TOLERANCE_S, hops["engine-0"]
    # nginx refuses a body longer than 64 KiB: the largest accepted is within one step below it
    assert 65536 - STEP < hops["nginx"]["max_body_bytes"] <= 65536, hops["nginx"]
    assert hops["engine-0"]["max_body_bytes"] is None and hops["engine-0"]["body_cap_bytes"] == CAP
    assert hops["engine-0"]["context_tokens"] == 32768 and hops["nginx"]["context_tokens"] is None
    assert "audit load:" in err
    kinds = {(f["side"], f["where"], f["kind"]) for f in result["findings"]}
    # aiohttp's 15 s pool over nginx's 2 s; 64 KiB reached at about round 160 at repro run's default growth
    assert ("client", "nginx", "keepalive-mismatch") in kinds
    assert ("client", "nginx", "body-limit-ahead") in kinds
    # nginx's upstream pool over the engine's 5 s rests on an assumed value (the client's 15 s): a note,
    # not a finding, so not the exit status 11 it was
    assert [(n["where"], n["assumed"]) for n in result["notes"]] == [("engine-0", "nginx")]
    assert code == 10


def test_haproxy_keepalive_and_body_limit_measured(tmp_path, capsys):
    with start_sim_process(SimConfig(keepalive=5.0)) as sim, \
            started(haproxy, sim.url, tmp_path, timeout_http_keep_alive=1, max_body_bytes=65536) as proxy:
        code, result, _ = audit(capsys, "--hop", f"name=haproxy,url={proxy.url},role=proxy",
                                "--keepalive-limit", "4", "--no-race", "--horizon", "100")
    (hop,) = result["hops"]
    assert abs(hop["keepalive_timeout_s"] - 1.0) <= KEEPALIVE_TOLERANCE_S, hop
    assert 65536 - STEP < hop["max_body_bytes"] <= 65536, hop
    # a horizon of 100 rounds does not reach 64 KiB: the limit alone is no finding
    assert [f["kind"] for f in result["findings"]] == ["keepalive-mismatch"]
    assert code == 10


def test_a_healthy_stack_has_no_finding(tmp_path, capsys):
    with start_sim_process(SimConfig(keepalive=20.0)) as sim:
        code, result, _ = audit(capsys, "--hop", f"name=engine-0,url={sim.url},role=engine", "--client", "httpx",
                                "--keepalive-limit", "6")
    (hop,) = result["hops"]
    assert hop["keepalive_timeout_s"] is None and hop["keepalive_limit_s"] == 6
    assert hop["max_body_bytes"] is None
    assert result["findings"] == [] and code == 0


def test_nginx_pooling_upstream_longer_than_the_engine_is_a_mismatch_at_the_engine(tmp_path, capsys):
    """nginx keeps idle upstream connections 60 s (`upstream { keepalive 16; }`, keepalive_timeout's
    default there); the engine closes them after 1 s. The race probe runs; its evidence says what it saw."""
    with start_sim_process(SimConfig(keepalive=1.0)) as sim, \
            started(nginx, sim.url, tmp_path, keepalive_timeout=30, upstream_keepalive_timeout=60) as proxy:
        code, result, _ = audit(capsys, "--hop", f"name=nginx,url={proxy.url},role=proxy",
                                "--hop", f"name=engine-0,url={sim.url},role=engine", "--client", "httpx",
                                "--upstream-keepalive", "nginx=60", "--keepalive-limit", "4")
    hops = by_name(result)
    assert hops["nginx"]["keepalive_timeout_s"] is None  # 30 s: still open at the 4 s limit
    assert abs(hops["engine-0"]["keepalive_timeout_s"] - 1.0) <= KEEPALIVE_TOLERANCE_S
    (finding,) = [f for f in result["findings"] if f["kind"] == "keepalive-mismatch"]
    assert (finding["side"], finding["where"]) == ("server", "engine-0"), finding
    assert "nginx pools idle upstream connections 60 s" in finding["evidence"][1]
    assert finding["evidence"][-1].startswith(("race probe reproduced it", "race probe did not reproduce it"))
    assert code == 11


@pytest.mark.skipif(not router_available("smg"), reason="smg is not installed")
def test_the_smg_router_pooling_over_an_engine_with_a_short_keepalive_is_a_mismatch(capsys):
    """sglang#20851: the router keeps pooled connections to the engine (50 s) longer than the engine keeps
    them (here 1 s). A finding whether or not the race probe reproduced it. From outside, on loopback, it
    does not: smg's HTTP client (reqwest over hyper) drops a pooled connection as soon as the engine's
    close arrives, re-sends a request that met a closed connection before any byte was written, and smg
    retries the 500 it makes of a failed send up to 5 times (--retry-max-retries); the window left (the
    request written while the close is in flight) is tens of microseconds here. Measured: 20 pairs one at
    a time, 0.2 ms apart around the timeout, all served, smg_worker_retries_total{endpoint="chat"} 0."""
    with start_sim_process(SimConfig(keepalive=1.0)) as sim, \
            start_router([sim.url], kind="smg", policy="round_robin") as router:
        code, result, _ = audit(capsys, "--hop", f"name=smg,url={router.url},role=router",
                                "--hop", f"name=engine-0,url={sim.url},role=engine", "--client", "httpx",
                                "--upstream-keepalive", "smg=50", "--keepalive-limit", "4")
    (finding,) = result["findings"]
    assert (finding["side"], finding["where"], finding["kind"]) == ("server", "engine-0", "keepalive-mismatch")
    assert "smg pools idle upstream connections 50 s" in finding["evidence"][1]
    assert "race probe" in finding["evidence"][-1] and "sent to smg" in finding["evidence"][-1]
    assert code == 11


def test_the_growth_per_round_comes_from_a_recorded_run(tmp_path, capsys):
    """A run of 1500-character turns grows its prompt by at least that a round: the projection uses it."""
    code, _, err = repro_run("--prompt-chars", "1500", "--rounds", "4", "--conversations", "2",
                             "--out", str(tmp_path / "run"))
    assert code == 0, err[-2000:]
    with start_sim_process(SimConfig(keepalive=20.0, context_length=8192)) as sim:
        code, result, _ = audit(capsys, "--hop", f"name=engine-0,url={sim.url},role=engine", "--client", "httpx",
                                "--keepalive-limit", "1", "--no-race", "--run", str(tmp_path / "run"))
    growth = result["growth"]
    assert 1500 <= growth["per_round_bytes"] <= 1500 + 32 * 8, growth
    assert growth["how"].startswith("run run: 2 conversation(s)")
    (finding,) = result["findings"]
    # 8192 tokens at 4 characters: 32768 bytes, reached at about round 21 at ~1.6 KB a round
    assert (finding["side"], finding["where"], finding["kind"]) == ("client", "engine-0", "context-limit-ahead")
    assert code == 10


def test_a_hop_that_cannot_be_measured_is_no_clean_bill(capsys):
    """Nothing listening: every measurement says why it was not taken, and the exit is 12, never 0."""
    from repro.lab.stacks import free_port

    url = f"http://127.0.0.1:{free_port()}"
    code, result, _ = audit(capsys, "--hop", f"name=engine-0,url={url},role=engine", "--model", "m",
                            "--keepalive-limit", "1")
    (hop,) = result["hops"]
    assert hop["keepalive_timeout_s"] is None and hop["keepalive_how"].startswith("not measured: could not connect")
    assert [line.split(":")[1].strip() for line in result["unmeasured"]] == ["keep-alive", "body limit"]
    assert result["findings"] == [] and code == 12


def test_caddy_idle_timeout_and_body_limit_measured(tmp_path, capsys):
    """Caddy's server idle_timeout 2s and request_body max_size 64 KiB (its own 413, an empty body)."""
    with start_sim_process(SimConfig(keepalive=5.0)) as sim, \
            started(caddy, sim.url, tmp_path, idle_timeout=2, max_body_bytes=65536) as proxy:
        code, result, _ = audit(capsys, "--hop", f"name=caddy,url={proxy.url},role=proxy", "--keepalive-limit", "4",
                                "--no-race", "--client", "httpx")
    (hop,) = result["hops"]
    assert abs(hop["keepalive_timeout_s"] - 2.0) <= KEEPALIVE_TOLERANCE_S, hop
    assert 65536 - STEP < hop["max_body_bytes"] <= 65536, hop
    assert "http 413" in hop["body_how"]
    # httpx's 5 s pool over Caddy's 2 s; 64 KiB reached at about round 160 at repro run's default growth
    kinds = {(f["side"], f["where"], f["kind"]) for f in result["findings"]}
    assert kinds == {("client", "caddy", "keepalive-mismatch"), ("client", "caddy", "body-limit-ahead")}
    assert code == 10


def test_a_hop_refusing_every_body_says_so_not_a_limit_of_zero(tmp_path, capsys):
    """nginx client_max_body_size 10 bytes: even the smallest chat request is refused with 413. The
    search says so, and every round will be refused: a finding at round 1, never "max body 0"."""
    with start_sim_process(SimConfig()) as sim, \
            started(nginx, sim.url, tmp_path, client_max_body_size="10") as proxy:
        code, result, _ = audit(capsys, "--hop", f"name=nginx,url={proxy.url},role=proxy",
                                "--hop", f"name=engine-0,url={sim.url},role=engine", "--keepalive-limit", "1",
                                "--no-race", "--client", "httpx")
    hops = by_name(result)
    assert hops["nginx"]["max_body_bytes"] is None and hops["nginx"]["body_refuses_all"] is True
    assert hops["nginx"]["body_how"].startswith("refuses every body: even the smallest chat request")
    assert "http 413" in hops["nginx"]["body_how"]
    assert result["unmeasured"] == []
    (finding,) = result["findings"]
    assert (finding["side"], finding["where"], finding["kind"]) == ("client", "nginx", "body-limit-ahead")
    assert "every request is refused, from round 1" in finding["evidence"][1]
    assert code == 10


def test_the_race_probe_reproduces_a_client_pool_outliving_the_first_hop(tmp_path, capsys):
    """nginx keepalive_timeout 1s under httpx's 5 s pool: the probe's second requests, on the first's
    connection, reused without checking it is open (as a pool that does not watch its idle connections),
    about the measured timeout later: those sent past nginx's close fail."""
    with start_sim_process(SimConfig(keepalive=20.0)) as sim, \
            started(nginx, sim.url, tmp_path, keepalive_timeout=1) as proxy:
        code, result, _ = audit(capsys, "--hop", f"name=nginx,url={proxy.url},role=proxy", "--client", "httpx",
                                "--keepalive-limit", "3")
    (finding,) = result["findings"]
    assert (finding["side"], finding["where"], finding["kind"]) == ("client", "nginx", "keepalive-mismatch")
    assert finding["evidence"][-1].startswith("race probe reproduced it: "), finding["evidence"]
    assert "on the same connection (reused without checking it was still open)" in finding["evidence"][-1]
    assert result["costs"]["nginx"]["race client->nginx"]["requests"] == 16
    assert code == 10


def test_an_assumed_upstream_pool_is_a_note_to_check_not_a_finding(tmp_path, capsys):
    """nginx with no `keepalive N` in its upstream block reuses no upstream connection; its pool is not
    measurable from outside, so comparing the engine's 5 s with the client's 15 s rests on an assumed
    value. The race probe does not reproduce it: a note naming nginx's upstream keepalive_timeout, no
    finding, and the exit is not 11 (the client's pool over nginx's 2 s stays a client-side finding)."""
    with start_sim_process(SimConfig(keepalive=5.0)) as sim, \
            started(nginx, sim.url, tmp_path, keepalive_timeout=2, upstream_pool=None) as proxy:
        code, result, _ = audit(capsys, "--hop", f"name=nginx,url={proxy.url},role=proxy",
                                "--hop", f"name=engine-0,url={sim.url},role=engine", "--keepalive-limit", "7")
    kinds = {(f["side"], f["where"], f["kind"]) for f in result["findings"]}
    assert ("server", "engine-0", "keepalive-mismatch") not in kinds, result["findings"]
    assert ("client", "nginx", "keepalive-mismatch") in kinds
    (note,) = result["notes"]
    assert (note["where"], note["kind"], note["assumed"]) == ("engine-0", "keepalive-mismatch", "nginx")
    assert "keepalive_timeout in its upstream block" in note["check"], note
    assert "--upstream-keepalive nginx=" in note["confirm"], note
    assert result["hops"][0]["server"].startswith("nginx"), result["hops"][0]
    assert code == 10


def test_every_finding_carries_its_next_action(tmp_path, capsys, monkeypatch):
    """What to change, on which hop, to what value: in the JSON and in the printed report, where every
    line (the load on stderr included) fits 80 columns, no number parted from its unit."""
    from repro.cli import main
    from tests.support.golden import assert_fits, assert_units_kept

    monkeypatch.setenv("COLUMNS", "80")

    with start_sim_process(SimConfig(keepalive=20.0)) as sim, \
            started(nginx, sim.url, tmp_path, keepalive_timeout=1, client_max_body_size="64k") as proxy:
        flags = ["--hop", f"name=nginx,url={proxy.url},role=proxy", "--client", "httpx", "--keepalive-limit", "3",
                 "--no-race", "--no-cancel", "--no-idle-stream"]
        code, result, _ = audit(capsys, *flags)
        assert main(["audit", *flags, "--body-cap", "262144", "--body-step", "4096"]) == code
        printed, err = capsys.readouterr()
    for text in (printed, err):
        assert_fits(text, 80)
        assert_units_kept(text)
    by_kind = {f["kind"]: f for f in result["findings"]}
    keepalive = by_kind["keepalive-mismatch"]["next_action"]
    assert "httpx's pool idle time below nginx's" in keepalive["do"] and "keepalive_expiry" in keepalive["do"]
    assert "--client-idle" in keepalive["confirm"]
    body = by_kind["body-limit-ahead"]["next_action"]
    assert "raise nginx's request-body limit to at least" in body["do"] and "client_max_body_size" in body["do"]
    assert "next:" in printed and "confirm:" in printed
    assert " ".join(printed.split()).count("raise nginx's request-body limit") == 1
