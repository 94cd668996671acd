"""`repro run --shard K/N` and `repro report RUN_A RUN_B ...`: N processes, each driving its slice
of the conversations against one simulated engine, merged by `repro report`, count and judge
what one process driving everything does: a healthy run (every round completed, no verdict) and
a run against a hanging engine (every round stalled, each judged, the same verdicts). And a bad
--shard is one line and exit 2, before anything starts."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from repro.cli import main
from repro.commands.shard_option import Shard, parse_shard
from repro.core import events as ev
from repro.core.errors import UsageError
from repro.reporting.merged_runs import merged_log
from repro.reporting.rejudge import rejudge_log
from repro.sim import SimConfig, start_sim_process

pytestmark = pytest.mark.timeout(180)

CONVERSATIONS = 5  # not a multiple of 3: the slices differ in size (2, 2, 1)
ROUNDS = 2
COUNTS = ("rounds_total", "rounds_completed", "rounds_stalled", "rounds_failed", "rounds_skipped")


def run_args(url: str, out: Path, *more: str) -> list[str]:
    return [sys.executable, "-m", "repro", "run", "--json", "--hop", f"name=engine-0,url={url},role=engine",
            "--conversations", str(CONVERSATIONS), "--rounds", str(ROUNDS), "--max-tokens", "8",
            "--stall-after", "1", "--canary-timeout", "1", "--probe-interval", "0.25", "--progress-every", "0",
            "--run-timeout", "60", "--out", str(out), *more]


def single_and_sharded(tmp_path: Path, fault: str | None, shards: int) -> tuple[dict, list[dict]]:
    """One process driving every conversation, then `shards` processes at once, each against an
    engine of its own fault state (a fresh engine per arm: a hang holds what it admitted)."""
    config = SimConfig(fault=fault)
    with start_sim_process(config) as engine:
        single = subprocess.run(run_args(engine.url, tmp_path / "single"), capture_output=True, text=True, timeout=90)
    with start_sim_process(config) as engine:
        procs = [subprocess.Popen(run_args(engine.url, tmp_path / "sharded", "--shard", f"{k}/{shards}"),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(shards)]
        outputs = [p.communicate(timeout=90) for p in procs]
    return json.loads(single.stdout), [json.loads(out) for out, _ in outputs]


def report(*folders: Path) -> tuple[int, dict]:
    out = subprocess.run([sys.executable, "-m", "repro", "report", *map(str, folders), "--json"],
                         capture_output=True, text=True, timeout=60)
    return out.returncode, json.loads(out.stdout)


def verdicts(found: list[dict]) -> Counter:
    return Counter((v["side"], v["where"], v["kind"]) for v in found)


@pytest.mark.network
@pytest.mark.parametrize(("fault", "shards"), [(None, 2), ("hang", 3)], ids=["healthy-2-shards", "hang-3-shards"])
def test_merged_shards_count_and_judge_as_one_process(tmp_path, fault, shards):
    single, parts = single_and_sharded(tmp_path, fault, shards)
    folders = [Path(part["run_dir"]) for part in parts]
    assert sorted(f.name for f in folders) == [f"shard-{k}" for k in range(shards)]
    merged = rejudge_log(merged_log(folders))
    # The slices are disjoint and cover every conversation, each round once: the split --workers makes.
    started = Counter((e.conv, e.round) for e in merged.log.of(ev.RoundStarted))
    assert started == Counter((conv, r) for conv in range(CONVERSATIONS) for r in range(1, ROUNDS + 1))
    times = [e.t for e in merged.log.events]
    assert times == sorted(times)  # one clock, in order
    assert {k: merged.summary[k] for k in COUNTS} == {k: single[k] for k in COUNTS}
    assert sum(part["rounds_total"] for part in parts) == single["rounds_total"] == CONVERSATIONS * ROUNDS
    code_merged, by_folder_list = report(*folders)
    code_whole, by_parent = report(folders[0].parent)  # the folder of shard-K folders, as a Job's volume holds
    code_single, one = report(Path(single["run_dir"]))
    assert verdicts(by_folder_list["verdicts"]) == verdicts(by_parent["verdicts"]) == verdicts(one["verdicts"])
    assert code_merged == code_whole == code_single
    assert Path(by_folder_list["report"]) == folders[0].parent / "report.html"
    if fault is None:
        assert single["rounds_completed"] == CONVERSATIONS * ROUNDS and not one["verdicts"] and code_single == 0
    else:
        assert single["rounds_stalled"] == CONVERSATIONS * ROUNDS
        assert verdicts(one["verdicts"]) == Counter({("server", "engine-0", "engine-hung"): CONVERSATIONS * ROUNDS})


@pytest.mark.parametrize(("shard", "environ", "says"), [
    ("3/3", {}, "0 to 2"),
    ("1/0", {}, "at least 1"),
    ("1-3", {}, "is not K/N"),
    ("env/3", {}, "is not set"),
    ("env/3", {"JOB_COMPLETION_INDEX": "x"}, "'x'"),
    ("env/3", {"JOB_COMPLETION_INDEX": "3"}, "0 to 2"),
])
def test_a_bad_shard_is_one_line_naming_it(shard, environ, says):
    with pytest.raises(UsageError) as caught:
        parse_shard(shard, environ)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_shard_index_is_read_from_the_job_completion_index():
    assert parse_shard("env/3", {"JOB_COMPLETION_INDEX": "2"}) == Shard(2, 3)
    assert parse_shard("0/1", {}) == Shard(0, 1)


def test_a_shard_with_no_conversation_left_is_exit_2_before_anything_starts(tmp_path, capsys):
    assert main(["run", "--conversations", "2", "--shard", "2/3", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--shard 2/3" in err
    assert not (tmp_path / "x").exists()  # nothing started, nothing written
