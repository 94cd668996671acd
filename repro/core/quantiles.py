"""Quantiles, one definition for every figure repro prints: a run's summary, a bench's windows and
levels, the bootstrap's confidence interval.

The method is linear interpolation between the closest ranks (Hyndman and Fan's type 7, the
default of numpy, R and Python's `statistics.quantiles(method="inclusive")`): it is defined for
any number of values, moves smoothly as a value moves, and gives the same p95 wherever the
same values are seen, so `repro run`'s TTFT p95 and `repro bench`'s agree and match what people
compute from the log with their own tools. (Nearest rank, the other common choice, jumps from
one value to the next and on few values lands on the maximum.) Pure: plain numbers in and out.
"""

from __future__ import annotations

import math

# The quantiles a latency is reported by, with their names in --json.
REPORTED = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))


def quantile_of_sorted(ordered: list[float], q: float) -> float:
    """The q-quantile (0..1) of an already sorted, non-empty list, by linear interpolation."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) of any values; None for no values."""
    if not values:
        return None
    return quantile_of_sorted(sorted(values), q)


def quantiles_ms(seconds: list[float]) -> dict[str, float | None]:
    """{"p50", "p95", "p99"} of durations in seconds, in milliseconds to two decimals (None: no values)."""
    ordered = sorted(seconds)
    return {name: round(quantile_of_sorted(ordered, q) * 1000, 2) if ordered else None for name, q in REPORTED}
