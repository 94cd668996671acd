"""A verdict on one terminal screen: what on-call reads first at 3 a.m."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from repro.core.verdict import Verdict

SIDE_STYLE = {"server": "bold red", "client": "bold yellow", "unknown": "bold white"}


def verdict_panel(verdict: Verdict) -> Panel:
    head = Text()
    head.append(f"{verdict.side.upper()}-SIDE", style=SIDE_STYLE.get(verdict.side, "bold"))
    head.append(f" at {verdict.where or '?'}: ", style="bold")
    head.append(verdict.kind, style="bold cyan")
    where_in_run = f"conversation {verdict.conversation} round {verdict.round}, " if verdict.round else ""
    # Unknown is printed as such (triage watched no round): never a window passed off as a stall.
    phase = verdict.phase or "phase unknown"
    stalled = "stalled for an unknown time" if verdict.stalled_for_s is None else f"stalled {verdict.stalled_for_s:g} s"
    head.append(f"  ({verdict.confidence} confidence, {phase}, {where_in_run}{stalled})")
    lines = [head, Text(verdict.summary)]
    if verdict.evidence:
        lines.append(Text("evidence:", style="bold"))
        lines.extend(Text(f"  {e.get('hop')}: {e.get('signal')} = {e.get('value')}") for e in verdict.evidence)
    if verdict.ruled_out:
        lines.append(Text("ruled out:", style="bold"))
        lines.extend(Text(f"  {line}") for line in verdict.ruled_out)
    return Panel(Group(*lines), title="stall verdict", title_align="left",
                 border_style=SIDE_STYLE.get(verdict.side, "white"))


def verdict_label(side: str, where: str | None, kind: str) -> str:
    return f"{side.upper()}-SIDE at {where or '?'}: {kind}"


class VerdictFeed:
    """Verdicts on the terminal as they land, without burying it.

    A hung engine stalls every round in flight at once, all with the same cause: a thousand
    identical panels would scroll the first one, and anything different, out of sight. So the
    first verdict of each (side, hop, kind) is shown in full, a new cause shows in full when it
    first appears, and repeats are counted: one line when the first repeat lands, the tally at
    the end. Every verdict is still in the run log and the --json summary.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self.counts: dict[tuple[str, str | None, str], int] = {}

    def __call__(self, verdict: Verdict) -> None:
        key = (verdict.side, verdict.where, verdict.kind)
        seen = self.counts.get(key, 0)
        self.counts[key] = seen + 1
        if seen == 0:
            self.console.print(verdict_panel(verdict))
        elif seen == 1:
            self.console.print(f"[dim]more stalled rounds judged {verdict_label(*key)}: counted, not shown "
                               "(tally at the end of the run)[/]")


def verdict_tally(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each (side, hop, kind) with how many rounds got it, most first: the run's verdicts at a
    glance. Rounds, not verdicts: a stall that resumed and stalled again is judged twice."""
    rounds: dict[tuple[str, str | None, str], set[tuple[Any, Any]]] = {}
    for v in verdicts:
        key = (v.get("side", "unknown"), v.get("where"), v.get("kind", "?"))
        rounds.setdefault(key, set()).add((v.get("conversation"), v.get("round")))
    ranked = sorted(rounds.items(), key=lambda item: -len(item[1]))  # stable: ties keep first-seen order
    return [{"side": side, "where": where, "kind": kind, "rounds": len(judged)}
            for (side, where, kind), judged in ranked]


def tally_line(entry: dict[str, Any]) -> str:
    """'12 rounds judged SERVER-SIDE at engine-0: engine-hung' for one verdict_tally entry."""
    n = entry["rounds"]
    return f"{n} round{'' if n == 1 else 's'} judged {verdict_label(entry['side'], entry['where'], entry['kind'])}"


def group_by_cause(verdicts: list[Verdict]) -> list[list[Verdict]]:
    """Verdicts grouped by (side, hop, kind), groups in the order their first verdict came."""
    groups: dict[tuple[str, str | None, str], list[Verdict]] = {}
    for verdict in verdicts:
        groups.setdefault((verdict.side, verdict.where, verdict.kind), []).append(verdict)
    return list(groups.values())


def rounds_named(verdicts: list[Verdict], limit: int = 12) -> str:
    """'conversation 3 round 2, conversation 4 round 2, ... (40 more)': which rounds, bounded."""
    named = ", ".join(f"conversation {v.conversation} round {v.round}" for v in verdicts[:limit])
    return named + (f", ... ({len(verdicts) - limit} more)" if len(verdicts) > limit else "")
