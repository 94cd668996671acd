"""The run summary's latency figures use the one quantile (repro.core.quantiles): `repro run`'s
TTFT p95 and `repro bench`'s agree on the same rounds."""

from __future__ import annotations

from repro.core import events as ev
from repro.core.bench_window import WindowMeter
from repro.load.round import RoundOutcome
from repro.reporting.summary import summarize


def test_run_and_bench_give_the_same_ttft_quantiles_for_the_same_rounds():
    ttfts = [0.100, 0.120, 0.150, 0.200, 0.900]  # few values, one slow: where the methods would differ
    outcomes = [RoundOutcome(conv, 1, "completed", ttft_s=t) for conv, t in enumerate(ttfts)]
    (row,) = summarize(outcomes, conversations=len(ttfts), rounds=1)["per_round"]
    meter = WindowMeter("A", len(ttfts), 0, start=0.0, end=10.0, bin_s=1.0)
    for conv, t in enumerate(ttfts):
        meter.add(ev.RoundStarted(t=1.0, conv=conv, round=1, prompt_chars=10, messages=1))
        meter.add(ev.SSEReceived(t=1.0 + t, conv=conv, round=1, seq=1, chars=5, events=1))
    bench = meter.result(cpu_seconds=None)["ttft_ms"]
    assert row["ttft_p50_ms"] == round(bench["p50"], 1) == 150.0
    assert row["ttft_p95_ms"] == round(bench["p95"], 1) == 760.0  # interpolated, not the slowest round


def test_a_run_shaped_by_tools_and_workers_says_so_and_a_plain_one_says_nothing():
    from repro.reporting.summary import driven_lines

    shaped = {"tools": 4, "rounds_with_tool_calls": 23, "tool_calls": 41, "workers": 2}
    assert driven_lines(shaped) == ["tools: 4 offered every round, 23 replies called them (41 calls)",
                                    "workers: 2 processes, the conversations sharded across them"]
    assert driven_lines({"tools": 0, "rounds_with_tool_calls": 0, "tool_calls": 0, "workers": 1}) == []
