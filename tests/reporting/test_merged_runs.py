"""Shards recorded on different hosts merged onto one clock (repro/reporting/merged_runs.py): each
shard's times count from its own start, its header says what the wall clock read then; the merge
moves every moment of an event (not only `t`) by the difference, orders them, sums the counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro.core import events as ev
from repro.core.errors import UsageError
from repro.core.evidence_book import EvidenceBook
from repro.core.hop import Hop
from repro.io.runlog import RunLogWriter
from repro.reporting.merged_runs import merged_log, shard_folders

pytestmark = pytest.mark.timeout(30)


def shard(folder: Path, *, wall: float, ids: tuple[int, ...], stalled_conv: int | None = None) -> Path:
    """A shard's run log: its conversations' one round each, the stalled one's RoundStalled and end."""
    log = RunLogWriter(folder)
    log.write(ev.RunStarted(t=0.0, config={"conversations": 4, "conversation_ids": list(ids), "rounds": 1,
                                           "shard": f"{ids[0]}/2", "stall_after": 1.0},
                            versions={}, monotonic_origin=1000.0 + wall, wall_clock_origin=wall))
    stalled = 0
    for conv in ids:
        log.write(ev.RoundStarted(t=1.0, conv=conv, round=1, prompt_chars=10, messages=1))
        if conv == stalled_conv:
            stalled += 1
            log.write(ev.RoundStalled(t=3.0, conv=conv, round=1, phase="mid-stream", stalled_for_s=1.0,
                                      started_t=1.0, last_progress_t=2.0, events=3))
            log.write(ev.RoundAbandoned(t=4.0, conv=conv, round=1, phase="mid-stream", stalled_for_s=2.0,
                                        duration_s=3.0, events=3))
        else:
            log.write(ev.RoundDone(t=2.0, conv=conv, round=1, status=200, reply_chars=5, duration_s=1.0, events=4,
                                   max_gap_s=0.1, ttft_s=0.2))
    log.write(ev.RunFinished(t=5.0, reason="completed", summary={
        "rounds_total": len(ids), "rounds_completed": len(ids) - stalled, "rounds_stalled": stalled,
        "rounds_failed": 0, "rounds_skipped": 0, "interrupted": False}))
    log.close()
    return folder


def test_shards_on_two_clocks_merge_in_wall_clock_order(tmp_path):
    # Shard 1 started 10 s after shard 0 by the wall clock: its t=1.0 is the run's 11.0.
    early = shard(tmp_path / "shard-0", wall=1_700_000_000.0, ids=(0, 2))
    late = shard(tmp_path / "shard-1", wall=1_700_000_010.0, ids=(1, 3), stalled_conv=3)
    log = merged_log([late, early])  # the order given does not matter
    header = log.header
    assert header is not None and header.wall_clock_origin == 1_700_000_000.0
    assert header.config["conversations"] == 4 and header.config["conversation_ids"] is None
    assert sum(isinstance(e, ev.RunStarted) for e in log.events) == 1
    starts = {e.conv: e.t for e in log.of(ev.RoundStarted)}
    assert starts == {0: 1.0, 2: 1.0, 1: 11.0, 3: 11.0}
    [stall] = log.of(ev.RoundStalled)
    assert (stall.t, stall.started_t, stall.last_progress_t) == (13.0, 11.0, 12.0)  # every moment moved
    times = [e.t for e in log.events]
    assert times == sorted(times)
    [finished] = log.of(ev.RunFinished)
    assert finished.t == 14.0 and log.events[-1] is finished
    summary = finished.summary
    assert (summary["rounds_total"], summary["rounds_completed"], summary["rounds_stalled"]) == (4, 3, 1)
    assert [row["stalled"] for row in summary["per_round"]] == [1]
    assert log.path == tmp_path / "events.jsonl"  # the report goes beside the shards
    assert shard_folders(tmp_path) == [early, late]


def test_a_shard_that_did_not_finish_leaves_the_summary_unknown(tmp_path):
    early = shard(tmp_path / "shard-0", wall=100.0, ids=(0,))
    late = shard(tmp_path / "shard-1", wall=100.0, ids=(1,))
    text = (late / "events.jsonl").read_text().splitlines()
    (late / "events.jsonl").write_text("\n".join(line for line in text if '"run_finished"' not in line) + "\n")
    log = merged_log([early, late])
    assert not list(log.of(ev.RunFinished))  # never half a sum: the report says the run did not finish


def test_two_runs_of_the_same_conversations_are_not_shards(tmp_path):
    a = shard(tmp_path / "a", wall=100.0, ids=(0, 1))
    b = shard(tmp_path / "b", wall=200.0, ids=(1, 2))
    with pytest.raises(UsageError, match="conversation 1"):
        merged_log([a, b])


def test_shards_of_two_stacks_are_refused(tmp_path):
    """Each shard with its own embedded engine: two engines under one name, not one stack."""
    a, b = (tmp_path / "shard-0", tmp_path / "shard-1")
    for folder, port, ids in ((a, 30001, (0,)), (b, 30002, (1,))):
        log = RunLogWriter(folder)
        log.write(ev.RunStarted(t=0.0, config={"conversation_ids": list(ids), "rounds": 1}, versions={},
                                monotonic_origin=0.0, wall_clock_origin=100.0,
                                hops=[Hop("engine-0", f"http://127.0.0.1:{port}")]))
        log.close()
    with pytest.raises(UsageError, match="engine-0 at http://127.0.0.1:30001 and engine-0 at http://127.0.0.1:30002"):
        merged_log([a, b])


def test_one_shards_lagging_loop_is_not_evidence_for_anothers_stall(tmp_path):
    """Each shard drove its rounds on its own loop (no --workers: worker None in both): merged,
    shard 0's starved loop must not read as the lag of the loop that drove shard 1's stalled round,
    which would blame the client for a stall elsewhere."""
    quiet = shard(tmp_path / "shard-0", wall=100.0, ids=(0,))
    stalled = shard(tmp_path / "shard-1", wall=100.0, ids=(1,), stalled_conv=1)
    log = RunLogWriter(quiet)  # appended: shard 0's loop lagged 900 ms while shard 1's round was silent
    log.write(ev.LoopLag(t=2.5, max_ms=950.0, p99_ms=900.0, in_flight=1))
    log.close()
    merged = merged_log([quiet, stalled])
    book = EvidenceBook([], stall_after=1.0)
    for event in merged.events:
        book.add(event)
    [stall] = merged.of(ev.RoundStalled)
    assert book.evidence_for(stall, until=3.5).loop_lag_p99_ms is None
    # The lag is still the evidence of shard 0's own rounds: its loop kept its own id.
    [lag] = merged.of(ev.LoopLag)
    starts = {e.conv: e.worker for e in merged.of(ev.RoundStarted)}
    assert lag.worker == starts[0] != starts[1]
