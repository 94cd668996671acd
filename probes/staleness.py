"""Judging samples over time: counter rates and gauges that were not refreshed. Pure code.

SGLang writes its running/queued gauges only when a prefill batch is scheduled or every 40
decode steps (report_prefill_stats / report_decode_stats in python/sglang/srt/managers/
scheduler_components/metrics_reporter.py), and when idle refreshes them at most every 30 s
(_maybe_log_idle_metrics there; sglang PR 26495 measured the lag). One page cannot show that; a
short history can. The rule, kept simple on purpose:

    an SGLang page whose running or queued gauge is > 0, where that gauge and every progress
    counter (ITL histogram count, generation tokens, realtime decode and prefill tokens, HTTP
    in-flight) have not changed over the last STALE_AFTER_SAMPLES readable samples,
    has its running/queued gauges marked stale.

Realtime prefill tokens count because a 0.5.23 PD prefill worker observes no inter-token latency
and never decodes: prefill is the only progress it shows.

Stale means "stale or hung": an engine that wedged mid-batch looks the same. The verdict
discounts stale gauges and lets a fresh canary decide. vLLM gauges are set every engine step,
so a frozen non-zero vLLM gauge is not marked: it means no step ran (hung, or the abort-all bug
vllm#22545), which the canary tells apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

STALE_AFTER_SAMPLES = 3  # i.e. unchanged across more than two sampling intervals
GAUGES = ("running", "queued")
PROGRESS = ("itl_count", "gen_tokens_total", "in_flight")
PROGRESS_SERIES = ("sglang:realtime_tokens_total{mode=decode}", "sglang:realtime_tokens_total{mode=prefill_compute}")
STALE_PRONE_GAUGES = {
    "sglang": ("sglang:num_running_reqs", "sglang:num_requests_running", "sglang:num_queue_reqs",
               "sglang:num_requests_waiting"),
}


def stale_gauges(history: Sequence[dict[str, Any]]) -> list[str]:
    """Names of gauges on the latest sample judged not refreshed; history is one hop's readable
    samples (snapshot dicts), oldest first, the latest last."""
    if len(history) < STALE_AFTER_SAMPLES:
        return []
    window = history[-STALE_AFTER_SAMPLES:]
    latest = window[-1]
    prone = STALE_PRONE_GAUGES.get(latest.get("dialect", ""))
    if not prone or not all(s.get("ok") and s.get("dialect") == latest["dialect"] for s in window):
        return []
    if not any((latest.get(g) or 0) > 0 for g in GAUGES):
        return []  # zero gauges are not the misleading case (and idle is refreshed on busy->idle)

    def frozen(get) -> bool:
        return all(get(s) == get(latest) for s in window)

    if not all(frozen(lambda s, k=k: s.get(k)) for k in GAUGES + PROGRESS):
        return []
    if not all(frozen(lambda s, k=k: (s.get("series") or {}).get(k)) for k in PROGRESS_SERIES):
        return []
    series = latest.get("series") or {}
    return [name for name in prone if name in series]


def counter_rate(previous: dict[str, Any] | None, current: dict[str, Any], key: str, seconds: float) -> float | None:
    """Per-second increase of a counter between two samples; None across a reset or a gap."""
    if previous is None or seconds <= 0:
        return None
    a, b = previous.get(key), current.get(key)
    if a is None or b is None or b < a:
        return None
    return (b - a) / seconds
