"""bench.json's processing with plain data (repro.reporting.bench_results): no engine, no driving."""

from __future__ import annotations

import json

import pytest

from repro.core.errors import UsageError
from repro.reporting.bench_results import (
    BENCH_FILE,
    BENCH_KIND,
    BenchFileError,
    levels_between_runs,
    per_level,
    read_bench,
    settings_differ,
    warnings_of,
)


def window(level: int, bins: list[float], *, deployment: str = "A", invalid: str | None = None, **extra) -> dict:
    return {"deployment": deployment, "concurrency": level, "repeat": 0, "bins_tokens_per_s": bins,
            "output_tokens_per_s": sum(bins) / len(bins), "requests_per_s": 1.0, "errors": 0, "stalls": 0,
            "ttft_ms": {"p50": 10.0, "p95": 20.0, "p99": 30.0}, "itl_ms": {"p50": 1.0, "p95": 2.0, "p99": 3.0},
            "invalid": invalid, **extra}


def test_a_level_folds_its_valid_windows_and_pools_raw_samples():
    windows = [window(8, [100.0, 110.0]), window(8, [120.0, 130.0]), window(8, [1.0, 1.0], invalid="worker 0 died")]
    (row,) = per_level(windows, {(8, "A"): {"ttft": [0.010, 0.020, 0.030], "itl": []}})
    assert (row["windows"], row["windows_invalid"], row["output_tokens_per_s"]) == (2, 1, 115.0)
    assert row["ttft_ms"] == {"p50": 20.0, "p95": 29.0, "p99": 29.8}
    assert row["itl_ms"] == {"p50": None, "p95": None, "p99": None}
    (fallback,) = per_level(windows)  # no raw samples: each quantile the valid windows' worst
    assert fallback["ttft_ms"] == {"p50": 10.0, "p95": 20.0, "p99": 30.0}


def test_the_same_prompts_under_another_path_do_not_differ():
    a = {"max_tokens": 64, "prompts_file": "a.jsonl", "prompts_sha256": "x"}
    assert settings_differ(a, {**a, "prompts_file": "b.jsonl"}) == {}
    assert settings_differ(a, {**a, "max_tokens": 128}) == {"max_tokens": [64, 128]}


def test_runs_with_no_level_in_common_are_refused():
    a, b = {"windows": [window(8, [1.0, 2.0])]}, {"windows": [window(16, [1.0, 2.0])]}
    with pytest.raises(UsageError, match="no level in common"):
        levels_between_runs(a, b, "run-a", "run-b")


def test_warnings_name_the_driver_limit_and_the_invalid_windows():
    data = {"per_level": [{"concurrency": 8, "deployment": "A", "driver_limited": "the driver used 90% of a core"}],
            "windows": [window(8, [1.0], invalid="worker 1 died")]}
    (limited, invalid) = warnings_of(data)
    assert limited.startswith("c=8 A: the driver was the limit") and "invalid (worker 1 died)" in invalid


def test_a_malformed_bench_file_is_one_line_naming_it(tmp_path):
    with pytest.raises(BenchFileError, match="is not a bench run"):
        read_bench(tmp_path)
    (tmp_path / BENCH_FILE).write_text(json.dumps({"kind": BENCH_KIND, "windows": [{"deployment": "A"}]}))
    with pytest.raises(BenchFileError, match="window 1 lacks 'concurrency', 'bins_tokens_per_s'"):
        read_bench(tmp_path)
