"""Round outcomes -> the run summary (numbers for --json) and its terminal table."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from rich.table import Table

from repro.core.quantiles import percentile
from repro.load.round import RoundOutcome


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 1)


def summarize(outcomes: Iterable[RoundOutcome], *, conversations: int, rounds: int) -> dict[str, Any]:
    by_status: dict[str, int] = defaultdict(int)
    per_round: dict[int, list[RoundOutcome]] = defaultdict(list)
    for outcome in outcomes:
        by_status[outcome.status] += 1
        per_round[outcome.round].append(outcome)
    total = conversations * rounds
    recorded = sum(by_status.values())
    rows = []
    for index in sorted(per_round):
        group = per_round[index]
        done = [o for o in group if o.status == "completed"]
        ttfts = [o.ttft_s for o in done if o.ttft_s is not None]
        itls = [o.mean_itl_s for o in done if o.mean_itl_s is not None]
        rows.append({
            "round": index,
            "completed": len(done),
            "failed": sum(o.status == "failed" for o in group),
            "stalled": sum(o.status == "stalled" for o in group),
            "ttft_p50_ms": _ms(percentile(ttfts, 0.5)),
            "ttft_p95_ms": _ms(percentile(ttfts, 0.95)),
            "itl_p50_ms": _ms(percentile(itls, 0.5)),
            "max_gap_ms": _ms(max((o.max_gap_s for o in group), default=None)),
            "errors": sorted({o.error for o in group if o.error and o.status != "skipped"})[:3],
        })
    return {
        "rounds_total": total,
        "rounds_completed": by_status["completed"],
        "rounds_stalled": by_status["stalled"],
        "rounds_failed": by_status["failed"],
        "rounds_skipped": by_status["skipped"] + max(0, total - recorded),
        "per_round": rows,
    }


def summary_table(summary: dict[str, Any]) -> Table:
    table = Table(title="rounds", title_justify="left")
    for column in ("round", "done", "failed", "stalled", "TTFT p50 ms", "TTFT p95 ms", "ITL p50 ms", "max gap ms"):
        table.add_column(column, justify="right")
    table.add_column("errors", overflow="fold")

    def cell(value: Any) -> str:
        return "-" if value is None else str(value)

    for row in summary["per_round"]:
        table.add_row(
            str(row["round"]), str(row["completed"]),
            f"[red]{row['failed']}[/]" if row["failed"] else "0",
            f"[yellow]{row['stalled']}[/]" if row["stalled"] else "0",
            cell(row["ttft_p50_ms"]), cell(row["ttft_p95_ms"]), cell(row["itl_p50_ms"]), cell(row["max_gap_ms"]),
            "; ".join(row["errors"]),
        )
    return table


def client_fates(summary: dict[str, Any]) -> list[str]:
    """What the harness's own client would have done with each stalled round (--client-timeouts
    native), from the verdicts' evidence entries (hop "client", signal "native timeout")."""
    return [entry["value"] for verdict in summary.get("verdicts") or () for entry in verdict.get("evidence") or ()
            if entry.get("hop") == "client" and entry.get("signal") == "native timeout"]


def client_fate_line(summary: dict[str, Any]) -> str | None:
    fates = client_fates(summary)
    if not fates:
        return None
    more = f" (and {len(fates) - 1} more stalled rounds: see the verdicts)" if len(fates) > 1 else ""
    return f"with its own timeouts, {fates[0]}{more}"
