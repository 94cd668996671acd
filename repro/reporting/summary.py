"""Round outcomes -> the run summary (numbers for --json) and its terminal table."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.text import Text

from repro.core.quantiles import percentile
from repro.load.round import RoundOutcome
from repro.reporting.fit import Col, first_words, table_with_notes


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
            "max_gap_ms": _ms(max((o.max_gap_s for o in group if o.max_gap_s is not None), default=None)),
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


# A run longer than this many rounds shows its first and last few rounds and every round with a
# problem, not all of them: 200 rows would push the verdicts off the screen. --json has every round.
CONDENSE_ABOVE = 12
EDGE_ROUNDS = 3
MOST_PROBLEM_ROUNDS = 20
ERROR_WORDS = 40  # characters of an error shown: its first words (the whole text is in the log)

ROUND_COLUMNS = (Col("round", "right"), Col("done", "right"), Col("stalled", "right"), Col("failed", "right"),
                 Col("TTFT p50 ms", "right"), Col("TTFT p95 ms", "right"), Col("ITL p50 ms", "right"),
                 Col("max gap ms", "right"))


def has_problem(row: dict[str, Any]) -> bool:
    return bool(row["failed"] or row["stalled"] or row["errors"])


def shown_rounds(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """The rounds the table shows, and a line saying what was left out (None: nothing was)."""
    if len(rows) <= CONDENSE_ABOVE:
        return rows, None
    edges = {id(r) for r in rows[:EDGE_ROUNDS] + rows[-EDGE_ROUNDS:]}
    problems = [r for r in rows if has_problem(r) and id(r) not in edges]
    kept_problems = {id(r) for r in problems[:MOST_PROBLEM_ROUNDS]}
    shown = [r for r in rows if id(r) in edges or id(r) in kept_problems]
    clean_left = sum(1 for r in rows if id(r) not in edges and not has_problem(r))
    problems_left = len(problems) - len(kept_problems)
    parts = [f"{clean_left} rounds without a problem"] if clean_left else []
    parts += [f"{problems_left} more rounds with one"] if problems_left else []
    return shown, (f"{' and '.join(parts)} left out (every round: --json, or the report)" if parts else None)


def summary_table(summary: dict[str, Any], *, width: int = 80) -> Group:
    """The round table, fitted to `width` columns; condensed for long runs (shown_rounds)."""

    def cell(value: Any) -> str:
        return "-" if value is None else str(value)

    rows, left_out = shown_rounds(summary["per_round"])
    cells, notes, labels = [], [], []
    previous = None
    for row in rows:
        if previous is not None and row["round"] != previous + 1:
            cells.append(["…"] + [""] * (len(ROUND_COLUMNS) - 1))  # where rounds were left out
            notes.append("")
            labels.append("")
        previous = row["round"]
        cells.append([
            str(row["round"]), str(row["completed"]),
            f"[yellow]{row['stalled']}[/]" if row["stalled"] else "0",
            f"[red]{row['failed']}[/]" if row["failed"] else "0",
            cell(row["ttft_p50_ms"]), cell(row["ttft_p95_ms"]), cell(row["itl_p50_ms"]), cell(row["max_gap_ms"]),
        ])
        notes.append(escape("; ".join(first_words(e, ERROR_WORDS) for e in row["errors"])))
        labels.append(f"round {row['round']}")
    table = table_with_notes(ROUND_COLUMNS, cells, notes, labels, note_header="errors", width=width, title="rounds")
    return Group(table, Text(left_out, style="dim")) if left_out else table


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


def driven_lines(summary: dict[str, Any]) -> list[str]:
    """How the rounds were driven, when --tools or --workers shaped them: 'tools: 4 offered every
    round, 23 replies called them (41 calls)', 'workers: 2 processes'."""
    lines = []
    if summary.get("tools"):
        replies, calls = summary.get("rounds_with_tool_calls", 0), summary.get("tool_calls", 0)
        lines.append(f"tools: {summary['tools']} offered every round, {replies} repl{'y' if replies == 1 else 'ies'} "
                     f"called them ({calls} call{'' if calls == 1 else 's'})")
    if (summary.get("workers") or 1) > 1:
        lines.append(f"workers: {summary['workers']} processes, the conversations sharded across them")
    return lines
