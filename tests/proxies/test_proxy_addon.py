"""The fault addon without sockets: mitmproxy's test helpers drive the hooks directly."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from mitmproxy import exceptions
from mitmproxy.connection import ConnectionState
from mitmproxy.test import taddons, tflow

from proxies.addon import FaultProxyAddon, StreamTap
from proxies.arming import Arming
from proxies.flowlog import read_flow_log
from proxies.spec import HTTP_FAULTS, PROXY_FAULTS, Action, Stage, parse_proxy_fault
from repro.core.faultspec import FaultSpecError

pytestmark = pytest.mark.anyio

EVENT = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
DONE = b"data: [DONE]\n\n"


def metric(addon: FaultProxyAddon, name: str, **labels) -> float:
    value = addon.metrics.registry.get_sample_value(name, labels or None)
    return value or 0.0


def sse_flow(client_id: str = "conn-1", port: int = 50001):
    flow = tflow.tflow(resp=True)
    flow.client_conn.id = client_id
    flow.client_conn.peername = ("127.0.0.1", port)
    flow.request.path = "/v1/chat/completions?api_key=secret"
    flow.request.headers["authorization"] = "Bearer sk-secret"
    flow.response.headers["content-type"] = "text/event-stream"
    return flow


async def through_headers(addon: FaultProxyAddon, flow) -> None:
    addon.requestheaders(flow)
    await addon.request(flow)
    await addon.responseheaders(flow)


# --- specs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["hold-request", "wedge-after=2", "truncate-hold=3,after=2", "delay=50",
                                  "slow-drip", "slow-drip=20", "keepalive-race=1.5", "idle-cut=0.5",
                                  "hold-eom,after=3s", "drop,per=conn,after=1"])
def test_specs_that_parse(text):
    assert parse_proxy_fault(text).text == text


@pytest.mark.parametrize("text, fragment", [
    ("hold", "unknown proxy fault 'hold'"),
    ("wedge-after", "needs an integer"),
    ("wedge-after=2,after=1", "drop the after= option"),
    ("truncate-hold=x", "must be an integer"),
    ("idle-cut=0", "positive number"),
    ("drop=3", "takes no value"),
])
def test_specs_that_fail_name_the_fix(text, fragment):
    with pytest.raises(FaultSpecError, match=fragment.replace("(", r"\(")):
        parse_proxy_fault(text)


async def test_bad_spec_option_is_an_options_error():
    addon = FaultProxyAddon()
    with taddons.context(addon) as tctx:
        with pytest.raises(exceptions.OptionsError, match="unknown proxy fault"):
            tctx.configure(addon, repro_fault="wedge")


# --- pass-through ------------------------------------------------------------------------------


async def test_pass_through_streams_and_counts(tmp_path: Path):
    log = tmp_path / "flows.jsonl"
    addon = FaultProxyAddon(flow_log=log)
    with taddons.context(addon):
        flow = sse_flow()
        await through_headers(addon, flow)
        assert isinstance(flow.response.stream, StreamTap)  # never buffered: SSE flows event by event
        assert flow.response.stream(EVENT + EVENT[:10]) == EVENT + EVENT[:10]
        assert flow.response.stream(EVENT[10:] + DONE) == EVENT[10:] + DONE
        assert flow.response.stream(b"") == []  # end of message adds nothing (b"" would end a chunked body)
        await addon.response(flow)
    assert metric(addon, "repro_proxy_events_forwarded_total") == 3
    assert metric(addon, "repro_proxy_bytes_forwarded_total") == len(EVENT * 2 + DONE)
    assert metric(addon, "repro_proxy_requests_total") == 1
    assert metric(addon, "repro_proxy_open_flows") == 0
    records = read_flow_log(log)
    assert [r["event"] for r in records] == ["request_seen", "forwarded", "response_headers",
                                              "events_forwarded", "closed"]
    assert all(r["client"] == "127.0.0.1:50001" and isinstance(r["t_mono"], float) for r in records)
    text = log.read_text()
    assert "secret" not in text and "authorization" not in text.lower()
    assert records[0]["path"] == "/v1/chat/completions"


async def test_events_forwarded_is_throttled(tmp_path: Path):
    log = tmp_path / "flows.jsonl"
    addon = FaultProxyAddon(flow_log=log)
    with taddons.context(addon):
        flow = sse_flow()
        await through_headers(addon, flow)
        for _ in range(200):
            flow.response.stream(EVENT)
        await addon.response(flow)
    lines = [r for r in read_flow_log(log) if r["event"] == "events_forwarded"]
    assert 3 <= len(lines) <= 5
    assert sum(r["count"] for r in lines) == 200 and lines[-1]["total"] == 200


async def test_buffer_sets_no_stream():
    addon = FaultProxyAddon("buffer")
    with taddons.context(addon):
        flow = sse_flow()
        flow.response.content = EVENT * 2 + DONE
        await through_headers(addon, flow)
        assert not flow.response.stream
        await addon.response(flow)
    assert metric(addon, "repro_proxy_events_forwarded_total") == 3
    assert metric(addon, "repro_proxy_faults_applied_total", fault="buffer") == 1


# --- arming ---------------------------------------------------------------------------------


def test_arming_policy_with_the_callers_clock():
    by_time = Arming(parse_proxy_fault("drop,after=1.5s"), armed_at=100.0)
    assert [by_time.decide("a", "/v1", now) for now in (100.0, 101.4, 101.5)] == [False, False, True]
    both = Arming(parse_proxy_fault("drop,after=1,after=1s,path=/v1"), armed_at=0.0)
    assert [both.decide("a", path, now) for path, now in (("/v1", 2.0), ("/health", 2.0), ("/v1", 0.5),
                                                          ("/v1", 1.0))] == [False, False, False, True]
    wedge = Arming(parse_proxy_fault("wedge-after=1"), armed_at=0.0)
    assert [wedge.decide(c, "/", 0.0) for c in ("a", "a", "b", "a", "b")] == [False, True, False, True, True]
    wedge.forget("a")
    assert wedge.decide("a", "/", 0.0) is False  # counts restart for a connection forgotten


def test_times_clears_the_fault_after_it_met_k_requests():
    status = Arming(parse_proxy_fault("status=429,after=2,times=2,path=/v1"), armed_at=0.0)
    met = [status.decide(c, path, 0.0) for c, path in
           (("a", "/v1"), ("b", "/v1"), ("a", "/health"), ("a", "/v1"), ("c", "/v1"), ("a", "/v1"), ("b", "/v1"))]
    assert met == [False, False, False, True, True, False, False]  # the 3rd and 4th rounds, then cleared
    wedge = Arming(parse_proxy_fault("wedge-after=1,times=1"), armed_at=0.0)  # per connection: one held each
    assert [wedge.decide(c, "/", 0.0) for c in ("a", "a", "a", "b", "b", "b")] == [False, True, False,
                                                                                      False, True, False]
    late = Arming(parse_proxy_fault("drop,after=1s,times=1"), armed_at=0.0)  # counted from when it acts
    assert [late.decide("a", "/", now) for now in (0.2, 0.5, 1.0, 1.1)] == [False, False, True, False]


def test_a_canary_is_faulted_as_the_fault_stands_and_never_counted():
    status = Arming(parse_proxy_fault("status=429,after=2,times=1"), armed_at=0.0)
    seen = [status.decide("c", "/v1", 0.0, counted=False) for _ in range(3)]  # canaries before any round
    seen += [status.decide("a", "/v1", 0.0), status.decide("a", "/v1", 0.0)]  # rounds 1, 2: still theirs to pass
    seen += [status.decide("c", "/v1", 0.0, counted=False)]  # armed now: the canary meets it, uncounted
    seen += [status.decide("a", "/v1", 0.0), status.decide("a", "/v1", 0.0)]  # round 3 meets it; then cleared
    assert seen == [False, False, False, False, False, True, True, False]
    # Per connection, a canary on a connection of rounds (pooled by a hop in front) is one of its requests.
    wedge = Arming(parse_proxy_fault("wedge-after=2"), armed_at=0.0)
    pooled = [wedge.decide("up", "/v1", 0.0, counted=counted) for counted in (False, True, True)]
    assert pooled == [False, False, True]


@pytest.mark.parametrize("spec", ["status=429,times=0", "status=429,times=x", "drop,times=-1", "drop,times=1.5"])
def test_times_must_be_a_count_above_zero(spec):
    with pytest.raises(FaultSpecError, match="times must be a whole number"):
        parse_proxy_fault(spec)


def test_fault_table_drives_the_grammar():
    assert {f.name: f.value for f in HTTP_FAULTS} == PROXY_FAULTS
    assert [f.name for f in HTTP_FAULTS if f.truncates] == ["truncate-hold", "truncate-reset"]
    for fault in HTTP_FAULTS:  # the combinations the hooks know
        assert (fault.stage, fault.action) in {
            (None, Action.PASS), (Stage.REUSE, Action.KILL), (Stage.REQUEST, Action.KILL),
            (Stage.REQUEST, Action.HOLD), (Stage.REQUEST, Action.DELAY), (Stage.REQUEST, Action.IDLE_CUT),
            (Stage.RESPONSE, Action.BUFFER), (Stage.RESPONSE, Action.HOLD), (Stage.STREAM, Action.HOLD),
            (Stage.STREAM, Action.KILL), (Stage.STREAM, Action.DRIP), (Stage.EOM, Action.HOLD),
            (Stage.REQUEST, Action.RESPOND), (Stage.REQUEST, Action.REFUSE_LARGE),
        }, fault.name


async def test_after_n_global_and_per_connection():
    addon = FaultProxyAddon("drop,after=2")
    with taddons.context(addon):
        flows = [sse_flow(f"c{i}", 50000 + i) for i in range(4)]
        for f in flows:
            addon.requestheaders(f)
            await addon.request(f)
        assert [f.killable for f in flows] == [True, True, False, False]

    addon = FaultProxyAddon("drop,after=1,per=conn")
    with taddons.context(addon):
        a1, a2, b1 = sse_flow("a"), sse_flow("a"), sse_flow("b")
        for f in (a1, a2, b1):
            addon.requestheaders(f)
            await addon.request(f)
        assert [a1.killable, a2.killable, b1.killable] == [True, False, True]


async def test_after_seconds_arms_later():
    addon = FaultProxyAddon("drop,after=0.2s")
    with taddons.context(addon):
        early = sse_flow()
        addon.requestheaders(early)
        await addon.request(early)
        await asyncio.sleep(0.25)
        late = sse_flow()
        addon.requestheaders(late)
        await addon.request(late)
    assert early.killable and not late.killable


async def test_runtime_arm_and_disarm():
    addon = FaultProxyAddon()
    with taddons.context(addon):
        addon.arm("drop")
        f1 = sse_flow()
        addon.requestheaders(f1)
        await addon.request(f1)
        addon.disarm()
        f2 = sse_flow()
        addon.requestheaders(f2)
        await addon.request(f2)
        with pytest.raises(FaultSpecError):
            addon.arm("nonsense")
    assert not f1.killable and f2.killable
    assert metric(addon, "repro_proxy_fault_armed", fault="drop") == 0


# --- holds ------------------------------------------------------------------------------------


async def test_wedge_after_holds_third_request_on_same_connection_until_release(tmp_path: Path):
    log = tmp_path / "flows.jsonl"
    addon = FaultProxyAddon("wedge-after=2", flow_log=log)
    with taddons.context(addon):
        for _ in range(2):
            f = sse_flow("conn-1")
            addon.requestheaders(f)
            await asyncio.wait_for(addon.request(f), 1)
        third = sse_flow("conn-1")
        addon.requestheaders(third)
        task = asyncio.ensure_future(addon.request(third))
        await asyncio.sleep(0.05)
        assert not task.done() and metric(addon, "repro_proxy_held_flows") == 1
        fresh = sse_flow("conn-2", 50002)  # a fresh connection is not wedged
        addon.requestheaders(fresh)
        await asyncio.wait_for(addon.request(fresh), 1)
        assert addon.release() == 1
        await asyncio.wait_for(task, 1)
    assert third.killable  # admin release lets the request continue upstream
    assert metric(addon, "repro_proxy_held_flows") == 0
    events = [(r["event"], r.get("stage"), r.get("reason")) for r in read_flow_log(log) if r["flow"] == third.id]
    assert events == [("request_seen", None, None), ("fault_applied", None, None), ("held", "request", None),
                      ("released", "request", "admin"), ("forwarded", None, None)]


async def test_hold_ends_when_client_goes_away():
    addon = FaultProxyAddon("hold-request")
    with taddons.context(addon):
        flow = sse_flow()
        addon.requestheaders(flow)
        task = asyncio.ensure_future(addon.request(flow))
        await asyncio.sleep(0.05)
        flow.client_conn.state = ConnectionState.CAN_WRITE  # the client closed its side
        await asyncio.wait_for(task, 2)
    assert not flow.killable and metric(addon, "repro_proxy_held_flows") == 0


async def test_hold_safety_max_kills():
    addon = FaultProxyAddon("hold-response", hold_max=0.3)
    with taddons.context(addon):
        flow = sse_flow()
        addon.requestheaders(flow)
        await addon.request(flow)
        await asyncio.wait_for(addon.responseheaders(flow), 2)
    assert not flow.killable and flow.error.msg == "Connection killed."


async def test_shutdown_releases_every_hold():
    addon = FaultProxyAddon("hold-request")
    with taddons.context(addon):
        flows = [sse_flow(f"c{i}") for i in range(3)]
        tasks = []
        for f in flows:
            addon.requestheaders(f)
            tasks.append(asyncio.ensure_future(addon.request(f)))
        await asyncio.sleep(0.05)
        assert metric(addon, "repro_proxy_held_flows") == 3
        addon.done()
        await asyncio.wait_for(asyncio.gather(*tasks), 2)
    assert not any(f.killable for f in flows)  # shutdown kills: clients see the close, not a late reply


async def test_truncate_hold_passes_k_events_then_withholds(tmp_path: Path):
    log = tmp_path / "flows.jsonl"
    addon = FaultProxyAddon("truncate-hold=2", flow_log=log)
    with taddons.context(addon):
        flow = sse_flow()
        await through_headers(addon, flow)
        assert flow.response.stream(EVENT) == EVENT
        out = flow.response.stream(EVENT + EVENT + DONE)
        assert out == [EVENT]  # cut exactly after event 2
        assert flow.response.stream(DONE) == []
        assert metric(addon, "repro_proxy_held_flows") == 1
        task = asyncio.ensure_future(addon.response(flow))
        await asyncio.sleep(0.05)
        assert not task.done()
        addon.release()
        await asyncio.wait_for(task, 1)
    assert not flow.killable  # a cut body never ends cleanly
    stages = [(r["event"], r.get("stage")) for r in read_flow_log(log)]
    assert ("held", "response") in stages


async def test_truncate_reset_kills_after_k_events():
    addon = FaultProxyAddon("truncate-reset=1")
    with taddons.context(addon):
        flow = sse_flow()
        await through_headers(addon, flow)
        assert flow.response.stream(EVENT + EVENT) == [EVENT]
        await asyncio.wait_for(addon.response(flow), 1)
    assert not flow.killable


async def test_hold_eom_forwards_everything_then_holds():
    addon = FaultProxyAddon("hold-eom")
    with taddons.context(addon):
        flow = sse_flow()
        await through_headers(addon, flow)
        assert flow.response.stream(EVENT + DONE) == EVENT + DONE
        task = asyncio.ensure_future(addon.response(flow))
        await asyncio.sleep(0.05)
        assert metric(addon, "repro_proxy_held_flows") == 1 and not task.done()
        addon.release()
        await asyncio.wait_for(task, 1)
    assert flow.killable  # admin release sends the end of the body


async def test_keepalive_race_kills_only_reused_connections():
    addon = FaultProxyAddon("keepalive-race")
    with taddons.context(addon):
        first, reused, fresh = sse_flow("a"), sse_flow("a"), sse_flow("b")
        for f in (first, reused, fresh):
            addon.requestheaders(f)
    assert first.killable and not reused.killable and fresh.killable


async def test_delay_holds_each_request_briefly():
    addon = FaultProxyAddon("delay=100")
    with taddons.context(addon):
        flow = sse_flow()
        addon.requestheaders(flow)
        started = asyncio.get_running_loop().time()
        await addon.request(flow)
        assert asyncio.get_running_loop().time() - started >= 0.09


async def test_state_is_json():
    addon = FaultProxyAddon("wedge-after=1")
    with taddons.context(addon):
        json.dumps(addon.state())
        assert addon.state()["fault"] == "wedge-after=1"


async def test_path_option_limits_fault_and_counting():
    addon = FaultProxyAddon("drop,after=1,path=/v1/chat")
    with taddons.context(addon):
        flows = [sse_flow() for _ in range(4)]
        flows[0].request.path = flows[2].request.path = "/health"
        for f in flows:
            addon.requestheaders(f)
            await addon.request(f)
    # health checks neither count as rounds nor get the fault; the second chat request does
    assert [f.killable for f in flows] == [True, True, True, False]
    with pytest.raises(FaultSpecError, match="unknown option 'paht'"):
        parse_proxy_fault("drop,paht=/v1")


async def test_truncate_counts_events_as_the_driver_does():
    """CR line ends are events; a keep-alive comment is not: the client gets exactly K decoded events."""
    addon = FaultProxyAddon("truncate-reset=2")
    with taddons.context(addon):
        flow = sse_flow()
        await through_headers(addon, flow)
        assert flow.response.stream(b": ping\r\rdata: a\r\r") == b": ping\r\rdata: a\r\r"
        assert flow.response.stream(b"data: b\r\rdata: c\r\r") == [b"data: b\r\r"]
        await asyncio.wait_for(addon.response(flow), 1)
    assert metric(addon, "repro_proxy_events_forwarded_total") == 2 and not flow.killable


async def test_truncate_keeps_a_crlf_split_across_chunks_whole():
    addon = FaultProxyAddon("truncate-reset=1")
    with taddons.context(addon):
        flow = sse_flow()
        await through_headers(addon, flow)
        assert flow.response.stream(b"data: a\r\n\r") == b"data: a\r\n\r"  # event 1 ends at this CR
        assert flow.response.stream(b"\ndata: b\r\n\r\n") == [b"\n"]  # its LF still goes out, event 2 not
        await asyncio.wait_for(addon.response(flow), 1)
    assert metric(addon, "repro_proxy_events_forwarded_total") == 1
