"""What a run and a bench share (repro.session.lifecycle): a verdict reaches the summary and the
terminal feed one way only, as the ev.VerdictReached the judge emits and the session observes."""

from __future__ import annotations

import io

import anyio
import pytest
from rich.console import Console

from repro.core import events as ev
from repro.core.hop import Hop
from repro.core.verdict import Verdict
from repro.io.runlog import read_run_log
from repro.load.driver import DriverConfig
from repro.load.prompts import PromptSource
from repro.session.run import Run, RunSettings

CLOSED = "http://127.0.0.1:9/v1"  # nothing listens: a canary there fails at once


def run_at(tmp_path) -> tuple[Run, io.StringIO]:
    out = io.StringIO()
    settings = RunSettings(driver=DriverConfig(base_url=CLOSED, model="m"), prompts=PromptSource(), out=tmp_path)
    return Run(settings, console=Console(file=out, width=200)), out


def verdict(conv: int) -> Verdict:
    return Verdict(side="server", where="engine-0", kind="engine-hung", confidence="high", phase="mid-stream",
                   conversation=conv, round=2, stalled_for_s=3.0, evidence=[], ruled_out=[], summary="hung")


@pytest.mark.network  # its canary connects to a closed port on 127.0.0.1
def test_the_judges_verdict_reaches_the_log_the_summary_and_the_feed_through_its_event(tmp_path):
    run, out = run_at(tmp_path)
    hops = [Hop("engine-0", CLOSED)]
    book = run.evidence_book(hops, stall_after=1.0)
    judge = run.live_judge(book, None, model="m", api_key=None, canary_timeout=0.5, driver_in_flight=lambda: 1)
    stall = ev.RoundStalled(t=run.now(), conv=3, round=2, phase="before-first-byte", stalled_for_s=1.0,
                            started_t=0.0, last_progress_t=0.0)
    anyio.run(judge.stalled, stall)
    run.log.close()
    (reached,) = read_run_log(tmp_path).of(ev.VerdictReached)
    assert run.verdicts == [reached.verdict]
    assert run.closing_summary()["verdicts"] == [reached.verdict.to_dict()]
    assert "stall verdict" in out.getvalue() and "conversation 3 round 2" in out.getvalue()


def test_a_verdict_observed_from_elsewhere_counts_the_same(tmp_path):
    """A sharded run's events reach `observe` without passing `emit`: a verdict among them is
    kept and shown all the same, and the tally counts it."""
    run, out = run_at(tmp_path)
    run.observe(ev.VerdictReached(t=1.0, verdict=verdict(5)))
    run.observe(ev.VerdictReached(t=1.1, verdict=verdict(6)))
    summary = run.closing_summary()
    assert [v["conversation"] for v in summary["verdicts"]] == [5, 6]
    assert summary["verdict_tally"] == [{"side": "server", "where": "engine-0", "kind": "engine-hung", "rounds": 2}]
    assert out.getvalue().count("stall verdict") == 1 and "counted, not shown" in out.getvalue()
    run.log.close()


def test_a_flagged_rounds_next_sse_reaches_the_books_and_no_other_does(tmp_path):
    """SSE events skip the books (the hot path), except a flagged round's first one after its stall:
    the moment it resumed bounds the stall's evidence (EvidenceBook.resumed)."""
    run, _ = run_at(tmp_path)
    book = run.evidence_book([Hop("engine-0", CLOSED)], stall_after=1.0)
    run.emit(ev.SSEReceived(t=1.0, conv=3, round=2, seq=1, chars=1))
    run.emit(ev.RoundStalled(t=4.0, conv=3, round=2, phase="mid-stream", stalled_for_s=3.0, started_t=0.5,
                             last_progress_t=1.0))
    run.emit(ev.SSEReceived(t=4.5, conv=7, round=1, seq=9, chars=1))  # another round's stream
    run.emit(ev.SSEReceived(t=5.0, conv=3, round=2, seq=2, chars=1))
    run.emit(ev.SSEReceived(t=5.2, conv=3, round=2, seq=3, chars=1))
    assert book.resumed == {(3, 2): 5.0} and book.flagged == {}
    run.log.close()
