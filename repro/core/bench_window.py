"""One measured window of a bench, from the run's events: what arrived in it, not what finished in it.

A window is (deployment, concurrency level, repeat): a warmup, then `[start, end)` measured,
then a bounded grace while the rounds still in flight end. Output tokens are counted by when
they arrived: each SSE read's reply characters land in the sub-window (bin) of their arrival
time, and characters are turned into tokens with the ratio the window's own finished rounds
report (`usage.completion_tokens` over reply characters), so a round that straddles the edge
counts only its part inside. When no round reported usage, each content-bearing SSE event
counts as one token.

Errors and stalls count over the whole window, warmup and grace included: a failure is never
dropped for falling outside the measured part. Pure: it is fed events and told the window's
bounds and the process CPU time it used; it reads no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from repro.core import events as ev
from repro.core.quantiles import percentile, quantiles_ms

# The driver was the limit when its event loop lagged this much (p99) or it used this share of a core.
LOOP_LAG_LIMIT_MS = 50.0
CPU_SHARE_LIMIT = 0.85


@dataclass
class WindowMeter:
    deployment: str
    concurrency: int
    repeat: int
    start: float
    end: float
    bin_s: float
    chars_bins: list[int] = field(init=False)
    content_events_bins: list[int] = field(init=False)
    requests: int = 0
    usage_tokens: int = 0  # completion tokens of finished rounds that reported usage
    usage_chars: int = 0  # and their reply characters
    ttfts: list[float] = field(default_factory=list)
    itls: list[float] = field(default_factory=list)
    errors: int = 0
    error_texts: list[str] = field(default_factory=list)
    stalls: list[tuple[int, int]] = field(default_factory=list)
    # Each driving loop's per-second p99s, by worker (None without --workers). The parent of a
    # sharded bench drives no round and counts tokens by the workers' own stamps: its lag is not here.
    loop_lag_p99_ms: dict[int | None, list[float]] = field(default_factory=dict)
    _last_content: dict[tuple[int, int], float] = field(default_factory=dict)
    _started: dict[tuple[int, int], float] = field(default_factory=dict)  # rounds with no token yet
    # Rounds started in the window that failed or were abandoned before any token: the slowest
    # TTFTs, which no quantile holds; counted so that a low p99 is not read as all there was.
    _no_first_token: int = 0

    def __post_init__(self) -> None:
        count = max(1, math.ceil((self.end - self.start) / self.bin_s - 1e-9))
        self.chars_bins = [0] * count
        self.content_events_bins = [0] * count

    def move(self, start: float, end: float) -> None:
        """New bounds, before any event fell in the window: a window driven by worker processes
        starts its clock once they are up."""
        self.start, self.end = start, end
        self.__post_init__()

    def _bin(self, t: float) -> int | None:
        if not self.start <= t < self.end:
            return None
        return min(len(self.chars_bins) - 1, int((t - self.start) / self.bin_s))

    def add(self, event: ev.Event) -> None:
        kind = type(event)
        if kind is ev.SSEReceived:
            if not event.chars:
                return
            key = (event.conv, event.round)
            index = self._bin(event.t)
            started = self._started.pop(key, None)
            if started is not None and self.start <= started < self.end:
                # TTFT belongs to the window the round started in, wherever its first token lands:
                # counted by arrival, a late round's long wait into the grace was left out (p99 low).
                self.ttfts.append(event.t - started)
            if index is not None:
                self.chars_bins[index] += event.chars
                self.content_events_bins[index] += event.events
                previous = self._last_content.get(key)
                if previous is not None and previous >= self.start:
                    # Several events in one read share its arrival: the gap is spread over them.
                    self.itls.append((event.t - previous) / max(1, event.events))
            self._last_content[key] = event.t
        elif kind is ev.RoundStarted:
            self._started[(event.conv, event.round)] = event.t
        elif kind is ev.RoundDone:
            self._last_content.pop((event.conv, event.round), None)
            self._started.pop((event.conv, event.round), None)
            # A round that called tools streamed characters its reply_chars leave out (the calls'):
            # only plain replies give the ratio.
            if event.completion_tokens and event.reply_chars and not event.tool_calls:
                self.usage_tokens += event.completion_tokens
                self.usage_chars += event.reply_chars
            if self.start <= event.t < self.end:
                self.requests += 1
        elif kind is ev.RoundFailed:
            self._last_content.pop((event.conv, event.round), None)
            self._count_no_first_token(self._started.pop((event.conv, event.round), None))
            self.errors += 1
            if len(self.error_texts) < 3 and event.error not in self.error_texts:
                self.error_texts.append(event.error)
        elif kind is ev.RoundAbandoned:
            self._last_content.pop((event.conv, event.round), None)
            self._count_no_first_token(self._started.pop((event.conv, event.round), None))
        elif kind is ev.RoundStalled:
            self.stalls.append((event.conv, event.round))
        elif kind is ev.LoopLag and not event.judge and self.start <= event.t <= self.end + 1.0:
            self.loop_lag_p99_ms.setdefault(event.worker, []).append(event.p99_ms)

    def _count_no_first_token(self, started: float | None) -> None:
        if started is not None and self.start <= started < self.end:
            self._no_first_token += 1

    def awaits_first_token(self, conv: int, round_index: int) -> bool:
        """Whether a round that started has had no content yet (its phase, were it cut now)."""
        return (conv, round_index) in self._started

    @property
    def tokens_per_char(self) -> float | None:
        return self.usage_tokens / self.usage_chars if self.usage_chars else None

    def token_bins(self) -> list[float]:
        ratio = self.tokens_per_char
        if ratio is None:
            return [float(n) for n in self.content_events_bins]
        return [chars * ratio for chars in self.chars_bins]

    def result(self, *, cpu_seconds: float | None, verdicts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        duration = self.end - self.start
        tokens = self.token_bins()
        widths = [min(self.bin_s, duration - i * self.bin_s) for i in range(len(tokens))]
        # Each loop reports its lag each second: the median of a loop's p99s is its usual state (their
        # maximum would flag one slow second); the worst loop's median, since one starved worker of
        # N lowers the window's load as surely as a starved single driver.
        medians = [m for lags in self.loop_lag_p99_ms.values() if (m := percentile(lags, 0.5)) is not None]
        lag = max(medians) if medians else None
        cpu_share = None if cpu_seconds is None or duration <= 0 else round(cpu_seconds / duration, 3)
        limits = []
        if lag is not None and lag > LOOP_LAG_LIMIT_MS:
            limits.append(f"the driver's event loop lagged {lag:.0f} ms (p99, median second)")
        if cpu_share is not None and cpu_share > CPU_SHARE_LIMIT:
            limits.append(f"the driver used {cpu_share:.0%} of a core")
        return {
            "deployment": self.deployment,
            "concurrency": self.concurrency,
            "repeat": self.repeat,
            "start_t": round(self.start, 3),
            "end_t": round(self.end, 3),
            "duration_s": round(duration, 3),
            "output_tokens": round(sum(tokens), 1),
            "output_tokens_per_s": round(sum(tokens) / duration, 2) if duration > 0 else None,
            "tokens_counted_by": "usage" if self.tokens_per_char is not None else "sse-events",
            "bin_s": self.bin_s,
            # Only whole-width bins are samples of the rate; a short last bin would read low.
            "bins_tokens_per_s": [round(n / w, 2) for n, w in zip(tokens, widths, strict=True)
                                  if w >= self.bin_s * 0.999],
            "requests": self.requests,
            "requests_per_s": round(self.requests / duration, 3) if duration > 0 else None,
            "ttft_ms": quantiles_ms(self.ttfts),
            "rounds_without_first_token": self._no_first_token + sum(
                1 for t in self._started.values() if self.start <= t < self.end),
            "itl_ms": quantiles_ms(self.itls),
            "errors": self.errors,
            "error_texts": self.error_texts,
            "stalls": len(self.stalls),
            "verdicts": verdicts or [],
            "loop_lag_p99_ms": None if lag is None else round(lag, 2),
            "cpu_share": cpu_share,
            "driver_limited": "; ".join(limits) or None,
        }
