"""`--workers N`: conversations sharded across worker processes (repro/load/shards.py, repro/load/shard_worker.py).

Against the embedded simulated engine (its own process): the merged run log is ordered and
complete; a stall in a worker is judged by the parent; Ctrl-C (to the run, or to its whole
process group as a terminal sends it, or while workers wait for verdicts, or to a sharded bench)
stops every worker within 2 s and keeps the log; a run killed outright leaves no worker behind and its unmerged
segments are still read; a worker killed mid-run costs its own rounds only; a merge cut short
never counts a segment twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

import anyio
import pytest

from repro.core import events as ev
from repro.core.classify import classify
from repro.core.evidence_book import EvidenceBook
from repro.core.hop import Hop
from repro.io.runlog import LOG_NAME, SEGMENT_GLOB, RunLogWriter, merge_segments, read_run_log, segment_name
from repro.load.driver import DriverConfig
from repro.load.prompts import PromptSource
from repro.load.shards import ShardedDriver, pool_shares, shares
from repro.session.run import Run, RunSettings
from tests.support.processes import alive, children, command_of, gone_within
from tests.support.scripted_judge import ScriptedJudge

pytestmark = pytest.mark.timeout(60)

OUTCOMES = (ev.RoundDone, ev.RoundFailed, ev.RoundAbandoned)


def sharded_run(run_dir: Path, *, workers: int = 2, conversations: int, rounds: int, sim_fault: str | None = None,
                stall_after: float = 10.0, connections: str = "per-conversation") -> Run:
    settings = RunSettings(
        driver=DriverConfig(base_url="", model="", conversations=conversations, rounds=rounds, stall_after=stall_after,
                            judge_budget=10.0, connections=connections),
        prompts=PromptSource(prompt_chars=80), out=run_dir, sim_fault=sim_fault, workers=workers,
        probe_interval=0.25, canary_timeout=1.0, run_timeout=30.0,
    )
    return Run(settings)


def test_shares_are_round_robin_and_never_empty():
    config = DriverConfig(base_url="", model="", conversations=5)
    assert shares(config, 2) == [(0, 2, 4), (1, 3)]
    assert shares(config, 8) == [(0,), (1,), (2,), (3,), (4,)]
    assert shares(DriverConfig(base_url="", model="", conversation_ids=(7, 9, 11)), 2) == [(7, 11), (9,)]


@pytest.mark.network
def test_the_merged_log_is_ordered_and_complete(tmp_path):
    run = sharded_run(tmp_path / "run", conversations=5, rounds=3)
    result = run.execute()

    pids = run.driver.pids
    assert len(pids) == 2 and len(set(pids)) == 2 and os.getpid() not in pids  # two processes drove the rounds
    assert not list((tmp_path / "run").glob(SEGMENT_GLOB)), "segments are removed once merged"
    log = read_run_log(tmp_path / "run")
    assert not log.torn_last_line and not log.skipped
    times = [e.t for e in log.events]
    assert times == sorted(times)
    assert isinstance(log.events[0], ev.RunStarted) and log.events[0].config["workers"] == 2
    assert isinstance(log.events[-1], ev.RunFinished)
    every_round = {(conv, r) for conv in range(5) for r in range(1, 4)}
    started = Counter((e.conv, e.round) for e in log.of(ev.RoundStarted))
    ended = Counter((e.conv, e.round) for e in log.events if isinstance(e, OUTCOMES))
    assert started == ended == Counter(every_round)  # each round started and ended once, no more
    assert sum(1 for e in log.of(ev.SSEReceived)) >= 15  # the workers' own records made it into the log
    # Each round names the worker that drove it (its round-robin share), and each loop-lag report its loop.
    owner = {conv: index for index, share in enumerate(shares(DriverConfig(base_url="", model="", conversations=5), 2))
             for conv in share}
    assert {(e.conv, e.worker) for e in log.of(ev.RoundStarted)} == set(owner.items())
    assert {e.worker for e in log.of(ev.LoopLag) if not e.judge} == {0, 1}
    assert [e.worker for e in log.of(ev.LoopLag) if e.judge], "the parent, which judges, reports its own loop too"
    assert result.summary["rounds_completed"] == 15, result.summary
    assert sorted((o.conv, o.round) for o in result.outcomes) == sorted(every_round)


@pytest.mark.network
def test_a_shared_pool_is_shared_out_among_the_workers_not_multiplied(tmp_path):
    assert pool_shares("pool=5", 2) == ["pool=3", "pool=2"] and pool_shares("fresh", 2) == ["fresh", "fresh"]
    result = sharded_run(tmp_path / "run", conversations=4, rounds=2, connections="pool=2").execute()
    assert result.summary["rounds_completed"] == 8, result.summary
    connected = list(read_run_log(tmp_path / "run").of(ev.RoundConnected))
    assert len(connected) == 8 and len({e.local for e in connected}) == 2  # two connections in all, as asked


@pytest.mark.network
def test_a_stall_in_a_worker_is_judged_by_the_parent(tmp_path):
    """Four conversations over two workers; the engine hangs from the fifth request on, so the
    rounds then running stall in their workers (in one or both: it depends on which worker started
    first). The parent, which runs no round itself, judges each with its own probes and canaries."""
    run = sharded_run(tmp_path / "run", conversations=4, rounds=2, sim_fault="hang,after=4", stall_after=1.0)
    result = run.execute()

    log = read_run_log(tmp_path / "run")
    stalled = {(e.conv, e.round) for e in log.of(ev.RoundStalled)}
    assert len(stalled) >= 2, stalled
    verdicts = {(v.verdict.conversation, v.verdict.round): v.verdict for v in log.of(ev.VerdictReached)}
    assert set(verdicts) == stalled
    for verdict in verdicts.values():
        assert (verdict.side, verdict.where, verdict.kind) == ("server", "engine-0", "engine-hung"), verdict
        # The parent's evidence: its canary and its probe samples of the engine.
        assert {"canary", "running/queued"} <= {e["signal"] for e in verdict.evidence if e["hop"] == "engine-0"}
    summary = result.summary
    assert summary["rounds_stalled"] == len(stalled) and summary["rounds_completed"] == 8 - len(stalled), summary
    assert [t["side"] for t in result.summary["verdict_tally"]] == ["server"]


@pytest.mark.network
def test_a_failed_round_in_a_worker_is_judged_once_by_the_parent_before_run_returns(tmp_path):
    """Nothing listens on the port: every round fails to connect. The worker's own judge leaves
    failures alone; the parent judges each RoundFailed it receives, once, and run() waits for it."""
    judge = ScriptedJudge(failed_s=0.3)
    config = DriverConfig(base_url="http://127.0.0.1:9", model="m", conversations=2, rounds=1, connect_timeout=1.0,
                          judge_budget=2.0)
    observed: list[ev.Event] = []
    driver = ShardedDriver(config, PromptSource(prompt_chars=40), observed.append, workers=2, run_dir=tmp_path,
                           origin=time.monotonic(), judge=judge)

    async def run():
        with anyio.fail_after(30):
            return await driver.run()

    outcomes = anyio.run(run)
    failed = sorted((e for e in observed if isinstance(e, ev.RoundFailed)), key=lambda e: e.conv)
    assert [o.status for o in outcomes] == ["failed", "failed"] and [e.conv for e in failed] == [0, 1]
    assert sorted(judge.of("failed"), key=lambda e: e.conv) == failed
    assert sorted(judge.of("failed-returned"), key=lambda e: e.conv) == failed
    assert judge.of("stalled") == []


def test_a_lagging_worker_is_no_evidence_against_another_workers_round():
    """Worker 1's loop lags 2 s; worker 0's does not. A stall in worker 0 (the engine's fault, say)
    must not be blamed on the client: only the loop that drives a round can have starved it."""
    book = EvidenceBook([Hop("engine-0", "http://127.0.0.1:1")], stall_after=1.0)
    book.add(ev.RoundStarted(t=1.0, conv=0, round=1, prompt_chars=10, messages=1, worker=0))
    book.add(ev.RoundStarted(t=1.0, conv=1, round=1, prompt_chars=10, messages=1, worker=1))
    for t in (2.0, 3.0):
        book.add(ev.LoopLag(t=t, max_ms=6.0, p99_ms=5.0, in_flight=1, worker=0))
        book.add(ev.LoopLag(t=t, max_ms=2100.0, p99_ms=2000.0, in_flight=1, worker=1))

    def judged(conv: int):
        stall = ev.RoundStalled(t=3.0, conv=conv, round=1, phase="before-first-byte", stalled_for_s=1.5,
                                started_t=1.0, last_progress_t=1.5)
        evidence = book.evidence_for(stall, until=3.5)
        return evidence.loop_lag_p99_ms, classify(evidence)

    lag, verdict = judged(0)
    assert lag == 5.0 and verdict.kind != "client-overloaded", verdict
    lag, verdict = judged(1)
    assert lag == 2000.0 and (verdict.side, verdict.kind) == ("client", "client-overloaded"), verdict
    # A log from before loops were named: every loop's lag counts, as it did.
    old = EvidenceBook([Hop("engine-0", "http://127.0.0.1:1")], stall_after=1.0)
    old.add(ev.LoopLag(t=2.0, max_ms=2100.0, p99_ms=2000.0, in_flight=1))
    stall = ev.RoundStalled(t=3.0, conv=0, round=1, phase="before-first-byte", stalled_for_s=1.5, started_t=1.0,
                            last_progress_t=1.5)
    assert old.evidence_for(stall, until=3.5).loop_lag_p99_ms == 2000.0


RUN_SCRIPT = textwrap.dedent("""
    import json
    import sys
    from pathlib import Path
    from repro.load.prompts import PromptSource
    from repro.load.driver import DriverConfig
    from repro.session.run import Run, RunSettings

    # What `repro run --workers 2` runs, with long rounds so that some are in flight.
    # With an engine fault (argv[2]): stalls after 1 s, judged with canaries that hang for 30 s.
    fault = sys.argv[2] if len(sys.argv) > 2 else None
    settings = RunSettings(driver=DriverConfig(base_url="", model="", conversations=4, rounds=200, max_tokens=64,
                                               stall_after=1.0 if fault else 10.0),
                           prompts=PromptSource(prompt_chars=80), out=Path(sys.argv[1]), workers=2, run_timeout=60,
                           sim_fault=fault, canary_timeout=30.0)
    result = Run(settings).execute()
    print(json.dumps(result.summary), flush=True)
""")


def start_run(run_dir: Path, *args: str) -> subprocess.Popen:
    # Its own session, so that a signal to "the terminal's" process group reaches this run only.
    return subprocess.Popen([sys.executable, "-c", RUN_SCRIPT, str(run_dir), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for(run_dir: Path, kind: type, count: int, timeout: float = 30.0) -> None:
    """Events of a kind, read as any reader reads the folder mid-run: the log and the workers' segments."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (run_dir / LOG_NAME).exists() and sum(1 for _ in read_run_log(run_dir).of(kind)) >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {count} {kind.__name__} in {run_dir} within {timeout} s")


def worker_pids(pid: int) -> list[int]:
    return [c for c in children(pid) if "repro.load.shard_worker" in command_of(c)]


def kill_leftovers(proc: subprocess.Popen, pids: list[int]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(5)
    for pid in pids:  # never leave an orphan to the next test
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def interrupt(proc: subprocess.Popen, run_dir: Path, kind: type, count: int, *, group: bool) -> tuple[str, str]:
    """Once `count` events of `kind` are logged: SIGINT to the run (or to its whole process group, as
    a terminal's Ctrl-C sends it); every worker must be gone within 2 s. The run's stdout and stderr."""
    spawned: list[int] = []
    try:
        wait_for(run_dir, kind, count)
        workers = worker_pids(proc.pid)
        spawned = children(proc.pid)  # the workers and the engine
        assert len(workers) == 2, [command_of(c) for c in spawned]
        if group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        left = gone_within(workers, 2.0)
        assert not left, f"worker(s) {left} still running 2 s after SIGINT"
        out, err = proc.communicate(timeout=20)
    finally:
        kill_leftovers(proc, spawned)
    assert not [c for c in spawned if alive(c)]
    return out, err


def merged_log_of_an_interrupted_run(run_dir: Path) -> tuple:
    """The one log the segments were merged into: whole, ordered, ended by SIGINT; and its completed rounds."""
    assert not list(run_dir.glob(SEGMENT_GLOB)), "the segments were merged into the log"
    log = read_run_log(run_dir)
    assert not log.torn_last_line and not log.skipped
    assert isinstance(log.events[-1], ev.RunFinished) and log.events[-1].reason == "interrupted by SIGINT"
    times = [e.t for e in log.events]
    assert times == sorted(times)
    done = Counter((e.conv, e.round) for e in log.of(ev.RoundDone))
    assert len(done) >= 8 and max(done.values()) == 1
    return log, done


@pytest.mark.network
@pytest.mark.parametrize("to", ["run", "process group"])
def test_ctrl_c_stops_every_worker_within_two_seconds_and_keeps_the_log(tmp_path, to):
    run_dir = tmp_path / "run"
    proc = start_run(run_dir)
    out, err = interrupt(proc, run_dir, ev.RoundDone, 8, group=to == "process group")
    assert proc.returncode == 0, err[-2000:]
    summary = json.loads(out)
    assert summary["reason"] == "interrupted by SIGINT"
    _, done = merged_log_of_an_interrupted_run(run_dir)
    assert summary["rounds_completed"] == len(done)  # the summary counts what the workers' logs hold
    counted = sum(summary[f"rounds_{status}"] for status in ("completed", "failed", "stalled", "skipped"))
    assert summary["rounds_total"] == counted == 800


@pytest.mark.network
def test_ctrl_c_stops_a_sharded_bench_and_every_worker_within_two_seconds(tmp_path):
    run_dir = tmp_path / "bench"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    proc = subprocess.Popen([sys.executable, "-m", "repro", "bench", "--concurrency", "4,8", "--duration", "2",
                             "--warmup", "0.2", "--bin", "0.5", "--repeat", "20", "--max-tokens", "20",
                             "--workers", "2", "--out", str(run_dir), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    out, err = interrupt(proc, run_dir, ev.RoundDone, 8, group=True)
    assert proc.returncode == 130, err[-2000:]
    assert json.loads(out)["summary"]["interrupted"] is True
    merged_log_of_an_interrupted_run(run_dir)
    assert json.loads((run_dir / "bench.json").read_text())["summary"]["interrupted"] is True


@pytest.mark.network
def test_ctrl_c_while_workers_wait_for_verdicts_keeps_their_stalls(tmp_path):
    """The engine hangs; the workers' stalls wait on the parent's judge, whose canaries hang too (a
    30 s deadline). Ctrl-C must not wait for them, and the summary counts the stalls as stalls."""
    run_dir = tmp_path / "run"
    proc = start_run(run_dir, "hang,after=6")
    out, err = interrupt(proc, run_dir, ev.RoundStalled, 4, group=False)
    assert proc.returncode == 0, err[-2000:]
    summary = json.loads(out)
    log = read_run_log(run_dir)
    stalled = {(e.conv, e.round) for e in log.of(ev.RoundStalled)}
    assert len(stalled) >= 4 and summary["rounds_stalled"] == len(stalled), summary
    assert isinstance(log.events[-1], ev.RunFinished) and not list(run_dir.glob(SEGMENT_GLOB))


@pytest.mark.network
def test_a_killed_run_leaves_no_worker_and_its_segments_are_read(tmp_path):
    run_dir = tmp_path / "run"
    proc = start_run(run_dir)
    spawned: list[int] = []
    try:
        wait_for(run_dir, ev.RoundDone, 8)
        spawned = children(proc.pid)
        assert len(worker_pids(proc.pid)) == 2
        proc.kill()  # no chance to stop anything: each worker sees its stdin end and stops itself
        proc.wait(10)
        left = gone_within(spawned, 5.0)
        assert not left, f"{[command_of(p) for p in left]} outlived the SIGKILLed run"
    finally:
        kill_leftovers(proc, spawned)
    assert sorted(p.name for p in run_dir.glob(SEGMENT_GLOB)) == [segment_name(0), segment_name(1)]
    log = read_run_log(run_dir)  # the log (header, samples) and both segments, ordered by t
    assert isinstance(log.events[0], ev.RunStarted) and not any(log.of(ev.RunFinished))
    times = [e.t for e in log.events]
    assert times == sorted(times)
    assert {e.conv % 2 for e in log.of(ev.RoundDone)} == {0, 1}


def test_a_merge_cut_short_after_replacing_the_log_does_not_count_a_segment_twice(tmp_path):
    log = RunLogWriter(tmp_path)
    log.write(ev.Note(t=0.0, level="info", message="parent"))
    log.write(ev.Note(t=3.0, level="info", message="parent, later"))
    log.close()
    for worker, t in ((0, 1.0), (1, 2.0)):
        segment = RunLogWriter(tmp_path, name=segment_name(worker))
        segment.write(ev.RoundStarted(t=t, conv=worker, round=1, prompt_chars=1, messages=1))
        if worker == 1:  # out of order within its segment: the merge falls back to a sort in memory
            segment.write(ev.LoopLag(t=0.5, max_ms=1.0, p99_ms=1.0, in_flight=1))
        segment.close()
    first_segment = (tmp_path / segment_name(0)).read_bytes()
    kept = (tmp_path / segment_name(1)).read_bytes()
    (tmp_path / segment_name(1)).write_bytes(kept + b'{"type":"round_done","t":2.5,"co')  # a worker killed mid-write
    before = [(type(e).__name__, e.t) for e in read_run_log(tmp_path).events]
    assert [t for _, t in before] == [0.0, 0.5, 1.0, 2.0, 3.0]

    assert merge_segments(tmp_path) == 4  # the torn line is kept too, last, where a reader tolerates it
    assert not list(tmp_path.glob(SEGMENT_GLOB))
    merged = read_run_log(tmp_path)
    assert [(type(e).__name__, e.t) for e in merged.events] == before and merged.torn_last_line

    (tmp_path / segment_name(0)).write_bytes(first_segment)  # as if the merge had not removed it
    assert [(type(e).__name__, e.t) for e in read_run_log(tmp_path).events] == before
    assert merge_segments(tmp_path) == 0


@pytest.mark.network
def test_a_worker_killed_mid_run_costs_its_rounds_only(tmp_path):
    """One worker dies (SIGKILL): the run goes on with the other, says so in a note, counts the dead
    worker's rounds from the events it streamed, and its segment (torn or not) is in the log."""
    run = sharded_run(tmp_path / "run", conversations=4, rounds=8)
    killed: list[int] = []

    def kill_worker_0() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            driver = run.driver
            if driver is not None and len(driver.pids) == 2 and sum(o.conv % 2 == 0 for o in driver.outcomes) >= 2:
                os.kill(driver.pids[0], signal.SIGKILL)
                killed.append(driver.pids[0])
                return
            time.sleep(0.01)

    killer = threading.Thread(target=kill_worker_0, daemon=True)
    killer.start()
    result = run.execute()
    killer.join(5)

    assert killed, "worker 0 never got going"
    log = read_run_log(tmp_path / "run")
    assert not log.skipped
    notes = [e.message for e in log.of(ev.Note) if e.level == "warning"]
    assert any(n.startswith("worker 0 (conversations 0, 2) ended with status -9") for n in notes), notes
    done = Counter((e.conv, e.round) for e in log.of(ev.RoundDone))
    assert max(done.values()) == 1
    assert {(conv, r) for conv in (1, 3) for r in range(1, 9)} <= set(done)  # worker 1 finished its share
    assert any(conv in (0, 2) for conv, _ in done)  # what worker 0 did before it died is kept
    summary = result.summary
    assert summary["rounds_completed"] == len(done) < 32, summary
    assert summary["rounds_completed"] + summary["rounds_skipped"] + summary["rounds_failed"] == 32, summary
