"""The bench's statistics and its window meter, with plain numbers: no engine, no clock."""

from __future__ import annotations

import random

from repro.core import events as ev
from repro.core.bench_stats import NOT_JUDGED, compare, level_rows, t_quantile, welch_interval
from repro.core.bench_window import WindowMeter


def windows(rng: random.Random, means: list[float], bins: int = 8, noise: float = 3.0) -> list[list[float]]:
    return [[rng.gauss(mean, noise) for _ in range(bins)] for mean in means]


def test_a_known_difference_is_significant():
    rng = random.Random(1)
    d = compare(windows(rng, [100] * 4), windows(rng, [110] * 4))
    assert d.significant is True
    assert 7 < d.delta_pct < 13
    assert 0 < d.ci_low_pct < d.delta_pct < d.ci_high_pct
    assert d.windows_resampled
    assert d.describe().startswith(f"{d.delta_pct:+.1f}% (95% CI {d.ci_low_pct:+.1f}..{d.ci_high_pct:+.1f})")
    assert d.describe().endswith(": significant")


def test_a_known_regression_is_significant_too():
    rng = random.Random(2)
    d = compare(windows(rng, [100] * 4), windows(rng, [90] * 4))
    assert d.significant is True and d.ci_high_pct < 0


def test_identical_samples_are_flat():
    rng = random.Random(0)
    d = compare(windows(rng, [100] * 4, noise=5), windows(rng, [100] * 4, noise=5))
    assert d.significant is False
    assert d.ci_low_pct < 0 < d.ci_high_pct
    assert d.describe().endswith("flat, within noise")


def test_the_verdict_is_calibrated():
    """Over many draws: identical engines are almost never called different, a 10% one almost always is."""
    rng = random.Random(5)
    false_alarms = sum(bool(compare(windows(rng, [100] * 4, noise=6), windows(rng, [100] * 4, noise=6),
                                    resamples=400).significant) for _ in range(200))
    found = sum(bool(compare(windows(rng, [100] * 4, noise=6), windows(rng, [110] * 4, noise=6),
                             resamples=400).significant) for _ in range(200))
    assert false_alarms <= 4  # 2%: the 1% band absorbs the CI's own 1-in-20 misses
    assert found >= 190


def test_the_noise_band_is_what_significance_must_clear():
    # A tight 0.8% difference: beyond 0, not beyond the 1% band.
    a = [[100.0, 100.1, 99.9, 100.0], [100.05, 99.95, 100.0, 100.0]]
    b = [[x * 1.008 for x in w] for w in a[::-1]]
    assert compare(a, b, noise_pct=0).significant is True
    banded = compare(a, b)
    assert banded.significant is False and banded.ci_low_pct > 0
    assert banded.describe().endswith("within noise (+-1% band)")


def test_a_drift_between_windows_is_not_a_difference():
    # Quiet bins, but the machine got 8% slower for A's second window: the windows, not the bins,
    # say how much one window differs from the next, so this is no evidence that B differs.
    a = [[100.0, 100.5, 99.5, 100.2], [92.0, 92.5, 91.5, 92.2]]
    b = [[100.1, 99.6, 100.4, 99.9], [100.0, 100.3, 99.8, 100.1]]
    d = compare(a, b)
    assert d.significant is False, d
    bins_only = compare([a[0] + a[1]], [b[0] + b[1]])  # one window each: only the bins are drawn
    assert bins_only.windows_resampled is False


def drifting(rng: random.Random, n: int, effect: float = 0.0, bins: int = 20, drift: float = 0.015,
             noise: float = 0.015) -> list[list[float]]:
    """n windows of a deployment whose every window drifts (the machine, the engine's state) by
    `drift` and whose bins scatter by `noise` around it, both relative."""
    means = [1000 * (1 + effect) * (1 + rng.gauss(0, drift)) for _ in range(n)]
    return [[m * (1 + rng.gauss(0, noise)) for _ in range(bins)] for m in means]


def test_few_windows_do_not_make_an_aa_bench_significant():
    """A/A, seeded Monte Carlo through the real compare(): the CI must be honest with 2 and 4
    windows a side, where resampling n windows sees only (n-1)/n of their spread. Before the
    correction: 2 windows gave ~10% false "significant", and a 4-window CI excluded 0 ~11% of
    the time (nominal 5%)."""
    rng = random.Random(11)
    for n in (2, 4):
        trials = 300
        results = [compare(drifting(rng, n), drifting(rng, n), resamples=300, seed=rng.randrange(10**6))
                   for _ in range(trials)]
        false_alarms = sum(bool(d.significant) for d in results)
        misses_zero = sum(d.ci_low_pct > 0 or d.ci_high_pct < 0 for d in results)
        assert false_alarms <= 0.03 * trials, (n, false_alarms)
        assert misses_zero <= 0.07 * trials, (n, misses_zero)  # 95% CI: about 5%, at most


def test_a_real_ten_percent_is_still_found_with_four_windows():
    rng = random.Random(12)
    found = sum(bool(compare(drifting(rng, 4), drifting(rng, 4, effect=0.10), resamples=300,
                             seed=rng.randrange(10**6)).significant) for _ in range(60))
    assert found >= 58


def test_one_window_per_side_is_never_judged():
    # Bins alone are confident: this CI lies far beyond the band, but the drift between windows
    # is unknown, so it says so instead of "significant".
    rng = random.Random(13)
    d = compare(windows(rng, [100], bins=30, noise=1), windows(rng, [105], bins=30, noise=1))
    assert d.significant is None and not d.judged and not d.windows_resampled
    assert d.ci_low_pct > 1  # the CI is kept
    assert d.word == NOT_JUDGED and d.describe().endswith(": " + NOT_JUDGED)
    assert "not judged" in NOT_JUDGED
    # One side with one window is not judged either.
    assert compare(windows(rng, [100] * 4), windows(rng, [105], bins=30)).judged is False
    (row,) = level_rows({8: windows(rng, [100])}, {8: windows(rng, [105])})
    assert row["significant"] is None and row["judged"] is False and row["verdict"].endswith(NOT_JUDGED)
    assert (row["a_windows"], row["b_windows"], row["windows_resampled"]) == (1, 1, False)


def test_welch_interval_and_t_quantiles():
    assert abs(t_quantile(0.975, 1) - 12.706) < 0.01
    assert abs(t_quantile(0.975, 4) - 2.776) < 0.001
    assert abs(t_quantile(0.975, 1e6) - 1.960) < 0.001
    low, high = welch_interval([[100.0], [102.0]], [[104.0], [106.0]], 0.95)
    # Means 101 and 105, each side's variance of the mean 1: se sqrt(2), df 2, t 4.303.
    assert abs(low - (4 - 4.303 * 2 ** 0.5) / 101 * 100) < 0.01 and abs(high - (4 + 4.303 * 2 ** 0.5) / 101 * 100) < 0.01
    assert welch_interval([[1.0, 2.0]], [[1.0], [2.0]], 0.95) is None


def test_rows_held_or_with_differing_settings_are_not_called_significant():
    rng = random.Random(14)
    a, b = {8: windows(rng, [100] * 4), 16: windows(rng, [100] * 4)}, {8: windows(rng, [120] * 4), 16: windows(rng, [120] * 4)}
    assert all(row["significant"] is True for row in level_rows(a, b))
    held = level_rows(a, b, held={8: "counted in different units (A by usage, B by sse-events)"})
    assert held[0]["significant"] is None and held[0]["delta_pct"] is None
    assert held[0]["verdict"] == "not compared: counted in different units (A by usage, B by sse-events)"
    assert held[1]["significant"] is True
    for row in level_rows(a, b, settings_differ=True):
        assert row["significant"] is None and row["verdict"].endswith("settings differ, not like for like")
        assert row["delta_pct"] > 15  # the figure is still shown


def test_not_enough_data_gives_no_ci():
    for a, b in (([], [[1.0, 2.0]]), ([[5.0]], [[5.0, 6.0]]), ([[]], [[]])):
        d = compare(a, b)
        assert d.significant is None and d.ci_low_pct is None
        assert d.describe().startswith("not enough data")
    idle = compare([[0.0, 0.0]], [[5.0, 6.0]])
    assert idle.significant is None and "no tokens" in idle.describe()


def test_the_ci_is_reproducible_with_its_seed():
    rng = random.Random(3)
    a, b = windows(rng, [100, 98]), windows(rng, [103, 104])
    assert compare(a, b) == compare(a, b)


def test_level_rows_cover_the_levels_both_sides_measured():
    rng = random.Random(4)
    rows = level_rows({8: windows(rng, [100] * 4), 16: windows(rng, [200] * 4), 32: windows(rng, [300])},
                      {8: windows(rng, [100] * 4), 16: windows(rng, [230] * 4)})
    assert [r["concurrency"] for r in rows] == [8, 16]
    assert set(rows[0]) >= {"concurrency", "a_output_tokens_per_s", "b_output_tokens_per_s", "delta_pct",
                            "ci_low_pct", "ci_high_pct", "significant"}
    assert rows[0]["significant"] is False and rows[1]["significant"] is True


def sse(t: float, conv: int, chars: int, events: int = 1) -> ev.SSEReceived:
    return ev.SSEReceived(t=t, conv=conv, round=1, seq=1, chars=chars, events=events)


def test_tokens_count_where_they_arrived_not_where_the_round_finished():
    meter = WindowMeter("A", 2, 0, start=10.0, end=12.0, bin_s=1.0)
    meter.add(ev.RoundStarted(t=9.4, conv=0, round=1, prompt_chars=10, messages=1))
    meter.add(ev.RoundStarted(t=11.0, conv=1, round=1, prompt_chars=10, messages=1))
    meter.add(sse(9.5, 0, 40))  # warmup: not counted
    meter.add(sse(11.25, 1, 0))  # a role chunk: no text, no token yet
    meter.add(sse(10.2, 0, 40))
    meter.add(sse(11.9, 0, 40))
    meter.add(sse(12.5, 0, 40))  # after the window: not counted
    # 160 characters for 80 tokens: half a token per character.
    meter.add(ev.RoundDone(t=12.6, conv=0, round=1, status=200, reply_chars=160, completion_tokens=80,
                           duration_s=3.2, events=6, max_gap_s=1.0, ttft_s=0.1))
    result = meter.result(cpu_seconds=0.2)
    assert result["output_tokens"] == 40  # 80 characters in the window
    assert result["bins_tokens_per_s"] == [20.0, 20.0]
    assert result["tokens_counted_by"] == "usage"
    assert result["requests"] == 0  # it finished after the window
    assert result["itl_ms"]["p50"] == 1700.0  # 10.2 -> 11.9: both ends inside the window
    assert result["driver_limited"] is None
    # Conversation 1's first token came in the window; its round never finished: its TTFT still counts.
    meter.add(sse(11.5, 1, 4))
    assert meter.result(cpu_seconds=0.2)["ttft_ms"]["p50"] == 500.0
    # A round started late in the window whose first token comes in the grace: its TTFT counts too.
    meter.add(ev.RoundStarted(t=11.8, conv=2, round=1, prompt_chars=10, messages=1))
    meter.add(sse(13.3, 2, 4))
    assert meter.result(cpu_seconds=0.2)["ttft_ms"]["p99"] > 1400.0
    # Rounds of the window that never had a token (failed, or still waiting) are counted, not lost.
    meter.add(ev.RoundStarted(t=11.1, conv=3, round=1, prompt_chars=10, messages=1))
    meter.add(ev.RoundFailed(t=13.0, conv=3, round=1, phase="before-first-byte", error="reset", duration_s=1.9))
    meter.add(ev.RoundStarted(t=11.9, conv=4, round=1, prompt_chars=10, messages=1))
    meter.add(ev.RoundStarted(t=12.1, conv=5, round=1, prompt_chars=10, messages=1))  # after the window: not its
    assert meter.result(cpu_seconds=0.2)["rounds_without_first_token"] == 2


def test_without_usage_each_content_event_is_a_token():
    meter = WindowMeter("A", 1, 0, start=0.0, end=1.0, bin_s=0.5)
    meter.add(sse(0.1, 0, 5, events=2))
    meter.add(sse(0.7, 0, 0, events=1))  # no reply text (a usage or [DONE] event): not a token
    meter.add(sse(0.8, 0, 7, events=1))
    assert meter.result(cpu_seconds=None)["bins_tokens_per_s"] == [4.0, 2.0]


def test_a_short_last_bin_is_no_sample():
    meter = WindowMeter("A", 1, 0, start=0.0, end=2.5, bin_s=1.0)
    assert len(meter.result(cpu_seconds=None)["bins_tokens_per_s"]) == 2


def test_failures_and_stalls_count_even_in_warmup_and_grace():
    meter = WindowMeter("B", 4, 1, start=5.0, end=6.0, bin_s=0.5)
    meter.add(ev.RoundFailed(t=4.0, conv=1, round=2, phase="mid-stream", error="reset", duration_s=1.0))
    meter.add(ev.RoundStalled(t=6.5, conv=2, round=1, phase="mid-stream", stalled_for_s=1.0, started_t=5.0,
                              last_progress_t=5.5))
    result = meter.result(cpu_seconds=None)
    assert result["errors"] == 1 and result["error_texts"] == ["reset"]
    assert result["stalls"] == 1


def test_the_driver_as_the_limit_is_named():
    meter = WindowMeter("A", 64, 0, start=0.0, end=2.0, bin_s=1.0)
    for t in (0.5, 1.0, 1.5):
        meter.add(ev.LoopLag(t=t, max_ms=300.0, p99_ms=120.0, in_flight=64))
    result = meter.result(cpu_seconds=1.9)
    assert "lagged 120 ms" in result["driver_limited"]
    assert "95% of a core" in result["driver_limited"]
    calm = WindowMeter("A", 64, 0, start=0.0, end=2.0, bin_s=1.0)
    calm.add(ev.LoopLag(t=1.0, max_ms=3.0, p99_ms=2.0, in_flight=64))
    assert calm.result(cpu_seconds=0.4)["driver_limited"] is None


def test_one_starved_worker_of_several_makes_the_driver_the_limit():
    """Pooled, worker 0's quiet seconds hid worker 1's: the median of all p99s stayed low."""
    meter = WindowMeter("A", 64, 0, start=0.0, end=4.0, bin_s=1.0)
    for t in (1.0, 2.0, 3.0, 4.0):
        meter.add(ev.LoopLag(t=t, max_ms=3.0, p99_ms=2.0, in_flight=32, worker=0))
        meter.add(ev.LoopLag(t=t, max_ms=3.0, p99_ms=2.0 if t > 1 else 900.0, in_flight=0, judge=True))
        meter.add(ev.LoopLag(t=t, max_ms=400.0, p99_ms=300.0 if t > 1 else 10.0, in_flight=32, worker=1))
    result = meter.result(cpu_seconds=None)
    assert result["loop_lag_p99_ms"] == 300.0 and "lagged 300 ms" in result["driver_limited"]
    # The parent drives no round and counts by the workers' stamps: its lag alone limits nothing.
    parent_only = WindowMeter("A", 64, 0, start=0.0, end=2.0, bin_s=1.0)
    for t in (1.0, 2.0):
        parent_only.add(ev.LoopLag(t=t, max_ms=3.0, p99_ms=2.0, in_flight=32, worker=0))
        parent_only.add(ev.LoopLag(t=t, max_ms=900.0, p99_ms=800.0, in_flight=0, judge=True))
    assert parent_only.result(cpu_seconds=None)["driver_limited"] is None
