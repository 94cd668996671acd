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


def test_a_wrapped_harness_round_leaves_what_was_not_read_out_never_zero(tmp_path):
    """`repro wrap` reads a harness's rounds from byte counters: no status, text, events or gaps.
    Its RoundDone says None for them, the run log keeps None, and the summary shows no max gap
    rather than a gap of 0 ms."""
    from repro.io.runlog import RunLogWriter, read_run_log
    from repro.load.shards import outcome_of

    done = ev.RoundDone(t=2.0, conv=1, round=1, status=None, reply_chars=None, duration_s=0.5, events=None,
                        max_gap_s=None, ttfb_s=0.1)
    log = RunLogWriter(tmp_path / "run")
    log.write(ev.RunStarted(t=0.0, config={}, versions={}, monotonic_origin=0.0, wall_clock_origin=0.0))
    log.write(done)
    log.close()
    (read,) = [e for e in read_run_log(tmp_path / "run").events if isinstance(e, ev.RoundDone)]
    assert (read.status, read.reply_chars, read.events, read.max_gap_s) == (None, None, None, None)
    (row,) = summarize([outcome_of(read)], conversations=1, rounds=1)["per_round"]
    assert row["completed"] == 1 and row["max_gap_ms"] is None
