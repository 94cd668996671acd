"""Reading a harness run's flow log (repro.core.harness_flows) and its table row
(repro.reporting.harness_table): records shaped as proxies/flowlog.py writes them."""

from __future__ import annotations

from repro.core.harness_faults import DEFAULT_FAULTS
from repro.core.harness_flows import read_flow_facts
from repro.core.harness_outcome import read_outcome
from repro.core.harness_runs import FaultRun
from repro.reporting.harness_table import error_words, table_lines

A, B = "127.0.0.1:5001", "127.0.0.1:5002"


def flow(name: str, client: str, t: float, *rest: dict, path: str = "/v1/chat/completions") -> list[dict]:
    records = [{"t_mono": t, "flow": name, "client": client, "event": "request_seen", "path": path}]
    return records + [{"flow": name, "client": client, **r} for r in rest]


def ok(t: float) -> list[dict]:
    return [{"t_mono": t, "event": "response_headers", "status": 200},
            {"t_mono": t + 0.1, "event": "closed", "outcome": "ok", "status": 200}]


def test_a_held_flow_given_up_then_retried_on_a_new_connection():
    records = (flow("1", A, 1.0, *ok(1.1)) + flow("m", A, 1.5, path="/v1/models")
               + flow("2", A, 2.0, {"t_mono": 2.0, "event": "fault_applied"}, {"t_mono": 2.0, "event": "held"},
                      {"t_mono": 5.0, "event": "released", "reason": "disconnect"})
               + flow("3", B, 5.2, *ok(5.3)))
    facts = read_flow_facts(records, engine_fault=False)
    assert facts.requests == 3 and facts.connections == 2  # the model list is not a round
    assert facts.fault_at == 2.0 and facts.gave_up_at == 5.0 and facts.next_request_at == 5.2
    assert facts.how == "new connection" and facts.retries == 1 and facts.through == 1
    assert facts.noticed_at(exited_at=9.0) == 5.0
    assert facts.noticed_at(exited_at=None, stopped_at=4.0) is None  # closed by our stop: not noticed


def test_an_engine_fault_is_the_first_flow_that_did_not_end_well():
    records = (flow("1", A, 1.0, *ok(1.1))
               + flow("2", A, 2.0, {"t_mono": 2.1, "event": "response_headers", "status": 400},
                      {"t_mono": 2.2, "event": "closed", "outcome": "ok", "status": 400})
               + flow("3", A, 2.3, {"t_mono": 2.4, "event": "response_headers", "status": 400}))
    facts = read_flow_facts(records, engine_fault=True)
    assert facts.fault_at == 2.0 and facts.next_request_at == 2.3 and facts.how == "same connection"


def test_no_fault_met_reads_finished_and_the_row_fits_80_columns():
    healthy = DEFAULT_FAULTS[0]
    facts = read_flow_facts(flow("1", A, 1.0, *ok(1.1)), engine_fault=False)
    run = FaultRun(healthy, read_outcome(0, "the final answer\n", answered=True), 3.0, facts, 0.0, 3.0)
    assert run.label == "finished" and run.noticed_after_s is None
    long_error = FaultRun(DEFAULT_FAULTS[1], read_outcome(1, "x" * 300, answered=False), 3.0, facts, 0.0, 3.0)
    lines = table_lines([run.to_json(), long_error.to_json()])
    assert lines[1].startswith("healthy") and "finished" in lines[1]
    assert all(len(line) <= 80 for line in lines)


def test_an_error_event_shows_its_message():
    line = '{"type":"error","error":{"name":"APIError","data":{"message":"rate limit exceeded","statusCode":429}}}'
    assert error_words(line) == "rate limit exceeded"
    assert error_words("Error: plain text") == "Error: plain text"
    assert error_words('{"type": "result", "subtype": "error"}') == '{"type": "result", "subtype": "error"}'
    claude = '{"type": "result", "is_error": true, "api_error_status": 400, "result": "Prompt is too long"}'
    assert error_words(claude) == "Prompt is too long"
    assert error_words('{"type": "result", "is_error": false, "result": "done"}').startswith('{"type"')


def canary(name: str, client: str, t: float, *rest: dict) -> list[dict]:
    """A flow of one of repro's canaries, as the proxy marks it (the request carried x-repro-canary)."""
    records = flow(name, client, t, *rest)
    return [{**records[0], "canary": True}, *records[1:]]


def test_a_canary_in_the_middle_of_a_retry_sequence_is_no_retry_and_no_connection_of_the_harnesss():
    C = "127.0.0.1:5003"  # the canary's own fresh connection
    retry = [{"t_mono": 2.05, "event": "response_headers", "status": 529},
             {"t_mono": 2.1, "event": "closed", "outcome": "ok", "status": 529}]
    records = (flow("1", A, 1.0, *ok(1.1))
               + flow("2", A, 2.0, {"t_mono": 2.0, "event": "fault_applied"}, *retry)
               + flow("3", A, 3.0, {"t_mono": 3.0, "event": "fault_applied"},
                      *[{**r, "t_mono": r["t_mono"] + 1.0} for r in retry])
               + canary("c", C, 3.5, *ok(3.6))  # answered well: it would read as one retry through
               + flow("4", A, 4.0, {"t_mono": 4.0, "event": "fault_applied"},
                      *[{**r, "t_mono": r["t_mono"] + 2.0} for r in retry]))
    facts = read_flow_facts(records, engine_fault=False)
    assert facts.requests == 4 and facts.connections == 1
    assert facts.retries == 2 and facts.through == 0
    assert facts.next_request_at == 3.0 and facts.how == "same connection"
    unmarked = [{k: v for k, v in r.items() if k != "canary"} for r in records]
    counted = read_flow_facts(unmarked, engine_fault=False)  # the same flows unmarked: the test can fail
    assert (counted.requests, counted.connections, counted.retries, counted.through) == (5, 2, 3, 1)


def test_a_canary_first_after_the_fault_is_not_the_harnesss_next_request():
    records = (flow("1", A, 1.0, {"t_mono": 1.0, "event": "fault_applied"}, {"t_mono": 1.0, "event": "held"})
               + canary("c", B, 2.0, *ok(2.1)))
    facts = read_flow_facts(records, engine_fault=False)
    assert facts.next_request_at is None and facts.how == "" and facts.retries == 0
    assert facts.noticed_at(exited_at=None) is None
