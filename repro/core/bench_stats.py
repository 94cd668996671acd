"""Is B's throughput different from A's, beyond noise? A two-stage bootstrap of the relative difference.

The samples of one deployment at one concurrency level are its measured windows (one per
repeat), each split into sub-windows (bins) of throughput. Bins of one window share that
window's conditions (the machine's load then, the engine's state), so they are not independent
draws: resampling bins alone would see only the noise inside a window and call a drift between
windows "significant". Each resample therefore draws windows with replacement first, then bins
within each drawn window (the cluster bootstrap); with one window per side only the bins are
drawn, and the result says so (`windows_resampled` False).

Pure: no I/O, no clock; the stdlib `random` with a fixed seed makes a CI reproducible.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

RESAMPLES = 2000
CONFIDENCE = 0.95
MIN_BINS = 2  # per side: fewer cannot say anything about noise
# A difference is "significant" only when its whole CI lies beyond +-NOISE_PCT, as Criterion.rs
# decides (its `noise_threshold`, 0.01 by default): a CI that excludes 0 by a hair on a shared
# machine is a 1-in-20 accident or a drift, not a setting worth reverting for. 0: CI excludes 0.
NOISE_PCT = 1.0


@dataclass(frozen=True)
class Difference:
    """B relative to A at one level: `delta_pct` = (B / A - 1) x 100, with its CI."""

    a_mean: float | None
    b_mean: float | None
    delta_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    significant: bool | None  # None: not enough data to tell
    windows_resampled: bool = False
    reason: str = ""  # why there is no CI, when there is none
    noise_pct: float = NOISE_PCT

    @property
    def word(self) -> str:
        if self.significant is None:
            return f"not enough data ({self.reason})"
        if self.significant:
            return "significant"
        if self.ci_low_pct is not None and (self.ci_low_pct > 0 or self.ci_high_pct < 0):
            return f"within noise (+-{self.noise_pct:g}% band)"
        return "flat, within noise"

    def describe(self) -> str:
        """'+12.8% (95% CI +10.9..+14.7): significant', the line people quote."""
        if self.delta_pct is None:
            return self.word
        if self.ci_low_pct is None:
            return f"{self.delta_pct:+.1f}%: {self.word}"
        return f"{self.delta_pct:+.1f}% (95% CI {self.ci_low_pct:+.1f}..{self.ci_high_pct:+.1f}): {self.word}"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _quantile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks of an already sorted list."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _usable(windows: list[list[float]]) -> list[list[float]]:
    return [list(w) for w in windows if w]


def _resampled_mean(windows: list[list[float]], rng: random.Random) -> float:
    drawn = rng.choices(windows, k=len(windows)) if len(windows) > 1 else windows
    total = 0.0
    count = 0
    for bins in drawn:
        total += sum(rng.choices(bins, k=len(bins)))
        count += len(bins)
    return total / count


def compare(a_windows: list[list[float]], b_windows: list[list[float]], *, resamples: int = RESAMPLES,
            confidence: float = CONFIDENCE, seed: int = 0, noise_pct: float = NOISE_PCT) -> Difference:
    """The relative difference of B's mean bin over A's, with a bootstrap CI.

    Each argument is a list of windows, each a list of per-bin throughputs. "significant" when
    the CI lies wholly beyond +-noise_pct (0: when it excludes 0)."""
    a, b = _usable(a_windows), _usable(b_windows)
    a_bins = [x for w in a for x in w]
    b_bins = [x for w in b for x in w]
    a_mean = _mean(a_bins) if a_bins else None
    b_mean = _mean(b_bins) if b_bins else None
    short = [name for name, bins in (("A", a_bins), ("B", b_bins)) if len(bins) < MIN_BINS]
    if short:
        return Difference(a_mean, b_mean, None, None, None, None,
                          reason=f"{' and '.join(short)} has fewer than {MIN_BINS} sub-windows")
    if a_mean <= 0:
        return Difference(a_mean, b_mean, None, None, None, None, reason="A produced no tokens")
    delta = (b_mean / a_mean - 1) * 100
    rng = random.Random(seed)
    deltas = []
    for _ in range(resamples):
        a_star = _resampled_mean(a, rng)
        if a_star > 0:
            deltas.append((_resampled_mean(b, rng) / a_star - 1) * 100)
    if len(deltas) < resamples // 2:
        return Difference(a_mean, b_mean, delta, None, None, None, reason="A produced tokens in too few sub-windows")
    deltas.sort()
    tail = (1 - confidence) / 2
    low, high = _quantile(deltas, tail), _quantile(deltas, 1 - tail)
    return Difference(a_mean, b_mean, round(delta, 2), round(low, 2), round(high, 2),
                      low > noise_pct or high < -noise_pct or (noise_pct == 0 and (low > 0 or high < 0)),
                      windows_resampled=len(a) > 1 and len(b) > 1, noise_pct=noise_pct)


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) by linear interpolation; None for no values."""
    if not values:
        return None
    return _quantile(sorted(values), q)


def level_rows(a: dict[int, list[list[float]]], b: dict[int, list[list[float]]], *,
               resamples: int = RESAMPLES, seed: int = 0, noise_pct: float = NOISE_PCT) -> list[dict]:
    """One row per concurrency level both sides measured: each side's windows of bin throughputs
    in, the `levels` rows of `--json` out (tokens/s are the mean bin, the difference B vs A)."""
    rows = []
    for level in sorted(set(a) & set(b)):
        d = compare(a[level], b[level], resamples=resamples, seed=seed, noise_pct=noise_pct)
        rows.append({
            "concurrency": level,
            "a_output_tokens_per_s": None if d.a_mean is None else round(d.a_mean, 2),
            "b_output_tokens_per_s": None if d.b_mean is None else round(d.b_mean, 2),
            "delta_pct": d.delta_pct,
            "ci_low_pct": d.ci_low_pct,
            "ci_high_pct": d.ci_high_pct,
            "significant": d.significant,
            "windows_resampled": d.windows_resampled,
            "verdict": d.describe(),
        })
    return rows
