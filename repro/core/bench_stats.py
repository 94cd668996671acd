"""Is B's throughput different from A's, beyond noise? A two-stage bootstrap of the relative difference.

The samples of one deployment at one concurrency level are its measured windows (one per
repeat), each split into sub-windows (bins) of throughput. Bins of one window share that
window's conditions (the machine's load then, the engine's state), so they are not independent
draws: resampling bins alone would see only the noise inside a window and call a drift between
windows "significant". Each resample therefore draws windows with replacement first, then bins
within each drawn window (the cluster bootstrap).

Few windows make that too confident: n draws from n windows see (n-1)/n of their spread, and a
percentile interval from 4 values is narrower than a t one. So the window stage is stretched by
sqrt(n/(n-1)), and the CI is widened to cover Welch's t-interval on the window means too (a
false "significant" is the costly mistake). With one window per side the drift between windows
was not measured at all: the CI is kept (bins only) but the level is "not judged".

Pure: no I/O, no clock; the stdlib `random` with a fixed seed makes a CI reproducible.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from repro.core.quantiles import quantile_of_sorted

RESAMPLES = 2000
CONFIDENCE = 0.95
MIN_BINS = 2  # per side: fewer cannot say anything about noise
# A difference is "significant" only when its whole CI lies beyond +-NOISE_PCT, as Criterion.rs
# decides (its `noise_threshold`, 0.01 by default): a CI that excludes 0 by a hair on a shared
# machine is a 1-in-20 accident or a drift, not a setting worth reverting for. 0: CI excludes 0.
NOISE_PCT = 1.0
NOT_JUDGED = "not judged: one window per side, the drift between windows was not measured"


@dataclass(frozen=True)
class Difference:
    """B relative to A at one level: `delta_pct` = (B / A - 1) x 100, with its CI."""

    a_mean: float | None
    b_mean: float | None
    delta_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    significant: bool | None  # None: not enough data to tell, or not judged
    windows_resampled: bool = False
    reason: str = ""  # why there is no CI, when there is none
    noise_pct: float = NOISE_PCT
    judged: bool = True  # False: one window on a side, so the drift between windows is unknown
    a_windows: int = 0
    b_windows: int = 0

    @property
    def word(self) -> str:
        if not self.judged:
            return NOT_JUDGED
        if self.significant is None:
            return f"not enough data ({self.reason})"
        if self.significant:
            return "significant"
        if self.ci_low_pct is not None and (self.ci_low_pct > 0 or self.ci_high_pct < 0):
            return f"within noise (+-{self.noise_pct:g}% band)"
        return "flat, within noise"

    def describe(self, word: str | None = None) -> str:
        """'+12.8% (95% CI +10.9..+14.7): significant', the line people quote (`word`: another verdict)."""
        word = word or self.word
        if self.delta_pct is None:
            return word
        if self.ci_low_pct is None:
            return f"{self.delta_pct:+.1f}%: {word}"
        return f"{self.delta_pct:+.1f}% (95% CI {self.ci_low_pct:+.1f}..{self.ci_high_pct:+.1f}): {word}"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _usable(windows: list[list[float]]) -> list[list[float]]:
    return [list(w) for w in windows if w]


def _resampled_mean(windows: list[list[float]], rng: random.Random, center: float) -> float:
    n = len(windows)
    drawn = rng.choices(windows, k=n) if n > 1 else windows
    total = 0.0
    count = 0
    for bins in drawn:
        total += sum(rng.choices(bins, k=len(bins)))
        count += len(bins)
    if n < 2:
        return total / count
    # n draws of n windows see (n-1)/n of their variance: stretch the deviation back.
    return center + (total / count - center) * math.sqrt(n / (n - 1))


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta (Numerical Recipes' betacf)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-12:
            break
    return h


def _t_cdf(t: float, df: float) -> float:
    x = df / (df + t * t)
    a, b = df / 2, 0.5
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    tail = front * _betacf(a, b, x) / a if x < (a + 1) / (a + b + 2) else 1 - front * _betacf(b, a, 1 - x) / b
    return 1 - tail / 2 if t > 0 else tail / 2


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile (p > 0.5) by bisection on its CDF: the stdlib has none."""
    low, high = 0.0, 1000.0
    for _ in range(80):
        mid = (low + high) / 2
        if _t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def welch_interval(a: list[list[float]], b: list[list[float]], confidence: float) -> tuple[float, float] | None:
    """Welch's t-interval of B's mean window minus A's, in % of A's; None without 2 windows a side."""
    if len(a) < 2 or len(b) < 2:
        return None
    ma, mb = [_mean(w) for w in a], [_mean(w) for w in b]
    va, vb = _variance(ma) / len(ma), _variance(mb) / len(mb)
    a_mean = _mean(ma)
    if a_mean <= 0:
        return None
    gap = _mean(mb) - a_mean
    if va + vb == 0:
        return gap / a_mean * 100, gap / a_mean * 100
    df = (va + vb) ** 2 / (va ** 2 / (len(ma) - 1) + vb ** 2 / (len(mb) - 1))
    half = t_quantile(1 - (1 - confidence) / 2, df) * math.sqrt(va + vb)
    return (gap - half) / a_mean * 100, (gap + half) / a_mean * 100


def _variance(values: list[float]) -> float:
    m = _mean(values)
    return sum((v - m) ** 2 for v in values) / (len(values) - 1)


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
    counts = {"a_windows": len(a), "b_windows": len(b)}
    if a_mean <= 0:
        return Difference(a_mean, b_mean, None, None, None, None, reason="A produced no tokens", **counts)
    delta = (b_mean / a_mean - 1) * 100
    rng = random.Random(seed)
    deltas = []
    for _ in range(resamples):
        a_star = _resampled_mean(a, rng, a_mean)
        if a_star > 0:
            deltas.append((_resampled_mean(b, rng, b_mean) / a_star - 1) * 100)
    if len(deltas) < resamples // 2:
        return Difference(a_mean, b_mean, delta, None, None, None, reason="A produced tokens in too few sub-windows",
                          **counts)
    deltas.sort()
    tail = (1 - confidence) / 2
    low, high = quantile_of_sorted(deltas, tail), quantile_of_sorted(deltas, 1 - tail)
    if (t := welch_interval(a, b, confidence)) is not None:
        low, high = min(low, t[0]), max(high, t[1])
    judged = len(a) > 1 and len(b) > 1
    beyond = low > noise_pct or high < -noise_pct or (noise_pct == 0 and (low > 0 or high < 0))
    return Difference(a_mean, b_mean, round(delta, 2), round(low, 2), round(high, 2),
                      beyond if judged else None, windows_resampled=judged, noise_pct=noise_pct, judged=judged,
                      **counts)


def level_rows(a: dict[int, list[list[float]]], b: dict[int, list[list[float]]], *,
               resamples: int = RESAMPLES, seed: int = 0, noise_pct: float = NOISE_PCT,
               held: dict[int, str] | None = None, settings_differ: bool = False) -> list[dict]:
    """One row per concurrency level both sides measured: each side's windows of bin throughputs
    in, the `levels` rows of `--json` out (tokens/s are the mean bin, the difference B vs A).

    `held`: levels not to compare at all, with why (e.g. tokens counted in different units).
    `settings_differ`: the two sides were not loaded alike, so no level is called significant."""
    rows = []
    for level in sorted(set(a) & set(b)):
        d = compare(a[level], b[level], resamples=resamples, seed=seed, noise_pct=noise_pct)
        significant, verdict = d.significant, d.describe()
        delta, low, high = d.delta_pct, d.ci_low_pct, d.ci_high_pct
        if held and level in held:
            significant, delta, low, high = None, None, None, None
            verdict = f"not compared: {held[level]}"
        elif settings_differ and d.delta_pct is not None:
            significant = None
            verdict = d.describe(word="settings differ, not like for like")
        rows.append({
            "concurrency": level,
            "a_output_tokens_per_s": None if d.a_mean is None else round(d.a_mean, 2),
            "b_output_tokens_per_s": None if d.b_mean is None else round(d.b_mean, 2),
            "delta_pct": delta,
            "ci_low_pct": low,
            "ci_high_pct": high,
            "significant": significant,
            "judged": d.judged and significant is not None,
            "a_windows": d.a_windows,
            "b_windows": d.b_windows,
            "windows_resampled": d.windows_resampled,
            "verdict": verdict,
        })
    return rows
