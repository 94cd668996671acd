"""`repro bench` and `repro compare` against real simulated engines (processes on 127.0.0.1).

Windows are short (1.5 s measured after 0.3 s of warmup, sub-windows of 0.5 s, two windows per
level and deployment) so each test stays well under 30 s; the engines' decode steps are 10 ms
and 11 ms with 100 tokens a round, a difference of about 9% in output throughput.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repro.cli import main
from repro.core.exits import EXIT_SERVER_SIDE, EXIT_USAGE
from repro.runlog import read_run_log
from repro.sim import SimConfig, start_sim_process
from tests.claims import unbacked_claims

pytestmark = pytest.mark.timeout(60)

SHORT = ["--concurrency", "2,8", "--duration", "1.5", "--warmup", "0.3", "--bin", "0.5", "--grace", "0.3",
         "--max-tokens", "100", "--repeat", "2"]
LEVEL_KEYS = {"concurrency", "a_output_tokens_per_s", "b_output_tokens_per_s", "delta_pct", "ci_low_pct",
              "ci_high_pct", "significant"}


def bench(capsys, *args: str) -> tuple[int, dict]:
    code = main(["bench", "--json", *args])
    out = capsys.readouterr().out
    return code, json.loads(out)


def ab(capsys, tmp_path: Path, itl_b: float) -> tuple[int, dict]:
    with start_sim_process(SimConfig(itl=0.010)) as a, start_sim_process(SimConfig(itl=itl_b)) as b:
        return bench(capsys, "--target", a.url + "/v1", "--target-b", b.url + "/v1", "--out", str(tmp_path / "ab"),
                     *SHORT)


def test_a_known_difference_is_significant_at_every_level(capsys, tmp_path):
    code, data = ab(capsys, tmp_path, itl_b=0.011)
    assert code == 0
    assert [row["concurrency"] for row in data["levels"]] == [2, 8]
    for row in data["levels"]:
        assert set(row) >= LEVEL_KEYS
        assert row["significant"] is True, row
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
    assert orders == [(2, "A"), (2, "B"), (2, "B"), (2, "A"), (8, "B"), (8, "A"), (8, "A"), (8, "B")]
    for window in saved["windows"]:
        assert len(window["bins_tokens_per_s"]) == 3 and window["tokens_counted_by"] == "usage"
        assert window["requests"] > 0 and window["ttft_ms"]["p50"] > 0 and window["itl_ms"]["p50"] >= 9
    html = (folder / "bench.html").read_text()
    assert html.count("<svg") == 4 and "<script" not in html and "significant" in html


def test_two_identical_engines_are_flat_at_every_level(capsys, tmp_path):
    code, data = ab(capsys, tmp_path, itl_b=0.010)
    assert code == 0
    assert len(data["levels"]) == 2
    for row in data["levels"]:
        assert row["significant"] is False, row
        # Flat, or at most a CI that grazes past 0 but not past the +-1% noise band.
        assert row["verdict"].endswith(("flat, within noise", "within noise (+-1% band)")), row
    per_level = {(r["concurrency"], r["deployment"]): r for r in data["per_level"]}
    assert set(per_level) == {(2, "A"), (2, "B"), (8, "A"), (8, "B")}
    for row in per_level.values():
        assert row["windows"] == 2 and row["errors"] == 0 and row["stalls"] == 0
    # More conversations, more throughput: the closed loop really ran 8 at once.
    assert per_level[(8, "A")]["output_tokens_per_s"] > 3 * per_level[(2, "A")]["output_tokens_per_s"]


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
    (row,) = json.loads(capsys.readouterr().out)["levels"]
    assert set(row) >= LEVEL_KEYS and row["concurrency"] == 8
    assert row["significant"] is True and -15 < row["delta_pct"] < -4, row
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
])
def test_bad_input_is_one_line_and_exit_2(capsys, args, fragment):
    assert main(["bench", *args]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1


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
