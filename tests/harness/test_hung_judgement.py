"""repro's judgement of a hung harness run (repro.core.hung_judgement): when it is made, its
JSON, its line under the table's row and its HTML cell (repro.reporting.harness_table), and its
canary kept out of the harness's flows. Records shaped as proxies/flowlog.py writes them."""

from __future__ import annotations

import pytest

from repro.core.harness_faults import pick_faults
from repro.core.harness_flows import read_flow_facts
from repro.core.harness_outcome import read_outcome
from repro.core.harness_runs import FaultRun
from repro.core.hung_judgement import (
    JUDGE_BOUND_S,
    JUDGE_LEAD_S,
    JUDGE_WINDOW_S,
    HungJudgement,
    judge_at_s,
)
from repro.core.verdict import Verdict
from repro.reporting.harness_table import sweep_html, table_lines

HARNESS, CANARY = "127.0.0.1:5001", "127.0.0.1:5002"
WEDGED_SUMMARY = "the proxy holds the harness's request on a connection it reused; a fresh one answers"


def verdict(side: str, where: str | None, kind: str, summary: str = WEDGED_SUMMARY, advice: str | None = None) -> Verdict:
    return Verdict(side=side, where=where, kind=kind, confidence="high", phase="before-first-byte", conversation=0,
                   round=0, stalled_for_s=None, evidence=[], ruled_out=[], summary=summary, advice=advice)


def hung_run(judgement: HungJudgement | None, fault: str = "wedge-reused", limit: float = 60.0) -> FaultRun:
    facts = read_flow_facts([], engine_fault=False)
    return FaultRun(pick_faults([fault], limit)[0], read_outcome(None, "waiting\n", answered=False), limit + 0.4,
                    facts, 0.0, None, limit, judgement=judgement)


def test_judged_with_room_for_one_judgement_before_the_limit():
    assert JUDGE_LEAD_S > JUDGE_WINDOW_S and JUDGE_BOUND_S >= JUDGE_LEAD_S
    assert judge_at_s(60.0) == 60.0 - JUDGE_LEAD_S
    assert judge_at_s(6.0) == 3.0  # a limit shorter than twice the lead: half of it
    assert 0 < judge_at_s(0.5) < 0.5


def test_the_json_carries_each_verdicts_own_words():
    advice = "restart the proxy"
    run = hung_run(HungJudgement(53.0, (verdict("client", "proxy", "connection-wedged", advice=advice),)))
    data = run.to_json()
    assert data["outcome"] == "hung" and data["judged_at_s"] == 53.0 and data["judging_error"] is None
    assert data["verdicts"] == [{"side": "client", "where": "proxy", "kind": "connection-wedged", "confidence": "high",
                                 "summary": f"{WEDGED_SUMMARY}; {advice}"}]


def test_a_run_not_judged_has_the_same_keys_empty():
    facts = read_flow_facts([], engine_fault=False)
    run = FaultRun(pick_faults(["healthy"])[0], read_outcome(0, "answer\n", answered=True), 2.0, facts, 0.0, 2.0)
    data = run.to_json()
    assert (data["judged_at_s"], data["judging_error"], data["verdicts"]) == (None, None, [])
    assert len(table_lines([data])) == 2  # the heading and its row: no line of repro's


def test_the_table_says_the_verdict_on_a_second_line_under_the_hung_row():
    runs = [hung_run(HungJudgement(53.0, (verdict("client", "proxy", "connection-wedged"),))).to_json(),
            hung_run(HungJudgement(53.0, (verdict("server", "engine-0", "engine-hung"),)), "engine-hang").to_json()]
    lines = table_lines(runs)
    assert lines[1].startswith("wedge-reused") and "hung" in lines[1]
    assert lines[2] == "  repro: client side, at proxy: connection-wedged"
    assert lines[3].startswith("engine-hang")
    assert lines[4] == "  repro: server side, at engine-0: engine-hung"
    assert all(len(line) <= 80 for line in lines)


def test_no_verdict_a_verdict_without_a_hop_and_a_failure_each_say_so_in_80_columns():
    long_error = "judging failed: RuntimeError: " + "the canary could not be sent " * 10
    runs = [hung_run(HungJudgement(8.0)).to_json(),
            hung_run(HungJudgement(8.0, (verdict("unknown", None, "connection-wedged"),))).to_json(),
            hung_run(HungJudgement(8.0, error=long_error)).to_json()]
    lines = table_lines(runs)
    assert lines[2] == "  repro: no verdict (judged at 8.0 s)"
    assert lines[4] == "  repro: unknown side: connection-wedged"
    assert lines[6].startswith("  repro: judging failed: RuntimeError: the canary") and lines[6].endswith("...")
    assert len(lines) == 7 and all(len(line) <= 80 for line in lines)


def test_a_judgement_kept_on_a_run_that_was_not_hung_is_never_shown():
    # The sweep drops it (a harness that exits after its judgement was not hung); the table, fed
    # such a run's JSON anyway, shows no verdict under a row that is not hung.
    facts = read_flow_facts([], engine_fault=False)
    run = FaultRun(pick_faults(["wedge-reused"])[0], read_outcome(3, "gave up\n", answered=False), 9.0, facts, 0.0,
                   9.0, judgement=HungJudgement(5.0, (verdict("client", "proxy", "connection-wedged"),)))
    assert len(table_lines([run.to_json()])) == 2


def test_the_html_page_shows_the_verdicts_words_and_summary():
    page = sweep_html(["opencode", "run"], [
        hung_run(HungJudgement(53.0, (verdict("client", "proxy", "connection-wedged"),))).to_json()])
    assert "<th>repro&#x27;s verdict</th>" in page
    assert "client side, at proxy: connection-wedged: the proxy holds the harness&#x27;s request" in page


def request(flow: str, client: str, t: float, on_conn: int, path: str = "/v1/chat/completions",
            canary: bool = False) -> list[dict]:
    seen = {"t_mono": t, "flow": flow, "client": client, "event": "request_seen", "path": path,
            "request_on_conn": on_conn}
    return [{**seen, "canary": True} if canary else seen,
            {"t_mono": t + 0.2, "flow": flow, "client": client, "event": "closed", "outcome": "ok", "status": 200}]


@pytest.mark.parametrize("harness_retry_at", [None, 50.9, 51.0, 57.0])
def test_the_judgements_canary_is_left_out_of_the_harnesss_flows(harness_retry_at):
    # The canary is known by the proxy's mark (its x-repro-canary header), not by its moment: a
    # harness's own fresh connection at the very moment the canary goes (half the window) is kept.
    began = 50.0
    records = [*request("1", HARNESS, 1.0, 1), *request("2", HARNESS, 2.0, 2),
               *request("h", CANARY, began + JUDGE_WINDOW_S / 2 - 0.3, 1, path="/health", canary=True),
               *request("c", CANARY, began + JUDGE_WINDOW_S / 2 + 0.05, 1, canary=True)]
    if harness_retry_at is not None:
        records += request("r", "127.0.0.1:5003", harness_retry_at, 1)
    facts = read_flow_facts(records, engine_fault=False)
    assert facts.requests == 2 + (1 if harness_retry_at else 0)
    assert facts.connections == 1 + (1 if harness_retry_at else 0)


def test_a_fresh_connection_during_the_judgement_without_the_mark_is_the_harnesss():
    # What the old timing rule would have taken for the canary: the harness's, counted.
    records = [*request("1", HARNESS, 1.0, 1), *request("2", "127.0.0.1:5003", 51.0, 1)]
    facts = read_flow_facts(records, engine_fault=False)
    assert facts.requests == 2 and facts.connections == 2
