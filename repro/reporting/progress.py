"""`repro run` while it runs: where it starts, and a progress line.

On a terminal the line is a rich Live display refreshed twice a second: rich prints whatever else
the console prints meanwhile (a verdict panel) above it, so the two never interleave. Anywhere
else (a CI log, a pipe) it is a plain line every `period` seconds, which a log keeps readable.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import anyio
from rich.console import Console
from rich.live import Live
from rich.text import Text

from repro.core import events as ev
from repro.core.hop import Hop
from repro.core.quantiles import percentile
from repro.reporting.fit import short_url

LIVE_REFRESH_S = 0.5
DEFAULT_PERIOD_S = 10.0  # between plain lines when stderr is not a terminal
RECENT_TTFTS = 1000  # the TTFT p50 is of the last rounds: what the engine does now, in bounded memory


class RunProgress:
    """Counts the rounds as their events land; says where the run stands in one line."""

    def __init__(self, *, total_rounds: int, now: Callable[[], float]) -> None:
        self.total = total_rounds
        self.now = now
        self.done = self.failed = self.stalled = 0
        self.ttfts: deque[float] = deque(maxlen=RECENT_TTFTS)

    def observe(self, event: ev.Event) -> None:
        if isinstance(event, ev.RoundDone):
            self.done += 1
            if event.ttft_s is not None:
                self.ttfts.append(event.ttft_s)
        elif isinstance(event, ev.RoundFailed):
            self.failed += 1
        elif isinstance(event, ev.RoundStalled):
            self.stalled += 1

    def line(self, in_flight: int) -> str:
        """'[12 s] 120/800 done, 4 stalled, 0 failed, 4 in flight, 41.3/s, TTFT p50 35 ms': rounds
        completed of all, stalls flagged (a stalled round may still end), failures, rounds now
        running, rounds ended a second since the start, median TTFT of the recent rounds."""
        elapsed = self.now()
        ended = self.done + self.failed
        rate = ended / elapsed if elapsed > 0 else 0.0
        p50 = percentile(list(self.ttfts), 0.5)
        ttft = "TTFT p50 -" if p50 is None else f"TTFT p50 {p50 * 1000:.0f} ms"
        return (f"[{elapsed:.0f} s] {self.done}/{self.total} done, {self.stalled} stalled, {self.failed} failed, "
                f"{in_flight} in flight, {rate:.1f}/s, {ttft}")


async def show_progress(progress: RunProgress, console: Console, in_flight: Callable[[], int], *,
                        period: float, sleep: Callable[[float], Awaitable[None]] = anyio.sleep) -> None:
    """Until cancelled: the live line on a terminal, else a plain line every `period` seconds
    (the first after one period: a run shorter than that prints none). period 0: nothing.
    `sleep` is anyio's; a test gives its own to step through the periods without waiting."""
    if period <= 0:
        await anyio.sleep_forever()
    if console.is_terminal:
        with Live(Text(progress.line(in_flight())), console=console, auto_refresh=False, transient=True) as live:
            while True:
                await sleep(LIVE_REFRESH_S)
                live.update(Text(progress.line(in_flight())), refresh=True)
    while True:
        await sleep(period)
        console.print(progress.line(in_flight()), markup=False, highlight=False)


def start_lines(*, conversations: int, rounds: int, target: str, hops: Sequence[Hop], notes: dict[str, str],
                run_dir: Path, tools: int = 0, workers: int = 1, shard: str | None = None) -> list[str]:
    """What a run drives and where it writes: the target, how (tools offered, worker processes,
    when asked for), each hop (client side first, with what this run knows of it: the fault
    proxy's fault, the embedded engine), the run folder."""
    lines = [f"repro run: {conversations} conversation{'s' if conversations != 1 else ''} x {rounds} "
             f"round{'s' if rounds != 1 else ''} against {target}"]
    if tools:
        lines.append(f"  tools: {tools} offered every round; tool calls get results, as in an agent loop")
    if workers > 1:
        lines.append(f"  workers: {workers} processes, the conversations sharded across them")
    if shard is not None:
        lines.append(f"  shard {shard}: its slice of the conversations; `repro report` merges all")
    name_width = max(len(hop.name) for hop in hops) if hops else 0
    for hop in hops:
        note = notes.get(hop.name)
        lines.append(f"  hop {hop.name:<{name_width}}  {short_url(hop.url)}" + (f"  {note}" if note else ""))
    lines.append(f"  run folder: {run_dir}")
    return lines
