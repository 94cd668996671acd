"""A verdict on one terminal screen: what on-call reads first at 3 a.m."""

from __future__ import annotations

from rich.console import Group
from rich.panel import Panel
from rich.text import Text

from repro.verdict import Verdict

SIDE_STYLE = {"server": "bold red", "client": "bold yellow", "unknown": "bold white"}


def verdict_panel(verdict: Verdict) -> Panel:
    head = Text()
    head.append(f"{verdict.side.upper()}-SIDE", style=SIDE_STYLE.get(verdict.side, "bold"))
    head.append(f" at {verdict.where or '?'}: ", style="bold")
    head.append(verdict.kind, style="bold cyan")
    where_in_run = f"conversation {verdict.conversation} round {verdict.round}, " if verdict.round else ""
    head.append(f"  ({verdict.confidence} confidence, {verdict.phase}, {where_in_run}stalled {verdict.stalled_for_s:g} s)")
    lines = [head, Text(verdict.summary)]
    if verdict.evidence:
        lines.append(Text("evidence:", style="bold"))
        lines.extend(Text(f"  {e.get('hop')}: {e.get('signal')} = {e.get('value')}") for e in verdict.evidence)
    if verdict.ruled_out:
        lines.append(Text("ruled out:", style="bold"))
        lines.extend(Text(f"  {line}") for line in verdict.ruled_out)
    return Panel(Group(*lines), title="stall verdict", title_align="left",
                 border_style=SIDE_STYLE.get(verdict.side, "white"))
