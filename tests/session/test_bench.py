"""`repro bench` and `repro compare` against real simulated engines (processes on 127.0.0.1).

Windows are short (1 s measured after 0.3 s of warmup, sub-windows of 0.5 s, four windows per
level and deployment, the default) so each test stays well under 30 s; the engines' decode steps are 10 ms
and 11 ms with 100 tokens a round, a difference of about 9% in output throughput. Each window is
one driver (or, with --workers, one sharded driver) with its own conversation numbers; each
deployment's record is read at the start, into the log and bench.json, for `repro diff`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from repro.cli import main
from repro.core import events as ev
from repro.core.exits import EXIT_SERVER_SIDE, EXIT_SIDE_UNKNOWN, EXIT_USAGE
from repro.io.runlog import SEGMENT_GLOB, read_run_log
from repro.load.shards import ShardedDriver
from repro.sim import SimConfig, start_sim_process
from tests.support.claims import unbacked_claims

pytestmark = pytest.mark.timeout(60)

SHORT = ["--concurrency", "2,8", "--duration", "1", "--warmup", "0.3", "--bin", "0.5", "--grace", "0.3",
         "--max-tokens", "100"]
LEVEL_KEYS = {"concurrency", "a_output_tokens_per_s", "b_output_tokens_per_s", "delta_pct", "ci_low_pct",
              "ci_high_pct", "significant", "judged", "a_windows", "b_windows", "windows_resampled", "verdict",
              "driver_limited"}
# The shape of bench.json's rows, whatever drives the windows (one process or several).
PER_LEVEL_KEYS = {"concurrency", "deployment", "windows", "windows_invalid", "tokens_counted_by",
                  "output_tokens_per_s", "requests_per_s", "ttft_ms", "itl_ms", "rounds_without_first_token",
                  "errors", "stalls", "verdicts", "driver_limited"}
WINDOW_KEYS = {"deployment", "concurrency", "repeat", "start_t", "end_t", "duration_s", "output_tokens",
               "output_tokens_per_s", "tokens_counted_by", "bin_s", "bins_tokens_per_s", "requests", "requests_per_s",
               "ttft_ms", "rounds_without_first_token", "itl_ms", "errors", "error_texts", "stalls", "verdicts",
               "loop_lag_p99_ms", "cpu_share", "driver_limited", "order", "invalid"}
# Every setting that shapes the load, recorded so that `repro compare` can refuse unlike runs.
LOAD_SETTING_KEYS = {"levels", "duration_s", "warmup_s", "bin_s", "max_tokens", "rounds_per_conversation",
                     "prompt_chars", "prompts_file", "prompts_sha256", "tools", "client", "connections",
                     "client_timeouts", "workers"}


def bench(capsys, *args: str) -> tuple[int, dict]:
    code = main(["bench", "--json", *args])
    out = capsys.readouterr().out
    return code, json.loads(out)


def conversations_by_window(folder: Path) -> list[set[int]]:
    """The conversations of each window, in order, from the log alone: a window's conversations run
    together and the next window starts once they ended, so conversations whose spans (first start
    to last end) overlap are one window's. A number used in two windows would join them into one."""
    spans: dict[int, list[float]] = {}
    for event in read_run_log(folder).events:
        if isinstance(event, (ev.RoundStarted, ev.RoundDone, ev.RoundFailed, ev.RoundAbandoned)):
            span = spans.setdefault(event.conv, [event.t, event.t])
            span[0], span[1] = min(span[0], event.t), max(span[1], event.t)
    windows: list[set[int]] = []
    reach = float("-inf")
    for conv, (first, last) in sorted(spans.items(), key=lambda item: item[1][0]):
        if first > reach:
            windows.append(set())
        windows[-1].add(conv)
        reach = max(reach, last)
    return windows


def ab(capsys, tmp_path: Path, itl_b: float, *extra: str) -> tuple[int, dict]:
    with start_sim_process(SimConfig(itl=0.010)) as a, start_sim_process(SimConfig(itl=itl_b)) as b:
        return bench(capsys, "--target", a.url + "/v1", "--target-b", b.url + "/v1", "--out", str(tmp_path / "ab"),
                     *SHORT, *extra)


@pytest.mark.network
def test_a_known_difference_is_significant_at_every_level(capsys, tmp_path):
    code, data = ab(capsys, tmp_path, itl_b=0.011)
    assert code == 0
    assert [row["concurrency"] for row in data["levels"]] == [2, 8]
    for row in data["levels"]:
        assert set(row) >= LEVEL_KEYS
        assert row["significant"] is True, row
        assert (row["a_windows"], row["b_windows"], row["windows_resampled"]) == (4, 4, True)
        assert -15 < row["delta_pct"] < -4, row  # B decodes ~10% slower per step
        assert row["ci_low_pct"] < row["delta_pct"] < row["ci_high_pct"] < 0
        assert row["verdict"].endswith(": significant")
    # The folder: a run log others read, bench.json with every window, the HTML plot.
    folder = tmp_path / "ab"
    log = read_run_log(folder)
    assert log.header is not None and log.header.config["bench"] is True
    assert [h.name for h in log.header.hops] == ["A", "B"]
    assert any(type(e).__name__ == "RunFinished" for e in log.events)
    saved = json.loads((folder / "bench.json").read_text())
    assert saved["levels"] == data["levels"]
    orders = [(w["concurrency"], w["deployment"]) for w in sorted(saved["windows"], key=lambda w: w["order"])]
    # The default 4 repeats, A B B A B A A B, and the mirror at the next level.
    assert orders == [(2, s) for s in "ABBABAAB"] + [(8, s) for s in "BAABABBA"]
    for window in saved["windows"]:
        assert set(window) == WINDOW_KEYS and window["invalid"] is None
        assert len(window["bins_tokens_per_s"]) == 2 and window["tokens_counted_by"] == "usage"
        assert window["requests"] > 0 and window["ttft_ms"]["p50"] > 0 and window["itl_ms"]["p50"] >= 9
    assert all(set(row) == PER_LEVEL_KEYS for row in saved["per_level"])
    html = (folder / "bench.html").read_text()
    # bench.html draws with plotly (tests/reporting/test_pages_in_browser.py draws it in chromium): six charts
    assert html.count('<div class="chart">') == 6 and "significant" in html and (folder / "levels.csv").exists()
    # Each window ran its own conversations (a slot's next conversation keeps its number), every slot ran.
    windows = conversations_by_window(folder)
    assert [len(convs) for convs in windows] == [2] * 8 + [8] * 8
    assert len(set().union(*windows)) == 80  # no number in two windows
    assert set(saved["settings"]) >= LOAD_SETTING_KEYS
    assert (saved["settings"]["max_tokens"], saved["settings"]["prompt_chars"], saved["settings"]["client"],
            saved["settings"]["workers"], saved["settings"]["tools"]) == (100, 200, "aiohttp", 1, 0)
    # What each deployment runs, read before any load: once in the log, per deployment in bench.json.
    (recorded,) = log.of(ev.DeploymentRecorded)
    assert recorded.t < min(e.t for e in log.of(ev.RoundStarted))
    assert set(recorded.hops) == {"A", "B"}
    for deployment, itl in zip(saved["deployments"], (0.010, 0.011), strict=True):
        record = deployment["record"][deployment["name"]]
        assert record == recorded.hops[deployment["name"]]
        assert record["read"]["/server_info"] == "ok" and record["settings"]["server_info.repro_sim.itl"] == itl
    assert data["deployments"] == saved["deployments"]


@pytest.mark.network
def test_two_identical_engines_are_flat(capsys, tmp_path):
    code, data = ab(capsys, tmp_path, 0.010, "--concurrency", "8")
    assert code == 0
    assert len(data["levels"]) == 1
    for row in data["levels"]:
        assert row["significant"] is False, row
        # Flat, or at most a CI that grazes past 0 but not past the +-1% noise band.
        assert row["verdict"].endswith(("flat, within noise", "within noise (+-1% band)")), row
    per_level = {(r["concurrency"], r["deployment"]): r for r in data["per_level"]}
    assert set(per_level) == {(8, "A"), (8, "B")}
    for row in per_level.values():
        assert row["windows"] == 4 and row["errors"] == 0 and row["stalls"] == 0


@pytest.mark.network
def test_compare_two_bench_runs_made_apart(capsys, tmp_path):
    # Runs made apart share no interleaving: three windows each see more of the machine's drift.
    folders = []
    for name, itl in (("before", 0.010), ("after", 0.011)):
        with start_sim_process(SimConfig(itl=itl)) as sim:
            code, _ = bench(capsys, "--target", sim.url + "/v1", "--out", str(tmp_path / name),
                            *SHORT, "--concurrency", "8", "--repeat", "3")
            assert code == 0
        folders.append(str(tmp_path / name))
    assert main(["compare", *folders, "--json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    (row,) = compared["levels"]
    assert set(row) >= LEVEL_KEYS and row["concurrency"] == 8
    assert row["significant"] is True and -15 < row["delta_pct"] < -4, row
    # What differed between the two deployments: in compare, and in `repro diff` of the two folders.
    itl = {(d["hop"], d["key"]): (d["a"], d["b"]) for d in compared["deployment_deltas"]}
    assert itl == {("A", "server_info.repro_sim.itl"): (0.010, 0.011)}, itl
    assert main(["diff", *folders, "--json"]) == 0
    diffed = json.loads(capsys.readouterr().out)
    assert [(d["hop"], d["key"], d["change"]) for d in diffed["deltas"]] == [("A", "server_info.repro_sim.itl", "changed")]
    assert diffed["runs"]["A"]["rounds"].endswith("rounds completed")
    # A folder that is no bench run, or runs with no level in common: one line, exit 2.
    (tmp_path / "empty").mkdir()
    assert main(["compare", folders[0], str(tmp_path / "empty")]) == EXIT_USAGE
    assert "is not a bench run" in capsys.readouterr().err
    other = json.loads((tmp_path / "after" / "bench.json").read_text())
    for window in other["windows"]:
        window["concurrency"] += 100
    (tmp_path / "shifted").mkdir()
    (tmp_path / "shifted" / "bench.json").write_text(json.dumps(other))
    assert main(["compare", folders[0], str(tmp_path / "shifted")]) == EXIT_USAGE
    assert "no level in common" in capsys.readouterr().err

    def variant(name: str, change) -> str:
        data = json.loads((tmp_path / "after" / "bench.json").read_text())
        change(data)
        (tmp_path / name).mkdir()
        (tmp_path / name / "bench.json").write_text(json.dumps(data))
        return str(tmp_path / name)

    # The bench's own settings changed, not the deployment: warned, not like for like, never significant.
    other = variant("longer", lambda d: d["settings"].update(max_tokens=64))
    assert main(["compare", folders[0], other, "--json"]) == 0
    captured = capsys.readouterr()
    compared = json.loads(captured.out)
    assert compared["settings_differ"] == {"max_tokens": [100, 64]} and compared["like_for_like"] is False
    (row,) = compared["levels"]
    assert row["significant"] is None and row["verdict"].endswith("settings differ, not like for like"), row
    err = " ".join(captured.err.split())
    assert "warning: the bench settings differ: max_tokens 100 in" in err and "not like for like" in err
    # A run whose driver was the limit: its warning is printed, its rows marked.
    limited = variant("limited", lambda d: [r.update(driver_limited="the driver used 97% of a core")
                                            for r in d["per_level"]])
    assert main(["compare", folders[0], limited, "--json"]) == 0
    captured = capsys.readouterr()
    compared = json.loads(captured.out)
    (row,) = compared["levels"]
    assert row["driver_limited"] == "B" and row["verdict"].endswith("[driver-limited: B]"), row
    assert any("the driver was the limit" in w for w in compared["warnings"])
    assert "the driver was the limit" in " ".join(captured.err.split())
    # Tokens counted from SSE events in one run, from usage in the other: not compared at all.
    events = variant("events", lambda d: [w.update(tokens_counted_by="sse-events") for w in d["windows"]])
    assert main(["compare", folders[0], events, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["levels"]
    assert row["significant"] is None and row["delta_pct"] is None
    assert row["verdict"] == "not compared: counted in different units (A by usage, B by sse-events)"
    # A malformed window: one line naming the file and the fix, no traceback.
    broken = variant("broken", lambda d: d["windows"][1].pop("bins_tokens_per_s"))
    assert main(["compare", folders[0], broken]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "window 2 lacks 'bins_tokens_per_s'" in err and "bench.json" in err and err.count("\n") == 1


@pytest.mark.network
def test_workers_give_the_same_results_and_one_merged_ordered_log(capsys, tmp_path):
    folder = tmp_path / "sharded"
    code, data = bench(capsys, "--workers", "2", "--concurrency", "2,8", "--duration", "1.5", "--warmup", "0.3",
                       "--bin", "0.5", "--grace", "2", "--max-tokens", "100", "--repeat", "1", "--out", str(folder))
    assert code == 0
    assert [(row["concurrency"], row["deployment"]) for row in data["per_level"]] == [(2, "A"), (8, "A")]
    saved = json.loads((folder / "bench.json").read_text())
    assert all(set(row) == PER_LEVEL_KEYS for row in saved["per_level"])
    for window in saved["windows"]:
        assert set(window) == WINDOW_KEYS
        # Tokens counted by SSE arrival in the parent: the workers forwarded their reads.
        assert window["tokens_counted_by"] == "usage" and len(window["bins_tokens_per_s"]) == 3
        assert min(window["bins_tokens_per_s"]) > 0 and window["ttft_ms"]["p50"] > 0 and window["itl_ms"]["p50"] > 0
        assert window["loop_lag_p99_ms"] is not None and window["cpu_share"] is not None  # the workers' own
    by_level = {row["concurrency"]: row for row in data["per_level"]}
    assert by_level[8]["output_tokens_per_s"] > 3 * by_level[2]["output_tokens_per_s"]

    assert not list(folder.glob(SEGMENT_GLOB)), "the workers' segments are merged into the log"
    log = read_run_log(folder)
    assert not log.torn_last_line and not log.skipped
    assert log.header.config["workers"] == 2 and isinstance(log.events[-1], ev.RunFinished)
    times = [e.t for e in log.events]
    assert times == sorted(times)
    assert any(log.of(ev.DeploymentRecorded)) and sum(1 for _ in log.of(ev.SSEReceived)) > 100
    # Every round that started ended once (the stop let the rounds in flight finish within the
    # grace), in both workers' shares, and each window had its own conversations.
    started = [(e.conv, e.round) for e in log.of(ev.RoundStarted)]
    done = [(e.conv, e.round) for e in log.of(ev.RoundDone)]
    assert len(set(started)) == len(started) and sorted(done) == sorted(started)
    assert data["summary"]["rounds_completed"] == len(done)
    assert [sorted(convs) for convs in conversations_by_window(folder)] == [[0, 1], list(range(2, 10))]


class _KillsAWorker(ShardedDriver):
    """The first window's worker 0 is SIGKILLed 0.6 s after the workers are up (0.3 s into the measured part)."""

    killed = False

    async def run(self):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._kill_later)
            outcomes = await super().run()
            tasks.cancel_scope.cancel()
        return outcomes

    async def _kill_later(self) -> None:
        if _KillsAWorker.killed:
            return
        await self.ready.wait()
        await anyio.sleep(0.6)
        _KillsAWorker.killed = True
        os.kill(self.workers[0].process.pid, signal.SIGKILL)


@pytest.mark.network
def test_a_worker_that_dies_makes_its_window_invalid(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("repro.session.bench.ShardedDriver", _KillsAWorker)
    code = main(["bench", "--json", "--workers", "2", "--concurrency", "4", "--duration", "1.5", "--warmup", "0.3",
                 "--bin", "0.5", "--grace", "2", "--max-tokens", "100", "--repeat", "2",
                 "--out", str(tmp_path / "died")])
    captured = capsys.readouterr()
    data, err = json.loads(captured.out), " ".join(captured.err.split())
    assert code == EXIT_SIDE_UNKNOWN  # trouble, not "completed" with 0
    saved = json.loads((tmp_path / "died" / "bench.json").read_text())
    first, second = sorted(saved["windows"], key=lambda w: w["order"])
    assert first["invalid"].startswith("worker 0 died") and second["invalid"] is None
    assert "worker 0 died" in first["error_texts"] and first["errors"] >= 1
    (row,) = data["per_level"]
    assert (row["windows"], row["windows_invalid"]) == (1, 1)
    assert row["output_tokens_per_s"] == second["output_tokens_per_s"]  # the invalid window left out
    assert data["summary"]["windows_invalid"] == 1 and data["summary"]["rounds_failed"] >= 1
    assert any("invalid (worker 0 died" in w for w in data["warnings"])
    assert "window #1 is invalid (worker 0 died" in err and "(1 invalid)" in err
    failed = [e for e in read_run_log(tmp_path / "died").of(ev.RoundFailed) if e.error == "worker 0 died"]
    assert len(failed) == first["errors"]


@pytest.mark.network
def test_a_stall_during_a_bench_is_judged(capsys, tmp_path):
    code, data = bench(capsys, "--sim-fault", "hang,after=6", "--concurrency", "2", "--duration", "2",
                       "--warmup", "0.3", "--bin", "0.5", "--repeat", "1", "--max-tokens", "20",
                       "--stall-after", "1", "--grace", "3", "--out", str(tmp_path / "hang"))
    assert code == EXIT_SERVER_SIDE
    (row,) = data["per_level"]
    assert row["stalls"] >= 1
    assert row["verdicts"], row
    kinds = {(v["side"], v["where"], v["kind"]) for v in data["verdicts"]}
    assert ("server", "A", "engine-hung") in kinds, kinds
    for verdict in data["verdicts"]:
        assert not unbacked_claims(verdict), verdict


@pytest.mark.parametrize(("args", "fragment"), [
    (["--concurrency", "8,x"], "--concurrency"),
    (["--concurrency", "0,8"], "at least 1"),
    (["--target-b", "http://127.0.0.1:9/v1"], "--target-b needs --target"),
    (["--duration", "1", "--bin", "1"], "fewer than 2 sub-windows"),
    (["--target", "http://127.0.0.1:9/v1", "--concurrency", "300", "--model", "m"], "--allow-flood"),
    # The driver-shape flags are `repro run`'s, with its checks.
    (["--workers", "0"], "--workers must be at least 1"),
    (["--client", "httpx", "--connections", "fresh"], "applies to --client aiohttp only"),
    (["--connections", "pool=x"], "--connections 'pool=x'"),
    (["--tools", "999"], "--tools 999"),
    (["--duration", "inf"], "--duration must be a finite number"),
    (["--duration", "nan"], "--duration must be a finite number"),
    (["--warmup", "inf"], "--warmup must be a finite number"),
    (["--bin", "0.001"], "--bin 0.001 is below 0.1 s"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, args, fragment):
    assert main(["bench", *args]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1


def test_the_default_is_four_windows_a_side():
    from repro.cli import build_parser

    assert build_parser().parse_args(["bench"]).repeat == 4


def test_the_planned_time_is_said_before_the_bench_starts():
    # The tour's A/B bench (docs/commands.md#a-tour) with the defaults: 4 levels x 4 windows x 2 sides of 5 + 30 s.
    from repro.cli import build_parser
    from repro.commands.bench import settings_from_args
    from repro.session.bench import plan_lines

    args = build_parser().parse_args(["bench", "--concurrency", "48,64,80,96"])
    settings = settings_from_args(args)
    settings.deployments.append(dataclasses.replace(settings.deployments[0], name="B"))
    lines = plan_lines(settings)
    assert lines[0] == "repro bench: 32 windows (4 levels x 4 repeats x A/B) of 35 s: about 18 min 40 s"
    assert all(len(line) <= 80 for line in lines)


@pytest.mark.network
def test_ctrl_c_ends_the_bench_within_two_seconds_with_what_it_measured(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    proc = subprocess.Popen([sys.executable, "-m", "repro", "bench", "--concurrency", "2,4", "--duration", "1",
                             "--warmup", "0.2", "--bin", "0.5", "--repeat", "20", "--max-tokens", "20",
                             "--out", str(tmp_path / "cut"), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    time.sleep(5)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=15)
    took = time.monotonic() - sent
    assert took < 2.0, took
    assert proc.returncode == 130, err.decode()[-2000:]
    data = json.loads(out)
    assert data["summary"]["interrupted"] is True
    assert data["per_level"] and data["per_level"][0]["concurrency"] == 2  # the windows it finished
    saved = json.loads((tmp_path / "cut" / "bench.json").read_text())
    assert 0 < len(saved["windows"]) < 40
    log = read_run_log(tmp_path / "cut")
    assert not log.torn_last_line and log.events[-1].reason.startswith("interrupted")
