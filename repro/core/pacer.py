"""How fast new rounds may start: a token bucket, sans-I/O (times in, delays out).

Why: starting a round costs the driver ~0.1 ms of CPU (encode the history, build and write the
request). Conversations whose replies have the same length stay in lock-step, so a thousand of
them finish a round in the same instant and would start the next in one loop iteration: a
100-200 ms freeze of our own event loop once per round (measured: 512 paced streams lagged
1-5 ms between round boundaries and 50-120 ms at them). Streams in flight go unread meanwhile,
and the loop-lag evidence would point at the client. Spreading such a herd costs its last
round (N - burst) / rate seconds (1024 rounds at the default 3000/s: a third of a second, once: the
conversations then stay spread), and a round's clock (its TTFT, its stall timer) starts only
when it is admitted, so no figure includes the wait.
"""

from __future__ import annotations


class StartPacer:
    """At most `burst` starts at once, then `rate` per second; waiters are served in order."""

    __slots__ = ("rate", "burst", "_next_free")

    def __init__(self, rate: float, burst: int) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"a start pacer needs rate > 0 and burst >= 1, got rate={rate}, burst={burst}")
        self.rate = rate
        self.burst = burst
        self._next_free = float("-inf")  # the earliest time the next start may take

    def reserve(self, now: float) -> float:
        """Reserve the next start slot; return how many seconds to wait for it (0: start now)."""
        interval = 1.0 / self.rate
        # An idle bucket refills: never let credit pile beyond `burst` starts.
        earliest = now - (self.burst - 1) * interval
        slot = max(self._next_free, earliest)
        self._next_free = slot + interval
        return max(0.0, slot - now)
