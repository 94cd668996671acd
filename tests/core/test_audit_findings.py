"""`repro audit`'s findings and notes from measurements (repro/core/audit_findings.py): which comparison is a finding,
on which side and at which hop, and what its evidence says."""

from __future__ import annotations

from repro.core.audit_findings import audit_findings, audit_notes, cancel_findings, idle_stream_findings, round_reaching
from repro.core.audit_measurements import CancelRun, GaugeUnread, Growth, HopAudit, IdleStreamRun, RaceOutcome, Release, kib

GROWTH = Growth(first_bytes=400, per_round_bytes=14 * 1024, how="test")


def hop(name: str, role: str = "proxy", *, keepalive: float | None = None, body: int | None = None,
        context: int | None = None, upstream: float | None = None, server: str | None = None) -> HopAudit:
    return HopAudit(name, role, keepalive_timeout_s=keepalive, keepalive_limit_s=75, keepalive_how="measured",
                    max_body_bytes=body, body_cap_bytes=4 << 20, body_step_bytes=4096, body_how="bisection",
                    context_tokens=context, context_how="max_model_len", upstream_keepalive_s=upstream,
                    upstream_how="config" if upstream else "", server=server)


def findings(hops, client="aiohttp", idle=15.0, horizon=200, races=None):
    return audit_findings(hops, client=client, client_idle_s=idle, growth=GROWTH, horizon=horizon, races=races)


def test_round_reaching():
    assert round_reaching(1000, 100, 100) == 10
    assert round_reaching(1000, 1000, 100) == 1
    assert round_reaching(1000, 100, 0) is None
    # nginx's default 1 MiB, from 400 B at 14 KiB a round: round k sends 400 + (k - 1) * 14336 bytes
    assert round_reaching(1 << 20, 400, 14 * 1024) == 75


def test_client_pool_longer_than_the_first_hop_is_client_side_at_that_hop():
    (f,) = findings([hop("nginx", keepalive=2.0), hop("engine", "engine", keepalive=None)])
    assert (f.side, f.where, f.kind, f.suspected) == ("client", "nginx", "keepalive-mismatch", ("client", "nginx"))
    assert "aiohttp's pool keeps idle connections 15 s" in f.evidence[1]
    assert f.evidence[-1] == "race probe not run"


def test_client_pool_shorter_than_every_hop_is_no_finding():
    assert findings([hop("engine", "engine", keepalive=60.0)], client="httpx", idle=5.0) == []


def test_a_hop_still_open_at_the_limit_is_never_a_mismatch():
    """Not closed within the limit says nothing about when it closes: no finding drawn from it."""
    assert findings([hop("nginx", keepalive=None), hop("engine", "engine", keepalive=None)]) == []


def test_a_front_hop_pooling_longer_than_the_hop_behind_is_server_side_at_the_hop_behind():
    fs = findings([hop("smg", "router", keepalive=None, upstream=50.0), hop("sglang", "engine", keepalive=5.0)],
                  client="httpx", idle=1.0)
    (f,) = fs
    assert (f.side, f.where, f.suspected) == ("server", "sglang", ("smg", "sglang"))
    assert "smg pools idle upstream connections 50 s (config)" in f.evidence[1]


def notes(hops, client="httpx", idle=5.0, races=None):
    return audit_notes(hops, client=client, client_idle_s=idle, races=races)


def test_an_unmeasurable_upstream_pool_is_taken_as_the_clients_for_a_note_not_a_finding():
    """An assumed value is no finding: the mismatch it suggests is a setting to read (what the
    front hop runs named from its own Server header) and the audit to run with the value read."""
    hops = [hop("nginx", keepalive=None, server="nginx/1.22.1"),
            hop("engine", "engine", keepalive=1.0, server="Python/3.12 aiohttp/3.9")]
    assert findings(hops, client="httpx", idle=5.0) == []
    (n,) = notes(hops)
    assert (n.where, n.kind, n.assumed) == ("engine", "keepalive-mismatch", "nginx")
    assert "taken as the client's (httpx: 5 s)" in n.evidence[1] and n.evidence[-1] == "race probe not run"
    assert n.check.do.startswith("read nginx's keepalive_timeout in its upstream block")
    assert "--upstream-keepalive nginx=SECONDS" in n.check.confirm


def test_an_assumed_mismatch_the_race_probe_reproduced_is_a_finding():
    hops = [hop("nginx", keepalive=None), hop("engine", "engine", keepalive=1.0)]
    races = {("nginx", "engine"): RaceOutcome("nginx", 1.0, 8, 3, ("http 502",) * 3, same_connection=False)}
    (f,) = findings(hops, client="httpx", idle=5.0, races=races)
    assert (f.side, f.where, f.kind) == ("server", "engine", "keepalive-mismatch")
    assert f.evidence[-1].startswith("race probe reproduced it: 3 of 8")
    assert notes(hops, races=races) == []
    missed = {("nginx", "engine"): RaceOutcome("nginx", 1.0, 8, 0, same_connection=False)}
    assert findings(hops, client="httpx", idle=5.0, races=missed) == [] and len(notes(hops, races=missed)) == 1


def test_a_server_header_passed_on_from_behind_names_no_software():
    """HAProxy sends no Server header of its own: the engine's, passed on, is not the proxy's."""
    hops = [hop("haproxy", keepalive=None, server="uvicorn"), hop("engine", "engine", keepalive=1.0, server="uvicorn")]
    (n,) = notes(hops)
    assert n.check.do == "read how long haproxy keeps idle connections to engine (its upstream pool's idle timeout)"


def test_every_finding_has_its_next_action_with_the_value_to_set():
    (ka,) = findings([hop("nginx", keepalive=2.0)], client="httpx", idle=5.0)
    assert ka.next_action.do.startswith("set httpx's pool idle time below nginx's keep-alive of 2.0 s, e.g. 1.6 s")
    assert "--client-idle 1.6" in ka.next_action.confirm
    (up,) = findings([hop("smg", "router", upstream=50.0), hop("sglang", "engine", keepalive=5.0)], idle=1.0)
    assert up.next_action.do.startswith("set smg's idle time for its pooled connections to sglang below sglang's "
                                        "keep-alive of 5.0 s, e.g. 4 s")
    (body,) = findings([hop("nginx", body=1 << 20, server="nginx/1.22.1"), hop("engine", "engine")])
    # round 200's request from 400 B at 14 KiB a round: 400 + 199 * 14336 = 2853264 bytes (713316 tokens at 4)
    assert body.next_action.do.startswith("raise nginx's request-body limit to at least 2.7 MiB")
    assert "client_max_body_size" in body.next_action.do
    (ctx,) = findings([hop("engine", "engine", context=32768)])
    assert ctx.next_action.do.startswith("trim or summarise the conversation's history before round 11")
    assert "at least 713316 tokens" in ctx.next_action.do
    assert all(f.to_dict()["next_action"]["do"] for f in (ka, up, body, ctx))


def test_race_outcomes_are_stated_whether_or_not_reproduced():
    hops = [hop("engine", "engine", keepalive=3.0)]
    hit = findings(hops, races={("client", "engine"): RaceOutcome("engine", 3.0, 3, 2, ("reset", "reset"))})
    assert "race probe reproduced it: 2 of 3" in hit[0].evidence[-1] and "(2 reset)" in hit[0].evidence[-1]
    assert "on the same connection" in hit[0].evidence[-1]
    miss = findings(hops, races={("client", "engine"): RaceOutcome("engine", 3.0, 3, 0)})
    assert "race probe did not reproduce it: 3 of 3" in miss[0].evidence[-1]
    assert hit[0].side == miss[0].side == "client"


def test_a_body_limit_reached_within_the_horizon_is_a_finding_at_the_hop_that_owns_it():
    hops = [hop("nginx", keepalive=None, body=1 << 20), hop("engine", "engine")]
    (f,) = findings(hops)
    assert (f.side, f.where, f.kind) == ("client", "nginx", "body-limit-ahead")
    assert "refuses request bodies above 1 MiB" in f.evidence[0]
    assert "growing 14 KiB a round" in f.evidence[1] and "at round 75" in f.evidence[1]
    assert findings(hops, horizon=74) == []


def test_a_limit_seen_through_a_hop_belongs_to_the_hop_behind():
    """The front hop measures the smallest limit behind it: the finding names the hop that has it."""
    hops = [hop("nginx", body=65536), hop("haproxy", body=65536 - 100), hop("engine", "engine")]
    (f,) = findings(hops)
    assert f.where == "haproxy"


def test_the_engines_context_reached_within_the_horizon():
    (f,) = findings([hop("engine", "engine", context=32768)])
    # 32768 tokens at 4 characters: 131072 bytes, reached from 400 B at 14 KiB a round at round 11
    assert (f.side, f.where, f.kind) == ("client", "engine", "context-limit-ahead")
    assert "at round 11" in f.evidence[1]
    assert findings([hop("engine", "engine", context=32768)], horizon=10) == []


def test_sizes_read_as_people_read_them():
    assert (kib(408), kib(14 * 1024), kib(65536 - 4096), kib(1 << 20)) == ("408 B", "14 KiB", "60 KiB", "1 MiB")


def release(hop, *, released=None, why="", baseline=0.0, during=1.0, last=1.0, signal="in-flight"):
    return Release(hop, signal, baseline, during, released_s=released, last=None if released else last, last_s=10.0,
                   why=why, unread=GaugeUnread.NO_METRICS_PAGE if why else None)


def test_a_hop_that_keeps_a_cancelled_stream_is_a_server_side_leak_there():
    runs = [CancelRun("nginx", 3, (release("nginx", released=0.2), release("engine")), 10.0),
            CancelRun("engine", 3, (release("engine", baseline=1.0, during=2.0, last=2.0),), 10.0)]
    (f,) = cancel_findings(runs)
    assert (f.side, f.where, f.kind) == ("server", "engine", "cancel-leak")
    assert "a stream sent to nginx closed after 3 events: engine kept it" in f.evidence
    assert "engine in-flight: 1 before, 2 while streaming, still 2 at 10.0 s after the close (deadline 10 s)" \
        in f.evidence


def test_a_hop_behind_that_lets_go_when_told_puts_the_leak_on_the_hop_that_did_not_tell_it():
    """The engine releases a stream cancelled at itself, but keeps one cancelled through the router:
    the router never passed the close on."""
    runs = [CancelRun("router", 3, (release("router", released=0.3), release("engine")), 10.0),
            CancelRun("engine", 3, (release("engine", released=0.2),), 10.0)]
    (f,) = cancel_findings(runs)
    assert f.where == "router" and "router did not pass the close on" in f.evidence[0]
    assert f.next_action.do.startswith("make router close its connection to the hop behind when its client closes")


def test_a_gauge_not_read_is_never_a_release_nor_a_leak():
    runs = [CancelRun("nginx", 3, (release("nginx", why="no metrics page"), release("engine", released=0.2)), 10.0)]
    assert cancel_findings(runs) == []
    assert runs[0].releases[0].text(10.0) == "nginx in-flight: not measured (no metrics page)"
    assert not runs[0].releases[0].kept and not runs[0].releases[0].measured


def test_a_stream_that_could_not_be_cancelled_is_no_finding():
    assert cancel_findings([CancelRun("engine", 1, (), 10.0, why="the stream ended")]) == []


def idle(entry, *, cut=None, first=None, why=""):
    return IdleStreamRun(entry, 60.0, cut_s=cut, first_token_s=first, how="closed (eof)" if cut else "first event",
                         why=why)


def test_the_hop_that_cuts_a_silent_stream_below_the_budget_is_found():
    (f,) = idle_stream_findings([idle("nginx", cut=2.0), idle("engine", first=60.0)], 60.0)
    assert (f.side, f.where, f.kind) == ("server", "nginx", "idle-stream-cut")
    assert "cut after 2.0 s (closed (eof)), below the time to first token budget of 60 s" in f.evidence[0]
    assert "sent to engine, behind it: its first event came after 60.0 s" in f.evidence[1]
    assert f.next_action.do.startswith("raise nginx's idle timeout for an answer with no byte yet above 60 s")


def test_a_cut_made_behind_is_the_hop_behinds_not_the_front_ones():
    fs = idle_stream_findings([idle("nginx", cut=30.1), idle("haproxy", cut=30.0), idle("engine", first=60.0)], 60.0)
    assert [f.where for f in fs] == ["haproxy"]


def test_no_cut_or_no_measurement_is_no_finding():
    assert idle_stream_findings([idle("nginx", first=60.0), idle("engine", why="not the sim")], 60.0) == []


def test_a_hop_refusing_every_body_is_found_from_round_one_at_the_hop_that_refuses():
    refusing = HopAudit("engine", "engine", body_refuses_all=True, body_how="refuses every body: even the smallest "
                                                                            "chat request (96 B) was refused (http 413)")
    front = HopAudit("nginx", "proxy", body_refuses_all=True, body_how=refusing.body_how)
    (f,) = findings([front, refusing])
    assert (f.side, f.where, f.kind) == ("client", "engine", "body-limit-ahead")
    assert "every request is refused, from round 1" in f.evidence[1]
