"""`repro run`'s console at 80 columns (and wider): the round table, short and condensed, and the
progress line. Stored expected text in tests/fixtures/console (see tests/support/golden.py to
regenerate it)."""

from __future__ import annotations

import io

import anyio
import pytest
from rich.console import Console

from repro.core import events as ev
from repro.core.hop import Hop
from repro.load.round import RoundOutcome
from repro.reporting.fit import first_words, short_url
from repro.reporting.progress import RunProgress, show_progress, start_lines
from repro.reporting.summary import CONDENSE_ABOVE, summarize, summary_table
from tests.support.golden import assert_fits, assert_golden, assert_words_whole, render_text

HEADER_WORDS = ["round", "done", "stalled", "failed", "TTFT", "p50", "p95", "ITL", "max", "gap", "ms"]
STALL = "stalled before-first-byte"
RESET = ("ReadError: the server closed the connection before the answer had ended (peer closed "
         "connection without sending complete message body)")


def run_summary(rounds: int, conversations: int = 4, *, problems: dict[int, tuple[str, str]] | None = None) -> dict:
    """Rounds as `repro run` records them: TTFTs and gaps that differ by round, some rounds with a problem."""
    problems = problems or {}
    outcomes = []
    for r in range(1, rounds + 1):
        for c in range(conversations):
            status, error = problems.get(r, ("completed", None)) if c == 0 else ("completed", None)
            done = status == "completed"
            outcomes.append(RoundOutcome(c, r, status, error=error, ttft_s=(0.030 + 0.001 * c + 0.0001 * r) if done
                                         else None, mean_itl_s=0.0047 if done else None,
                                         max_gap_s=2.0788 if status == "stalled" else 0.026 + 0.001 * c))
    return summarize(outcomes, conversations=conversations, rounds=rounds)


SHORT = run_summary(6, problems={4: ("stalled", STALL)})
LONG = run_summary(200, problems={57: ("stalled", STALL), 58: ("stalled", STALL), 120: ("failed", RESET)})


@pytest.mark.parametrize("width", [80, 132])
def test_a_short_run_table_fits_and_breaks_no_word(width):
    text = render_text(summary_table(SHORT, width=width), width)
    assert_golden(f"run_table_short_{width}", text)
    assert_fits(text, width)
    assert_words_whole(text, HEADER_WORDS + STALL.split())
    assert text.count("\n    4 ") == 1  # the stalled round is shown once, with its figures
    if width == 80:  # no room for an errors column: the error goes under the table
        assert "round 4: stalled before-first-byte" in text
    else:
        assert "errors" in text.split()


def test_a_long_run_table_shows_the_edges_and_every_problem_round_and_says_what_it_left_out():
    text = render_text(summary_table(LONG, width=80), 80)
    assert_golden("run_table_long_80", text)
    assert_fits(text, 80)
    assert_words_whole(text, HEADER_WORDS)
    shown = [int(line.split()[0]) for line in text.splitlines() if line[:5].strip().isdigit()]
    assert shown == [1, 2, 3, 57, 58, 120, 198, 199, 200]
    assert sum(line.strip() == "…" for line in text.splitlines()) == 3  # a marker row for each run of rounds left out
    assert "191 rounds without a problem left out" in text
    assert "round 120: ReadError: the server closed the" in text
    assert len(text.splitlines()) < 30  # fits a screen with the verdicts beside it


def test_a_run_at_the_condensing_threshold_keeps_every_round():
    text = render_text(summary_table(run_summary(CONDENSE_ABOVE), width=80), 80)
    assert "left out" not in text
    assert sum(1 for line in text.splitlines() if line[:5].strip().isdigit()) == CONDENSE_ABOVE


def test_shortened_values_keep_their_first_words_and_the_hop_address():
    assert first_words(RESET, 40) == "ReadError: the server closed the …"
    assert first_words("short", 40) == "short"
    assert short_url("http://127.0.0.1:30000/v1/metrics") == "127.0.0.1:30000/…/metrics"
    assert short_url("https://gw.internal:8443/") == "https://gw.internal:8443"


def progress_after(events: list[ev.Event], elapsed: float) -> RunProgress:
    progress = RunProgress(total_rounds=800, now=lambda: elapsed)
    for event in events:
        progress.observe(event)
    return progress


def round_done(conv: int, ttft: float) -> ev.RoundDone:
    return ev.RoundDone(t=1.0, conv=conv, round=1, status=200, reply_chars=10, ttft_s=ttft, duration_s=0.2,
                        events=3, max_gap_s=0.01)


def test_the_progress_line_counts_rounds_and_fits_80_columns():
    events: list[ev.Event] = [round_done(c, 0.030 + 0.001 * (c % 10)) for c in range(118)]
    events += [ev.RoundFailed(t=1.0, conv=1, round=2, phase="before-first-byte", error="reset", duration_s=0.1),
               ev.RoundStalled(t=1.0, conv=2, round=2, phase="before-first-byte", stalled_for_s=10.0, started_t=0.0,
                               last_progress_t=0.0)]
    line = progress_after(events, 12.0).line(in_flight=4)
    assert line == "[12 s] 118/800 done, 1 stalled, 1 failed, 4 in flight, 9.9/s, TTFT p50 34 ms"
    assert len(line) <= 80
    assert progress_after([], 0.0).line(0) == "[0 s] 0/800 done, 0 stalled, 0 failed, 0 in flight, 0.0/s, TTFT p50 -"


class Stop(Exception):
    pass


def test_off_a_terminal_the_progress_line_is_printed_once_each_period():
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=False)
    clock = {"t": 0.0}
    progress = RunProgress(total_rounds=24, now=lambda: clock["t"])
    slept: list[float] = []

    async def sleep(seconds: float) -> None:  # steps through the periods; a round ends in each
        if len(slept) == 3:
            raise Stop
        slept.append(seconds)
        clock["t"] += seconds
        progress.observe(round_done(len(slept), 0.040))

    with pytest.raises(Stop):
        anyio.run(lambda: show_progress(progress, console, lambda: 2, period=0.25, sleep=sleep))
    assert slept == [0.25, 0.25, 0.25]
    assert out.getvalue().splitlines() == [
        f"[{t:.0f} s] {n}/24 done, 0 stalled, 0 failed, 2 in flight, {n / t:.1f}/s, TTFT p50 40 ms"
        for n, t in ((1, 0.25), (2, 0.5), (3, 0.75))]


def test_the_start_line_names_the_target_each_hop_with_its_port_and_the_run_folder(tmp_path):
    hops = [Hop("proxy", "http://127.0.0.1:41001/v1", "http://127.0.0.1:41002/metrics", "proxy"),
            Hop("engine-0", "http://127.0.0.1:30000/v1")]
    lines = start_lines(conversations=4, rounds=6, target="the embedded simulated engine", hops=hops,
                        notes={"proxy": "fault proxy: wedge-after=3"}, run_dir=tmp_path / "run")
    assert lines == ["repro run: 4 conversations x 6 rounds against the embedded simulated engine",
                     "  hop proxy     127.0.0.1:41001/v1  fault proxy: wedge-after=3",
                     "  hop engine-0  127.0.0.1:30000/v1",
                     f"  run folder: {tmp_path / 'run'}"]
