"""bench.html from plain bench data (the real per-level and A/B rows of repro.reporting.bench_results,
from windows built here): its charts' confidence intervals, levels.csv and comparison.csv, the
deployment delta, and a page that fetches nothing. The page drawn in a browser from a real bench:
tests/reporting/test_pages_in_browser.py."""

from __future__ import annotations

import csv
import math

import pytest

from repro.reporting.bench_charts import delta_figure, throughput_ci, throughput_figure, throughput_latency_figure
from repro.reporting.bench_html import deployment_lines, render_bench_html, write_bench_html
from repro.reporting.bench_results import ab_level_rows, per_level
from tests.support.pages import assert_self_contained, own_text


def window(deployment: str, level: int, bins: list[float], repeat: int) -> dict:
    scale = 1.0 if deployment == "A" else 0.9
    return {"deployment": deployment, "concurrency": level, "repeat": repeat, "bins_tokens_per_s": bins,
            "output_tokens_per_s": sum(bins) / len(bins), "requests_per_s": level / 2, "errors": 0, "stalls": 0,
            "tokens_counted_by": "usage",
            "ttft_ms": {"p50": 40.0 * level * scale, "p95": 50.0 * level * scale, "p99": 60.0 * level * scale},
            "itl_ms": {"p50": 10.0 * scale, "p95": 12.0 * scale, "p99": 14.0 * scale}, "invalid": None}


def record(flag: int) -> dict:
    return {"role": "engine", "url": "http://127.0.0.1:1", "read": {"/server_info": "ok"},
            "settings": {"server_info.cuda_graph_max_bs": flag, "server_info.tp_size": 1}}


def bench_data() -> dict:
    windows = []
    for level, base in ((2, 200.0), (4, 400.0), (8, 700.0)):
        for repeat, drift in enumerate((0.98, 1.0, 1.01, 1.02)):
            windows.append(window("A", level, [base * drift, base * drift * 1.01], repeat))
            windows.append(window("B", level, [base * drift * 1.12, base * drift * 1.13], repeat))
    return {"settings": {"levels": [2, 4, 8], "repeat": 4, "duration_s": 1, "warmup_s": 0.3, "bin_s": 0.5,
                         "max_tokens": 100, "noise_band_pct": 1.0},
            "deployments": [{"name": "A", "target": "http://127.0.0.1:1/v1", "model": "m", "record": {"A": record(48)}},
                            {"name": "B", "target": "http://127.0.0.1:2/v1", "model": "m", "record": {"B": record(64)}}],
            "windows": windows, "per_level": per_level(windows),
            "levels": ab_level_rows(windows, "A", "B", seed=0, noise_pct=1.0)}


def test_a_levels_throughput_ci_is_students_t_over_its_windows():
    windows = [window("A", 4, [v, v], i) for i, v in enumerate((100.0, 110.0, 120.0, 130.0))]
    low, high = throughput_ci(windows, 4, "A")
    half = 3.182446 * math.sqrt(sum((v - 115) ** 2 for v in (100, 110, 120, 130)) / 3) / 2  # t(0.975, 3)
    assert (low, high) == pytest.approx((115 - half, 115 + half), abs=0.01)
    assert throughput_ci(windows[:1], 4, "A") is None  # one window: the spread between windows unmeasured
    assert throughput_ci(windows, 4, "B") is None


def test_error_bars_are_the_intervals():
    data = bench_data()
    figure = throughput_figure(data["per_level"], data["windows"])
    (a,) = [t for t in figure.data if t.name == "A"]
    ci = throughput_ci(data["windows"], 2, "A")
    assert a.error_y.array[0] == pytest.approx(ci[1] - a.y[0]) and a.error_y.arrayminus[0] == pytest.approx(a.y[0] - ci[0])
    (delta,) = delta_figure(data["levels"], 1.0).data
    for row, y, up, down in zip(data["levels"], delta.y, delta.error_y.array, delta.error_y.arrayminus, strict=True):
        assert (y + up, y - down) == pytest.approx((row["ci_high_pct"], row["ci_low_pct"]))
        assert row["significant"]  # +12% with 4 windows a side: beyond the noise band


def test_throughput_against_latency_is_one_curve_per_deployment_through_its_levels():
    data = bench_data()
    figure = throughput_latency_figure(data["per_level"], "ttft_ms", "TTFT")
    curves = {t.name: t for t in figure.data}
    assert set(curves) == {"A", "B"}
    a_rows = [r for r in data["per_level"] if r["deployment"] == "A"]
    assert list(curves["A"].x) == [r["ttft_ms"]["p95"] for r in a_rows]
    assert list(curves["A"].y) == [r["output_tokens_per_s"] for r in a_rows]
    assert list(curves["A"].text) == ["c=2", "c=4", "c=8"]
    assert figure.layout.xaxis.title.text == "TTFT p95 (ms)"


def test_levels_csv_and_comparison_csv_hold_the_rows(tmp_path):
    data = bench_data()
    page = write_bench_html(tmp_path, data)
    text = page.read_text()
    assert 'href="levels.csv"' in text and 'href="comparison.csv"' in text
    with open(tmp_path / "levels.csv", newline="") as f:
        levels = list(csv.DictReader(f))
    assert [(int(r["concurrency"]), r["deployment"]) for r in levels] == [(r["concurrency"], r["deployment"])
                                                                         for r in data["per_level"]]
    for row, source in zip(levels, data["per_level"], strict=True):
        assert float(row["output_tokens_per_s"]) == source["output_tokens_per_s"]
        assert float(row["ttft_p95_ms"]) == source["ttft_ms"]["p95"] and float(row["itl_p99_ms"]) == source["itl_ms"]["p99"]
        low, high = throughput_ci(data["windows"], source["concurrency"], source["deployment"])
        assert (float(row["output_tokens_per_s_ci_low"]), float(row["output_tokens_per_s_ci_high"])) == (low, high)
    with open(tmp_path / "comparison.csv", newline="") as f:
        compared = list(csv.DictReader(f))
    assert [(int(r["concurrency"]), float(r["delta_pct"]), r["verdict"]) for r in compared] == [
        (r["concurrency"], r["delta_pct"], r["verdict"]) for r in data["levels"]]


def test_a_bench_without_b_writes_levels_only(tmp_path):
    data = bench_data()
    data["deployments"] = data["deployments"][:1]
    data["levels"] = []
    data["per_level"] = [r for r in data["per_level"] if r["deployment"] == "A"]
    write_bench_html(tmp_path, data)
    assert (tmp_path / "levels.csv").exists() and not (tmp_path / "comparison.csv").exists()
    assert "Deployment delta" not in own_text((tmp_path / "bench.html").read_text())


def test_the_deployment_delta_is_on_the_page_as_in_the_terminal():
    data = bench_data()
    assert deployment_lines(data["deployments"]) == ["B runs differently from A:",
                                                     "  --cuda-graph-max-bs changed 48 -> 64"]
    text = own_text(render_bench_html(data, "t", ["levels.csv"]))
    section = text[text.index("Deployment delta"):text.index("<h2>Charts")]
    assert "<td>--cuda-graph-max-bs</td><td>changed</td><td><code>48</code></td><td><code>64</code></td>" in section
    assert "tp-size" not in section  # the same on both sides: not a delta
    same = [dict(d, record={d["name"]: record(48)}) for d in data["deployments"]]
    assert "A and B reported the same deployment" in own_text(render_bench_html(dict(data, deployments=same), "t"))


def test_the_bench_page_stays_self_contained(tmp_path):
    assert_self_contained(write_bench_html(tmp_path, bench_data()).read_text())
