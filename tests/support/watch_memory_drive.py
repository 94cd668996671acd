"""Drive what a `repro watch` keeps through many cycles on a compressed clock, in a process of its
own, and print its peak RSS: the child of tests/session/test_watch_memory_ceiling.py and of
benchmarks/watch_memory.py.

    python -m tests.support.watch_memory_drive --hops 64 --fill 4200 --churn 100000

What it keeps is what a watch of `--hops` discovered engines keeps (one stack, book and sampler
history per hop), fed what a watch feeds them, with one second of the watch per cycle:

- fill: `--fill` cycles with every hop canaried each cycle, and sampled in the last 2100 (a
  realistic SGLang snapshot, distinct objects: the costliest entry, made only as many as kept), the canary conversation's rounds, the loop lag: every per-hop buffer is
  filled to its cap (samples 2000, history 3600 points, loop lag 4096).
- churn: `--churn` cycles of discovery renaming a hop every cycle, a verdict at the new name
  (incidents, verdict series, the terminal feed's causes), left open for 1000 cycles, then
  cleared by a conversation that completes, the /metrics exposition and the status page made every 1000 cycles.

Prints one JSON line: peak RSS (VmHWM), RSS before anything was kept (the fixed part: the
interpreter and the watch's imports), after the fill and after the churn, in KiB, and the counts
each structure stopped at.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time


def rss_kib(field: str) -> int:
    """VmRSS or VmHWM of this process, in KiB (Linux /proc)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hops", type=int, default=64)
    parser.add_argument("--fill", type=int, default=4200)
    parser.add_argument("--churn", type=int, default=100_000)
    args = parser.parse_args(argv)

    # Everything a watch imports, before the fixed part is read: the watch's own module pulls them.
    from prometheus_client.exposition import generate_latest
    from rich.console import Console

    import repro.session.watch  # noqa: F401  (the watch's imports: part of the fixed cost)
    from repro.core import events as ev
    from repro.core.canary_outcome import CanaryOutcome
    from repro.core.evidence_book import MAX_SAMPLES_PER_HOP, EvidenceBook
    from repro.core.hop import Hop
    from repro.core.snapshot import Snapshot
    from repro.core.verdict import Verdict
    from repro.core.watch_status import WatchStatus
    from repro.reporting.terminal import VerdictFeed
    from repro.reporting.watch_metrics import watch_registry
    from repro.reporting.watch_page import render_watch_page
    from repro.session.watch_progress import WatchProgress

    fixed = rss_kib("VmRSS")
    hops = [Hop(f"engine-{i}", f"http://127.0.0.1:{20000 + i}", role="engine") for i in range(args.hops)]
    status = WatchStatus(started_at=0.0)
    progress = WatchProgress(status, rounds=1)
    books = {h.name: EvidenceBook([h], stall_after=10.0) for h in hops}
    # The feed's causes are what it keeps; its panels are printed and gone (and take 4 ms each to
    # render: not this driver's subject), so its console prints nothing.
    quiet = Console(file=io.StringIO(), width=80)
    quiet.print = lambda *_args, **_kwargs: None  # type: ignore[method-assign]
    feed = VerdictFeed(quiet)
    registry = watch_registry(status, clock=lambda: 0.0)
    status.watch_hops([(h.name, h.url, h.role) for h in hops])
    conv = 0

    def snapshot(hop: Hop, t: float) -> Snapshot:
        # Distinct objects each time, as a scrape makes them, with the series an SGLang page gives.
        return Snapshot(hop=hop.name, url=hop.url + "/metrics", ok=True, dialect="sglang", running=float(t % 7),
                        queued=0.0, in_flight=float(t % 5), gen_tokens_total=t * 40.0, prompt_tokens_total=t * 90.0,
                        itl_count=t * 39.0, itl_sum=t * 0.4, kv_usage=0.12, scrape_s=0.003,
                        gen_tokens_per_s=40.0 + t % 3, itl_per_s=39.0,
                        series={f"sglang:{name}": t + i for i, name in enumerate(
                            ("num_running_reqs", "num_queue_reqs", "generation_tokens_total", "prompt_tokens_total",
                             "token_usage", "inter_token_latency_seconds_count", "inter_token_latency_seconds_sum",
                             "num_used_tokens"))},
                        labels={"model_name": "sim-model", "engine_type": "unified"})

    def feed_all(event: ev.Event, t: float) -> None:
        book = books.get(getattr(event, "hop", ""))
        for each in [book] if book is not None else books.values():
            each.add(event)
        progress.observe(event, wall=t, segment="events-0.jsonl")

    def one_round(t: float, where: str) -> None:
        nonlocal conv
        conv += 1
        progress.begin((conv,), frozenset({where}))
        feed_all(ev.RoundStarted(t=t, conv=conv, round=1, prompt_chars=60, messages=1), t)
        feed_all(ev.RoundDone(t=t + 0.2, conv=conv, round=1, status=200, reply_chars=40, completion_tokens=16,
                                 duration_s=0.2, events=17, max_gap_s=0.02), t + 0.2)
        progress.end((conv,))
        for book in books.values():
            book.forget({conv})

    sampled_from = args.fill - MAX_SAMPLES_PER_HOP - 100  # the samples' cap reached in the fill's last cycles
    for cycle in range(args.fill):
        t = float(cycle)
        for hop in hops:
            if cycle >= sampled_from:
                feed_all(ev.ProbeSample(t=t, hop=hop.name, snapshot=snapshot(hop, t)), t)
            feed_all(ev.CanaryResult(t=t + 0.1, hop=hop.name, outcome=CanaryOutcome(
                hop=hop.name, url=hop.url, ok=True, total_s=0.004 + (cycle % 10) / 1000)), t + 0.1)
        feed_all(ev.LoopLag(t=t, max_ms=1.0, p99_ms=0.5, in_flight=1), t)
        one_round(t, hops[cycle % len(hops)].name)
    filled = rss_kib("VmRSS")

    started = time.monotonic()
    staying = [(h.name, h.url, h.role) for h in hops[:-1]]
    for cycle in range(args.churn):
        t = float(args.fill + cycle)
        renamed = Hop(f"renamed-{cycle}", f"http://127.0.0.1:{30000 + cycle % 30000}", role="engine")
        status.watch_hops([*staying, (renamed.name, renamed.url, renamed.role)])
        status.hops_changed(added=1, removed=1)
        feed_all(ev.CanaryResult(t=t, hop=renamed.name, outcome=CanaryOutcome(
            hop=renamed.name, url=renamed.url, ok=False, failure="timeout", error="no answer")), t)
        verdict = Verdict(side="server", where=renamed.name, kind="engine-hung", confidence="high",
                          phase="before-first-byte", conversation=cycle, round=1, stalled_for_s=10.0,
                          evidence=[], ruled_out=[], summary=f"engine {renamed.name} holds the round")
        status.verdict(verdict.to_dict(), at=t, segment="events-0.jsonl")
        feed(verdict)
        if cycle % 1000 == 999:  # open incidents pile up (nothing completes) and clear now and then
            one_round(t + 0.5, hops[0].name)
        if cycle % 1000 == 0:
            generate_latest(registry)
            render_watch_page(status.to_dict())
    lines = len(generate_latest(registry).splitlines())
    print(json.dumps({
        "hops": args.hops, "fill_cycles": args.fill, "churn_cycles": args.churn,
        "fixed_kib": fixed, "filled_kib": filled, "churned_kib": rss_kib("VmRSS"), "peak_kib": rss_kib("VmHWM"),
        "churn_s": round(time.monotonic() - started, 2),
        "kept": {"samples_per_hop": max(len(b.samples[n]) for n, b in books.items()),
                 "history_per_hop": max(len(h.history) for h in status.hops.values()),
                 "loop_lag_per_book": max(len(b.loop_lag) for b in books.values()),
                 "incidents": len(status.incidents), "open_incidents": len(status.open_incidents()),
                 "verdict_series": len(status.verdict_counts), "feed_causes": len(feed.counts),
                 "canary_lists": max(len(b.canaries) for b in books.values()),
                 "conversations": max(len(b.sent) for b in books.values()), "metrics_lines": lines},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
