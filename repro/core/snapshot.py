"""One hop's metrics at one moment, whatever the engine or router calls them.

The payload of every probe sample (events.ProbeSample), read by the verdict (repro.core.classify):
hop, url, ok, error, dialect, running, queued, in_flight, held, gen_tokens_total, itl_count,
stale, workers, scrape_s - plus a few extras that help a human reading the run log (the raw
series values used, the labels kept, rates filled in by the Sampler or the fleet source).
"""

from __future__ import annotations

from typing import Any

import msgspec


class Snapshot(msgspec.Struct, kw_only=True):
    hop: str = ""
    url: str = ""
    ok: bool = False
    error: str | None = None
    dialect: str = "unknown"  # sglang | vllm | tgi | llamacpp | sglang-router | repro-proxy | unknown
    running: float | None = None  # requests in the engine's batch
    queued: float | None = None  # requests waiting at the engine (incl. PD queues)
    in_flight: float | None = None  # requests a router/proxy (or SGLang's HTTP layer) holds open right now
    held: float | None = None  # flows our fault proxy deliberately holds
    gen_tokens_total: float | None = None  # counter; SGLang bumps it only when a request finishes
    prompt_tokens_total: float | None = None
    itl_count: float | None = None  # per-token progress counter (ITL histogram count, decode steps)
    itl_sum: float | None = None  # the ITL histogram's sum: with itl_count, the recent seconds per token
    kv_usage: float | None = None  # 0..1, max over series (a ratio does not add up)
    stale: list[str] = []  # gauge names judged not refreshed (see probes/staleness.py)
    workers: list[dict[str, Any]] = []  # router: {url, active, healthy, circuit, consecutive_failures}
    scrape_s: float = 0.0
    gen_tokens_per_s: float | None = None  # rates: filled from two samples by the Sampler / fleet
    itl_per_s: float | None = None
    series: dict[str, float] = {}  # raw series the numbers came from, combined per name
    labels: dict[str, str] = {}  # identity labels kept (model_name, engine_type, instance, ...)

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)


def failed(error: str, *, hop: str = "", url: str = "", dialect: str = "unknown", scrape_s: float = 0.0) -> Snapshot:
    return Snapshot(hop=hop, url=url, ok=False, error=error, dialect=dialect, scrape_s=scrape_s)
