"""classify() over evidence built from the real payload types: every kind, and the cases built to mislead."""

import dataclasses

import msgspec
import pytest

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.classify import classify
from repro.core.evidence import Evidence, HopEvidence
from repro.core.snapshot import Snapshot
from repro.core.socket_state import SocketState

STALL = ev.RoundStalled(conv=1, round=3, phase="before-first-byte", t=20.0, stalled_for_s=5.0, started_t=15.0,
                        last_progress_t=15.0, local="127.0.0.1:50000", reused=True)


def sample(t, hop="engine-0", **fields):
    return ev.ProbeSample(t=t, hop=hop, snapshot=Snapshot(hop=hop, ok=True, **fields))


def engine(name="engine-0", *, running=0, queued=0, counters=(100, 100, 100), stale=(), canary=True, health=200,
           failure="timeout"):
    samples = tuple(sample(14.0 + 3 * i, name, running=running, queued=queued, itl_count=c, stale=list(stale))
                    for i, c in enumerate(counters))
    return HopEvidence(name, "engine", samples, _canary(name, canary, health, failure))


def _canary(hop, ok, health=200, failure="timeout"):
    if ok is None:
        return None
    outcome = CanaryOutcome(hop=hop, url="http://127.0.0.1:1", ok=ok, status=200 if ok else None, total_s=0.05,
                            health_status=health, failure=None if ok else failure,
                            error=None if ok else "no first byte within 2 s")
    return ev.CanaryResult(t=20.1, hop=hop, outcome=outcome)


def proxy(*, held=0, open_flows=1, canary=True):
    return HopEvidence("proxy", "proxy", (sample(20.0, "proxy", in_flight=open_flows, held=held),),
                       _canary("proxy", canary))


def router(*, active=1, canary=True):
    return HopEvidence("router", "router", (sample(20.0, "router", in_flight=active),), _canary("router", canary))


def judge(*hops, stall=STALL, lag=5.0, flows=()):
    return classify(Evidence(stall=stall, hops=tuple(hops), stall_after=5.0, loop_lag_p99_ms=lag, flows=flows))


def test_wedged_keepalive_connection_behind_a_proxy():
    v = judge(proxy(held=1), engine())
    assert (v.side, v.where, v.kind, v.confidence) == ("client", "proxy", "connection-wedged", "high")
    assert any("engine-0: idle" in r and "fresh canary 200" in r for r in v.ruled_out)
    # The hop blamed is where the fault is, never also ruled out (issue 31, defect 3): what its
    # fresh canary showed is one of its evidence entries.
    assert not any(r.startswith("proxy") for r in v.ruled_out), v.ruled_out
    assert {"hop": "proxy", "signal": "canary", "value": "fresh canary 200 in 0.05 s"} in [
        {k: e[k] for k in ("hop", "signal", "value")} for e in v.evidence], v.evidence
    assert v.phase == "before-first-byte" and v.conversation == 1 and v.round == 3


def test_wedged_connection_with_no_proxy_names_the_connection():
    v = judge(engine())
    assert (v.side, v.where, v.kind) == ("client", "connection", "connection-wedged")


def test_proxy_that_withholds_every_request():
    v = judge(proxy(held=3, canary=False), engine())
    assert (v.side, v.where, v.kind) == ("client", "proxy", "request-withheld")


def test_proxy_that_withholds_the_response_after_the_engine_finished():
    v = judge(proxy(held=1, canary=False), engine(counters=(100, 116, 116)),
              flows=({"event": "request_seen"}, {"event": "forwarded"}, {"event": "held", "stage": "response"}))
    assert (v.side, v.where, v.kind) == ("client", "proxy", "response-withheld")


def test_truncated_stream_mid_way_is_response_withheld():
    stall = msgspec.structs.replace(STALL, phase="mid-stream", events=3)
    v = judge(proxy(held=1), engine(), stall=stall)
    assert (v.side, v.where, v.kind, v.phase) == ("client", "proxy", "response-withheld", "mid-stream")


def test_end_of_body_withheld_after_done():
    stall = msgspec.structs.replace(STALL, phase="after-last-event", events=20)
    v = judge(proxy(held=1), engine(), stall=stall)
    assert (v.kind, v.phase) == ("response-withheld", "after-last-event")
    assert "end of the body" in v.summary


def test_router_withholds_when_its_canary_fails_and_engines_serve():
    v = judge(router(canary=False), engine(), engine("engine-1"))
    assert (v.side, v.where, v.kind) == ("client", "router", "request-withheld")


def test_router_holding_requests_for_idle_engines_is_named_by_the_ledger():
    v = judge(router(active=2), engine(), engine("engine-1"))
    assert (v.side, v.where) == ("client", "router")
    assert any(e["hop"] == "router" and e["signal"] == "holds requests" for e in v.evidence)


def test_hung_engine():
    v = judge(proxy(), engine(running=4, canary=False))
    assert (v.side, v.where, v.kind, v.confidence) == ("server", "engine-0", "engine-hung", "high")


def test_saturated_engine():
    v = judge(engine(running=1, queued=6, counters=(100, 130, 160), canary=False))
    assert (v.side, v.kind) == ("server", "engine-saturated")


def test_slow_engine():
    v = judge(engine(running=1, counters=(100, 100.3, 100.6), canary=True))
    assert (v.side, v.kind) == ("server", "engine-slow")


def test_idle_engine_but_server_at_fault_frontend_lost():
    """sglang#33858: gauges at zero and /health 200, yet no request is ever answered."""
    v = judge(engine(running=0, queued=0, canary=False, health=200))
    assert (v.side, v.where, v.kind) == ("server", "engine-0", "engine-frontend-lost")


def test_unreachable_engine():
    v = judge(engine(canary=False, failure="connect", health=None))
    assert (v.side, v.kind) == ("server", "engine-unreachable")


def refused_engine(page_urls: tuple[str | None, ...]) -> HopEvidence:
    """An engine whose fresh canary to 127.0.0.1:30000 was refused; its metrics page read at each
    of `page_urls` (None: that read failed), one read a second from t=13."""
    samples = tuple(ev.ProbeSample(t=13.0 + i, hop="engine-0", snapshot=Snapshot(
        hop="engine-0", url=url or "http://127.0.0.1:30000/metrics", ok=url is not None, running=0, queued=0,
        error=None if url else "connect: connection refused")) for i, url in enumerate(page_urls))
    outcome = CanaryOutcome(hop="engine-0", url="http://127.0.0.1:30000/v1/chat/completions", ok=False,
                            failure="connect", refused=True, error="connect: connection refused")
    return HopEvidence("engine-0", "engine", samples, ev.CanaryResult(t=20.1, hop="engine-0", outcome=outcome))


def test_a_refused_engine_never_seen_answering_says_what_was_seen_not_an_outage():
    """Issue 31: a mistyped port read as an outage. Refused where nothing was ever seen answering:
    nothing listens there, the engine is down or the port is wrong, and the next action says to
    check the port. Still server side (docs/verdicts.md#verdict-kinds: a dead engine is engine-unreachable, exit 11), but
    not with high confidence: the evidence fits a wrong port as well."""
    v = judge(refused_engine((None, None, None, None)))
    assert (v.side, v.where, v.kind, v.confidence) == ("server", "engine-0", "engine-unreachable", "medium")
    assert ("nothing listens on 127.0.0.1:30000 (connection refused): the engine engine-0 is down, or the port is "
            "wrong") in v.summary, v.summary
    assert "check the port" in v.to_dict()["next_action"]["do"]


def test_a_refused_engine_whose_page_answered_there_before_went_down():
    v = judge(refused_engine(("http://127.0.0.1:30000/metrics", None, None, None, None, None, None)))
    assert (v.side, v.kind, v.confidence) == ("server", "engine-unreachable", "high")
    assert "nothing listens on 127.0.0.1:30000 any more (connection refused)" in v.summary, v.summary
    assert v.summary.endswith("engine-0 went down"), v.summary


def test_a_page_that_answered_on_another_port_proves_nothing_of_the_canary_port():
    v = judge(refused_engine(("http://127.0.0.1:9090/metrics", None, None, None, None)))
    assert v.confidence == "medium" and "or the port is wrong" in v.summary, v.summary


def test_busy_looking_stale_gauges_do_not_blame_the_engine():
    """SGLang gauges frozen at 24 after going idle: no token moves, but a fresh request is served."""
    v = judge(proxy(held=1), engine(running=24, stale=("running",), canary=True))
    assert (v.side, v.kind) == ("client", "connection-wedged")
    assert any("stale" in r for r in v.ruled_out)


def test_zombie_requests_keep_an_engine_busy_but_it_is_not_the_culprit():
    """After clients disconnected, zombies keep decoding: busy and moving, no queue, fresh canary fine."""
    v = judge(proxy(held=1), engine(running=3, counters=(100, 200, 300), canary=True))
    assert (v.side, v.where, v.kind) == ("client", "proxy", "connection-wedged")
    assert any("engine-0: moving" in r for r in v.ruled_out)


def test_the_driver_starving_itself_is_client_overloaded():
    v = judge(proxy(), engine(), lag=2500.0)
    assert (v.side, v.where, v.kind) == ("client", "client", "client-overloaded")


def test_a_lagging_judge_places_nothing_and_blames_no_hop():
    """--workers: the round's own loop kept up (5 ms) but the parent, which timed the canaries,
    lagged 3 s: the engine's failed canary may only be late. Side unknown, never server-side."""
    hops = (proxy(), engine(running=4, canary=False))
    evidence = Evidence(stall=STALL, hops=hops, stall_after=5.0, loop_lag_p99_ms=5.0, judge_loop_lag_p99_ms=3000.0)
    v = classify(evidence)
    assert (v.side, v.where, v.kind, v.confidence) == ("unknown", None, "judge-overloaded", "low")
    assert {"hop": "client", "signal": "judging process's event-loop lag p99", "value": "3000 ms", "at": 20.0} in v.evidence
    # A judge that kept up is ruled out, and the hung engine is judged as ever.
    v = classify(dataclasses.replace(evidence, judge_loop_lag_p99_ms=12.0))
    assert (v.side, v.where, v.kind) == ("server", "engine-0", "engine-hung")
    assert "client: judging process's event-loop lag p99 12 ms, below 2500 ms" in v.ruled_out
    # What the round's own worker saw stands whatever the judge's lag: a refused request is refused.
    refused = ev.RoundFailed(t=20.0, conv=1, round=3, phase="before-first-byte", error="HTTP 401", status=401,
                             duration_s=0.1, failure="http")
    v = classify(dataclasses.replace(evidence, failure=refused))
    assert (v.side, v.kind) == ("client", "request-rejected"), v


def test_without_canaries_a_stale_busy_engine_is_not_called_hung():
    v = judge(engine(running=5, stale=("running",), canary=None))
    assert v.kind != "engine-hung"


def test_without_canaries_a_fresh_busy_flat_engine_is_hung_with_lower_confidence():
    v = judge(engine(running=5, canary=None))
    assert (v.kind, v.confidence) == ("engine-hung", "medium")


def test_nothing_readable_is_unknown():
    unreadable = ev.ProbeSample(t=1.0, hop="engine-0", snapshot=Snapshot(hop="engine-0", ok=False, error="timeout"))
    v = judge(HopEvidence("engine-0", "engine", (unreadable,), None))
    assert v.side == "unknown" and v.confidence == "low"


@pytest.mark.parametrize("field", ["side", "where", "kind", "confidence", "phase", "conversation", "round",
                                   "stalled_for_s", "evidence", "ruled_out"])
def test_verdict_contract_fields(field):
    assert field in judge(proxy(held=1), engine()).to_dict()


def test_engine_slower_per_token_than_the_window_is_slow_not_hung():
    """No token in the window and a failed canary look like a hang, but the ITL histogram says the
    last tokens each took 4 s (trigger 5 s): slow. A hang keeps its last healthy mean."""
    def with_itl(per_token):
        samples = tuple(sample(8.0 + 3 * i, running=1, queued=0, itl_count=c, itl_sum=c * per_token)
                        for i, c in enumerate((10, 11, 11, 11, 11)))
        return HopEvidence("engine-0", "engine", samples, _canary("engine-0", False))
    assert judge(with_itl(4.0)).kind == "engine-slow"
    assert judge(with_itl(0.02)).kind == "engine-hung"


# --- fresh evidence only: what was true before the stall is history ------------------------------


def failed_sample(t, hop="engine-0", error="timeout: no complete metrics page in 1 s"):
    return ev.ProbeSample(t=t, hop=hop, snapshot=Snapshot(hop=hop, ok=False, error=error))


def frozen_engine(name="engine-0"):
    """SIGSTOP at t=15: the samples before say 2 running and tokens moving; every one since fails,
    and the engine's own canary and /health time out."""
    before = tuple(sample(9.0 + 3 * i, name, running=2, queued=0, itl_count=c) for i, c in enumerate((100, 160, 220)))
    after = (failed_sample(16.0, name), failed_sample(19.0, name))
    return HopEvidence(name, "engine", before + after, _canary(name, False, health=None, failure="timeout"))


def test_a_frozen_engine_is_server_side_unresponsive_never_the_proxy():
    """The wrong side this tool must never take: the proxy's canary fails too (the engine behind
    it is frozen), and the last good samples, taken before the freeze, said tokens were moving."""
    v = judge(proxy(canary=False), frozen_engine())
    assert (v.side, v.where, v.kind, v.confidence) == ("server", "engine-0", "engine-unresponsive", "high")
    assert "answers nothing" in v.summary and "stopped answering" in v.summary
    assert not any("engines serve" in line for line in [v.summary, *v.ruled_out])
    history = next(e for e in v.evidence if e["signal"] == "running/queued before the stall")
    assert "history" in history["value"] and history["at"] <= STALL.last_progress_t


def test_samples_from_before_the_stall_never_make_an_engine_moving():
    """Two good samples before the stall, none since: the engine's state at the stall is unknown."""
    samples = tuple(sample(10.0 + i, running=2, itl_count=100 + 50 * i) for i in range(2))
    v = judge(proxy(held=1), HopEvidence("engine-0", "engine", samples, None))
    assert not any("moving" in line for line in v.ruled_out)
    assert any("gauges not read since the stall" in line for line in v.ruled_out)


def test_frontend_lost_is_said_only_with_a_health_200():
    v = judge(engine(running=0, queued=0, canary=False, health=200))
    assert v.kind == "engine-frontend-lost" and "answers /health (200)" in v.summary and "show idle" in v.summary
    # /health answered 503 and no gauge was read since the stall: no claim of either.
    unread = HopEvidence("engine-0", "engine", (sample(10.0, running=0, queued=0, itl_count=5),),
                         _canary("engine-0", False, health=503, failure="timeout"))
    v = judge(unread)
    assert v.kind == "engine-frontend-lost" and "answers /health with 503" in v.summary
    assert "answers /health (200)" not in v.summary and "show idle" not in v.summary
    assert "not read since the stall" in v.summary


def test_a_frozen_proxy_is_unresponsive_not_withholding():
    frozen = HopEvidence("proxy", "proxy", (sample(12.0, "proxy", in_flight=1, held=0), failed_sample(17.0, "proxy")),
                         _canary("proxy", False, health=None, failure="timeout"))
    v = judge(frozen, engine())
    assert (v.side, v.where, v.kind) == ("client", "proxy", "hop-unresponsive")
    assert v.summary.startswith("engines serve fresh requests")


def test_a_proxy_with_no_page_that_times_out_is_withholding_with_the_doubt_said():
    blind = HopEvidence("proxy", "proxy", (), _canary("proxy", False, health=None, failure="timeout"))
    v = judge(blind, engine())
    assert (v.side, v.where, v.kind, v.confidence) == ("client", "proxy", "request-withheld", "medium")
    assert "no metrics page, so a frozen process is not ruled out" in v.summary


def test_engines_serve_is_said_only_when_every_engine_canary_succeeded():
    v = judge(router(canary=False), engine(), engine("engine-1", canary=None))
    assert v.side == "client" and "engines serve" not in v.summary
    assert "not every engine's fresh canary ran" in v.summary


def test_a_buffering_proxy_in_front_of_a_slow_healthy_engine_withholds_the_response():
    """The engine runs the driver's outstanding round and tokens move, but the round got no byte."""
    stall = msgspec.structs.replace(STALL, in_flight=2)
    busy = engine(running=2, counters=(100, 100, 110, 120))
    busy = HopEvidence(busy.name, busy.role, tuple(msgspec.structs.replace(s, t=14.0 + 2 * i)
                                                   for i, s in enumerate(busy.samples)), busy.canary)
    v = classify(Evidence(stall=stall, hops=(proxy(held=0), busy), stall_after=5.0, driver_in_flight=2,
                          loop_lag_p99_ms=5.0))
    assert (v.side, v.where, v.kind) == ("client", "proxy", "response-withheld")
    assert "engine-0 runs 2" in v.summary


def test_a_front_hops_page_that_is_the_engines_passed_through_is_not_counted_as_its_own():
    """A router hop given the engine's /metrics (proxied through): its in_flight is the engine's."""
    passed_through = ev.ProbeSample(t=20.0, hop="router", snapshot=Snapshot(hop="router", ok=True, dialect="sglang",
                                                                             in_flight=4, running=0, queued=0))
    v = judge(HopEvidence("router", "router", (passed_through,), _canary("router", True)), engine())
    assert not any(e["signal"] == "holds requests" for e in v.evidence)
    page = next(e for e in v.evidence if e["hop"] == "router" and e["signal"] == "metrics page")
    assert "an engine's page passed through (sglang)" in page["value"]


def gateway(name, in_flight, canary=True):
    return HopEvidence(name, "proxy", (ev.ProbeSample(t=20.0, hop=name, snapshot=Snapshot(
        hop=name, ok=True, dialect="haproxy", in_flight=in_flight)),), _canary(name, canary))


def test_the_ledger_names_the_inner_of_two_proxies_that_holds_what_the_idle_engines_lack():
    """outer -> inner -> engine: both count 2 in flight, the engine idles: the inner one holds them."""
    v = judge(gateway("outer", 2), gateway("inner", 2, canary=False), engine())
    assert (v.side, v.where, v.kind) == ("client", "inner", "request-withheld")
    held = [e for e in v.evidence if e["signal"] == "holds requests"]
    assert [(e["hop"], e["value"]) for e in held] == [("inner", "2")]


def test_the_ledger_says_nothing_while_the_engines_are_busy():
    v = judge(gateway("haproxy", 3), engine(running=3, counters=(100, 150, 200)))
    assert not any(e["signal"] == "holds requests" for e in v.evidence)


def test_a_buffering_hop_is_the_one_nearest_the_engine_and_its_own_count_raises_confidence():
    stall = msgspec.structs.replace(STALL, in_flight=2)
    busy = HopEvidence("engine-0", "engine", tuple(sample(15.5 + 2 * i, running=2, queued=0, itl_count=c)
                                                   for i, c in enumerate((100, 110, 120))), _canary("engine-0", True))
    blind = HopEvidence("edge", "proxy", (), _canary("edge", True))

    def verdict_with(inner):
        return classify(Evidence(stall=stall, hops=(blind, inner, busy), stall_after=5.0, driver_in_flight=2,
                                 loop_lag_p99_ms=5.0))
    v = verdict_with(gateway("buffer", 2))
    assert (v.side, v.where, v.kind, v.confidence) == ("client", "buffer", "response-withheld", "high")
    assert "buffering" in v.summary
    v = verdict_with(HopEvidence("buffer", "proxy", (), _canary("buffer", True)))
    assert (v.where, v.kind, v.confidence) == ("buffer", "response-withheld", "medium")
    assert "its own in-flight count was not read" in v.summary


# --- failed rounds are judged from the same evidence --------------------------------------------


def failed_round(failure, *, status=None, reused=False, idle_s=None, server=None, phase="before-first-byte"):
    return ev.RoundFailed(t=17.0, conv=1, round=3, phase=phase, error=f"{failure} (words for people)", status=status,
                          duration_s=2.0, failure=failure, reused=reused, idle_s=idle_s, server=server,
                          local="127.0.0.1:50000")


def judge_failure(failure, *hops):
    stall = ev.RoundStalled(t=failure.t, conv=failure.conv, round=failure.round, phase=failure.phase,
                            stalled_for_s=2.0, started_t=15.0, last_progress_t=15.0, reused=failure.reused)
    return classify(Evidence(stall=stall, hops=tuple(hops), stall_after=5.0, loop_lag_p99_ms=5.0, failure=failure))


def test_a_504_from_a_gateway_in_front_of_a_hung_engine_is_server_side():
    v = judge_failure(failed_round("http", status=504, server="haproxy"), gateway("haproxy", 1, canary=False),
                      engine(running=2, canary=False))
    assert (v.side, v.where, v.kind, v.outcome, v.status) == ("server", "engine-0", "engine-hung", "failed", 504)
    assert v.summary.startswith("round failed: HTTP 504 before-first-byte after 2.0 s (Server: haproxy)")
    assert any(e["signal"] == "round failed" and e["hop"] == "haproxy" for e in v.evidence)


def test_a_502_from_a_gateway_while_the_engines_serve_is_the_gateways():
    v = judge_failure(failed_round("http", status=502, server="haproxy"), gateway("haproxy", 0, canary=False), engine())
    assert (v.side, v.where, v.kind) == ("client", "haproxy", "hop-error")


def test_an_error_no_signal_places_names_no_hop():
    """A 500 with no body of a known shape, while the engines serve and no canary repeats it: nginx
    in front may have made it or passed an engine's answer to this one request on. Not a side."""
    v = judge_failure(failed_round("http", status=500, server="nginx/1.22.1"), gateway("nginx", 0), engine())
    assert (v.side, v.where, v.kind, v.confidence) == ("unknown", None, "hop-error", "low")
    assert "placed the answer" in v.summary


def test_a_gateway_status_behind_two_hops_in_front_names_neither():
    v = judge_failure(failed_round("http", status=502), gateway("nginx", 0, canary=False),
                      gateway("haproxy", 0, canary=False), engine())
    assert (v.side, v.where) == ("unknown", None)


def test_a_429_from_the_engine_itself_is_saturation():
    canary = ev.CanaryResult(t=20.1, hop="engine-0", outcome=CanaryOutcome(
        hop="engine-0", url="http://127.0.0.1:1", ok=False, failure="http", status=429, health_status=200))
    v = judge_failure(failed_round("http", status=429), HopEvidence("engine-0", "engine", engine().samples, canary))
    assert (v.side, v.kind) == ("server", "engine-saturated")


def test_a_reset_on_a_connection_reused_after_its_servers_keepalive_is_a_race():
    v = judge_failure(failed_round("early-close", reused=True, idle_s=5.1), proxy(), engine())
    assert (v.side, v.where, v.kind) == ("client", "proxy", "keepalive-race")
    assert "reused after 5.1 s idle" in v.summary


def test_a_reset_on_a_fresh_connection_is_not_called_a_race():
    v = judge_failure(failed_round("reset"), proxy(), engine())
    assert v.kind == "connection-reset"


def test_a_refused_connection_to_a_dead_proxy_is_that_proxy():
    refused = HopEvidence("proxy", "proxy", (), _canary("proxy", False, health=None, failure="connect"))
    v = judge_failure(failed_round("connect"), refused, engine())
    assert (v.side, v.where, v.kind, v.confidence) == ("client", "proxy", "hop-unreachable", "high")
    assert "nothing listens" not in v.summary  # a connect failure not known to be a refusal says no more


def test_a_refused_proxy_says_nothing_listens_on_its_port():
    outcome = CanaryOutcome(hop="proxy", url="http://127.0.0.1:8080/v1/chat/completions", ok=False, failure="connect",
                            refused=True, error="connect: connection refused")
    refused = HopEvidence("proxy", "proxy", (), ev.CanaryResult(t=20.1, hop="proxy", outcome=outcome))
    v = judge_failure(failed_round("connect"), refused, engine())
    assert (v.side, v.where, v.kind) == ("client", "proxy", "hop-unreachable")
    assert v.summary.endswith("proxy took no connection: nothing listens on 127.0.0.1:8080 (connection refused), "
                              "proxy is down or the port is wrong"), v.summary
    assert "check the port" in v.to_dict()["next_action"]["do"]


def test_a_crashed_engine_is_server_side_unreachable_whatever_the_failure_said():
    v = judge_failure(failed_round("connect"), engine(canary=False, failure="connect", health=None))
    assert (v.side, v.kind) == ("server", "engine-unreachable")


# --- sockets: the kernel's view of the round's connection ---------------------------------------


def socket_sample(*, rqueue=0, wqueue=0, unacked=0, recv=4.0, sent=4.5, received=900, conv=1, hop=None, pid=None):
    state = SocketState(local="127.0.0.1:50000", remote="127.0.0.1:8080", state="ESTABLISHED", rqueue=rqueue,
                        wqueue=wqueue, unacked=unacked, last_data_recv_s=recv, last_data_sent_s=sent,
                        bytes_received=received, bytes_acked=300, hop=hop, pid=pid)
    return ev.SocketSample(t=20.0, socket=state, conv=conv, round=3 if conv is not None else None)


def test_bytes_unread_in_the_drivers_receive_queue_are_client_overloaded():
    v = classify(Evidence(stall=STALL, hops=(proxy(), engine()), stall_after=5.0, loop_lag_p99_ms=5.0,
                          sockets=(socket_sample(rqueue=4096),)))
    assert (v.side, v.where, v.kind) == ("client", "client", "client-overloaded")
    assert "4096 bytes wait unread in the driver's receive queue" in v.summary


def test_a_harness_waiting_on_its_connections_to_a_hop_names_that_hop():
    """triage --pid: every fresh path answers, the engine idles, the harness's connections to the
    hop got their request acknowledged and no answer for 30 s."""
    triage_stall = ev.RoundStalled(t=0.0, conv=0, round=0, phase="before-first-byte", stalled_for_s=2.0,
                                   started_t=0.0, last_progress_t=0.0)
    socat = HopEvidence("socat", "proxy", (), _canary("socat", True))
    idle = HopEvidence("engine-0", "engine", tuple(sample(0.5 + i, running=0, queued=0, itl_count=5) for i in range(2)),
                       _canary("engine-0", True))
    waiting = socket_sample(recv=30.0, sent=29.0, conv=None, hop="socat", pid=4242)
    v = classify(Evidence(stall=triage_stall, hops=(socat, idle), stall_after=2.0, driver_in_flight=0,
                          sockets=(waiting,)))
    assert (v.side, v.where, v.kind) == ("client", "socat", "connection-wedged")
    assert ("pid 4242: 1 connection(s) wait (request sent and acknowledged, nothing received since); no byte "
            "received for up to 30.0 s") in v.summary


def test_a_round_still_receiving_when_its_deadline_passed_blames_no_hop():
    """--round-timeout shorter than a long, healthy round: bytes came until the end. Nothing was
    stuck (it was once judged response-withheld at the proxy)."""
    long_round = ev.RoundFailed(t=20.0, conv=1, round=3, phase="mid-stream", failure="deadline", duration_s=10.0,
                                error="round deadline of 10 s (from its connection) passed", last_progress_t=19.8,
                                events=40)
    hops = (proxy(), engine(running=1, counters=(100, 120, 140)))
    evidence = Evidence(stall=STALL, hops=hops, stall_after=5.0, loop_lag_p99_ms=5.0, failure=long_round)
    v = classify(evidence)
    assert (v.side, v.where, v.kind) == ("unknown", None, "round-deadline"), v
    assert "still receiving (0.2 s since its last event)" in v.summary
    assert {"hop": "client", "signal": "silent before the deadline", "value": "0.2 s", "at": 20.0} in v.evidence
    # Silent for longer than the stall trigger before the deadline: judged as any silent round is.
    silent = dataclasses.replace(evidence, failure=msgspec.structs.replace(long_round, last_progress_t=12.0))
    assert classify(silent).kind != "round-deadline"
    # No event at all (a deadline shorter than the time to a first byte): nothing was "still receiving".
    nothing = dataclasses.replace(evidence, failure=msgspec.structs.replace(long_round, events=0))
    assert classify(nothing).kind != "round-deadline"
