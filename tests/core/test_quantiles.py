"""One quantile for every figure repro prints: linear interpolation between the closest ranks."""

from __future__ import annotations

import random
import statistics

from repro.core.quantiles import percentile, quantile_of_sorted, quantiles_ms


def test_percentile_interpolates():
    assert percentile([], 0.5) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([7.0], 0.99) == 7.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.0) == 1.0 and percentile([4.0, 1.0, 3.0, 2.0], 1.0) == 4.0


def test_it_is_the_inclusive_method_people_compute_with():
    rng = random.Random(3)
    values = [rng.expovariate(1.0) for _ in range(37)]
    cuts = statistics.quantiles(values, n=100, method="inclusive")  # cuts[k - 1] is the k-th percentile
    for k in (50, 95, 99):
        assert abs(percentile(values, k / 100) - cuts[k - 1]) < 1e-12


def test_quantile_of_sorted_reads_a_sorted_list_as_is():
    assert quantile_of_sorted([1.0, 2.0, 4.0], 0.75) == 3.0


def test_quantiles_ms_are_named_and_in_milliseconds():
    assert quantiles_ms([]) == {"p50": None, "p95": None, "p99": None}
    assert quantiles_ms([0.010, 0.020, 0.030]) == {"p50": 20.0, "p95": 29.0, "p99": 29.8}
