"""`repro audit`'s findings from measurements (repro/core/audit.py): which comparison is a finding,
on which side and at which hop, and what its evidence says."""

from __future__ import annotations

from repro.core.audit import Growth, HopAudit, RaceOutcome, audit_findings, kib, round_reaching

GROWTH = Growth(first_bytes=400, per_round_bytes=14 * 1024, how="test")


def hop(name: str, role: str = "proxy", *, keepalive: float | None = None, body: int | None = None,
        context: int | None = None, upstream: float | None = None) -> HopAudit:
    return HopAudit(name, role, keepalive_timeout_s=keepalive, keepalive_limit_s=75, keepalive_how="measured",
                    max_body_bytes=body, body_cap_bytes=4 << 20, body_step_bytes=4096, body_how="bisection",
                    context_tokens=context, context_how="max_model_len", upstream_keepalive_s=upstream,
                    upstream_how="config" if upstream else "")


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


def test_an_unmeasurable_upstream_pool_is_taken_as_the_clients():
    (f,) = findings([hop("nginx", keepalive=None), hop("engine", "engine", keepalive=1.0)], client="httpx", idle=5.0)
    assert f.where == "engine" and "taken as the client's (httpx: 5 s)" in f.evidence[1]


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
