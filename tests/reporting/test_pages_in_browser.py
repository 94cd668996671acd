"""report.html of a real short run with a stall and bench.html of a real small bench (two simulated
engines, processes on 127.0.0.1), drawn by headless chromium with the network cut, at 1400 and 800
px wide: every chart drawn (plotly.js inline, no CDN), no script error, no sideways scroll, and the
CSV beside each page holds the run's rounds or the bench's levels.

The screenshots stay in the test's tmp_path (`--basetemp DIR` keeps them) for a person to look at."""

from __future__ import annotations

import csv
import json

import pytest

from repro.cli import main
from repro.reporting.bench_results import read_bench
from repro.reporting.rejudge import rejudge
from repro.reporting.run_report import write_report
from repro.sim import SimConfig, start_sim_process
from tests.support.browser import CHROMIUM, measure, screenshot
from tests.support.pages import assert_self_contained
from tests.support.runs import repro_run

pytestmark = [pytest.mark.network, pytest.mark.skipif(not CHROMIUM, reason="Debian chromium not installed")]
WIDTHS = (1400, 800)
STALL_RED = (0xB7, 0x1C, 0x1C)  # the no-progress stripe


def drawn_at_both_widths(page, tmp_path, charts: int, height: int) -> dict:
    """Each width: every chart drew, no script error, the page no wider than the window; the screenshots."""
    shots = {}
    for width in WIDTHS:
        found = measure(page, tmp_path, width)
        assert found["errors"] == [], found["errors"]
        assert found["plots"] == charts, f"{found['plots']} of {charts} charts drawn at {width} px"
        assert found["scrollWidth"] <= found["innerWidth"] == width, f"the page scrolls sideways at {width} px"
        shots[width] = screenshot(page, tmp_path, height=height, width=width, name=f"{page.stem}-{width}.png")
    return shots


@pytest.mark.timeout(150)
def test_the_report_of_a_real_run_with_a_stall(tmp_path):
    code, summary, err = repro_run("--rounds", "4", "--conversations", "2", "--stall-after", "1.5",
                                   "--sim-fault", "hang,after=5", "--out", str(tmp_path / "run"))
    assert code == 11 and summary["rounds_stalled"] >= 1, err[-2000:]
    page, data = write_report(tmp_path / "run")
    assert_self_contained(page.read_text())
    shots = drawn_at_both_widths(page, tmp_path, charts=1, height=1800)
    for width, image in shots.items():
        colors = image.getcolors(maxcolors=1 << 20)
        assert sum(n for n, rgb in colors if rgb == STALL_RED) > 200, f"no stall drawn at {width} px"
    with open(tmp_path / "run" / "rounds.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["conv"]), int(r["round"]), r["status"]) for r in rows] == [
        (r.conv, r.round, r.status) for r in rejudge(tmp_path / "run").rounds]
    assert sum(r["status"] == "completed" for r in rows) == summary["rounds_completed"]
    assert sum(r["status"] == "stalled" for r in rows) == summary["rounds_stalled"]
    for row in rows:
        if row["status"] == "completed":
            assert 0 < float(row["ttft_s"]) <= float(row["duration_s"])


@pytest.mark.timeout(150)
def test_the_page_of_a_real_ab_bench(tmp_path, capsys):
    out = tmp_path / "bench"
    with start_sim_process(SimConfig(itl=0.010)) as a, start_sim_process(SimConfig(itl=0.009)) as b:
        main(["bench", "--json", "--target", a.url + "/v1", "--target-b", b.url + "/v1", "--out", str(out),
              "--concurrency", "2,4", "--duration", "1", "--warmup", "0.3", "--bin", "0.5", "--grace", "0.3",
              "--max-tokens", "100"])
    printed = json.loads(capsys.readouterr().out)
    data = read_bench(out)
    page = out / "bench.html"
    text = page.read_text()
    assert_self_contained(text)
    # the deployment delta the terminal prints, on the page: the engines' decode step differs
    assert "<td>server_info.repro_sim.itl</td><td>changed</td><td><code>0.01</code></td><td><code>0.009</code></td>" in text
    drawn_at_both_widths(page, tmp_path, charts=6, height=2600)
    with open(out / "levels.csv", newline="") as f:
        levels = list(csv.DictReader(f))
    assert [(int(r["concurrency"]), r["deployment"], float(r["output_tokens_per_s"]), float(r["ttft_p95_ms"]))
            for r in levels] == [(r["concurrency"], r["deployment"], r["output_tokens_per_s"], r["ttft_ms"]["p95"])
                                 for r in printed["per_level"]]
    for row in levels:  # 4 windows a level: each has its interval, around its mean
        assert float(row["output_tokens_per_s_ci_low"]) < float(row["output_tokens_per_s"]) < float(
            row["output_tokens_per_s_ci_high"])
    with open(out / "comparison.csv", newline="") as f:
        compared = list(csv.DictReader(f))
    assert [(int(r["concurrency"]), r["verdict"]) for r in compared] == [(r["concurrency"], r["verdict"])
                                                                        for r in data["levels"]]
