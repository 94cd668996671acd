"""A bench's results for people: the terminal tables, the deployment delta of an A/B bench, and
bench.html (the comparison and the deployment delta as text, then the charts of
repro.reporting.bench_charts drawn by plotly, inline, so the page needs no network), with the
per-level figures as levels.csv and the comparison rows as comparison.csv beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from repro.reporting.bench_charts import (
    delta_figure,
    latency_figure,
    throughput_ci,
    throughput_figure,
    throughput_latency_figure,
)
from repro.reporting.csv_export import write_csv
from repro.reporting.deployment_diff import delta_line, deltas, short_change
from repro.reporting.html import CSS, html_number, html_text
from repro.reporting.plots import figure_div, plotly_script

LEVELS_CSV = "levels.csv"
COMPARISON_CSV = "comparison.csv"
LEVEL_COLUMNS = ("concurrency", "deployment", "windows", "windows_invalid", "output_tokens_per_s",
                 "output_tokens_per_s_ci_low", "output_tokens_per_s_ci_high", "requests_per_s",
                 "ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p95_ms", "itl_p99_ms",
                 "rounds_without_first_token", "errors", "stalls", "tokens_counted_by", "driver_limited")
COMPARISON_COLUMNS = ("concurrency", "a_output_tokens_per_s", "b_output_tokens_per_s", "delta_pct", "ci_low_pct",
                      "ci_high_pct", "significant", "judged", "a_windows", "b_windows", "windows_resampled",
                      "driver_limited", "verdict")


def _whole(value: Any) -> str:
    return "-" if value is None else f"{value:.0f}"


def _tenths(value: Any) -> str:  # one decimal in every row, so a column of rates lines up
    return "-" if value is None else f"{value:.1f}"


def windows_cell(row: dict[str, Any]) -> str:
    """'4/4', or '1/1 (bins only)' where the windows were not resampled (the drift unmeasured)."""
    if "a_windows" not in row:
        return "-"
    return f"{row['a_windows']}/{row['b_windows']}" + ("" if row.get("windows_resampled") else " (bins only)")


def comparison_table(rows: list[dict[str, Any]], a: str = "A", b: str = "B") -> Table:
    named = "" if (a, b) == ("A", "B") else f" (A: {a}, B: {b})"
    table = Table(title=f"output tokens/s, B vs A{named}", title_justify="left",
                  caption="windows A/B: the windows the CI resampled; bins only: one window a side, its drift unmeasured",
                  caption_justify="left")
    for column in ("c", "A tok/s", "B tok/s", "windows A/B"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("B vs A")
    for row in rows:
        style = "bold green" if row["significant"] and (row["delta_pct"] or 0) > 0 else (
            "bold red" if row["significant"] else "")
        if row.get("significant") is None and row.get("delta_pct") is not None:
            style = "yellow"  # a difference shown that is not judged
        table.add_row(str(row["concurrency"]), _whole(row["a_output_tokens_per_s"]), _whole(row["b_output_tokens_per_s"]),
                      windows_cell(row), f"[{style}]{escape(row['verdict'])}[/]" if style
                      else escape(row["verdict"]))
    return table


def level_table(per_level: list[dict[str, Any]]) -> Table:
    table = Table(title="per level", title_justify="left")
    for column in ("c", "", "tok/s", "req/s", "TTFT ms p50/p95/p99", "ITL ms p50/p95/p99", "errors", "stalls"):
        table.add_column(column, justify="right")

    def triple(q: dict[str, Any], digits: int) -> str:
        return "/".join("-" if q.get(k) is None else f"{q[k]:.{digits}f}" for k in ("p50", "p95", "p99"))

    for row in per_level:
        table.add_row(str(row["concurrency"]), row["deployment"] + (" [yellow](driver-limited)[/]"
                                                                   if row.get("driver_limited") else ""),
                      _whole(row["output_tokens_per_s"]), _tenths(row["requests_per_s"]), triple(row["ttft_ms"], 0),
                      triple(row["itl_ms"], 1), f"[red]{row['errors']}[/]" if row["errors"] else "0",
                      f"[yellow]{row['stalls']}[/]" if row["stalls"] else "0")
    return table


def ab_deltas(deployments: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """With B: every setting B's hop reported differently from A's, from their records
    (repro.reporting.deployment_diff); None without B or without both records."""
    records = [d.get("record") or {} for d in deployments]
    if len(records) != 2 or any(len(r) != 1 for r in records):
        return None
    (record_a,), (record_b,) = (r.values() for r in records)
    return deltas({"deployment": record_a}, {"deployment": record_b})


def deployment_lines(deployments: list[dict[str, Any]]) -> list[str]:
    """The deployment delta as the terminal prints it under the comparison."""
    found = ab_deltas(deployments)
    if found is None:
        return []
    if not found:
        return ["A and B reported the same deployment (every setting their hops expose)"]
    return ["B runs differently from A:"] + [f"  {delta_line(delta).removeprefix('deployment ')}" for delta in found]


def deployment_delta_html(deployments: list[dict[str, Any]]) -> str:
    found = ab_deltas(deployments)
    if found is None:
        return ""
    if not found:
        return ("<h2>Deployment delta</h2><p>A and B reported the same deployment (every setting their hops "
                "expose).</p>")
    rows = []
    for delta in found:
        before, after = short_change(delta["a"], delta["b"])
        note = f" ({delta['note']})" if delta.get("note") else ""
        rows.append(f"<tr><td>{html_text(delta['setting'])}</td><td>{html_text(delta['change'] + note)}</td>"
                    f"<td><code>{html_text(before)}</code></td><td><code>{html_text(after)}</code></td></tr>")
    return ("<h2>Deployment delta: what B runs differently from A</h2><p>As each deployment's hop reported it "
            "(its /server_info, /version, /v1/models) when the bench started.</p><div class=\"scroll\"><table class=\"text\">"
            "<tr><th>setting</th><th>change</th><th>A</th><th>B</th></tr>" + "".join(rows) + "</table></div>")


def level_row(row: dict[str, Any], windows: list[dict[str, Any]]) -> dict[str, Any]:
    """A per-level row as levels.csv holds it: quantiles flattened, the throughput's CI beside it."""
    ci = throughput_ci(windows, row["concurrency"], row["deployment"])
    flat = {k: row.get(k) for k in LEVEL_COLUMNS if k in row}
    flat["output_tokens_per_s_ci_low"], flat["output_tokens_per_s_ci_high"] = ci or (None, None)
    for key in ("ttft", "itl"):
        for quantile in ("p50", "p95", "p99"):
            flat[f"{key}_{quantile}_ms"] = (row.get(f"{key}_ms") or {}).get(quantile)
    return flat


def write_csvs(folder: Path, data: dict[str, Any]) -> list[str]:
    """levels.csv, and comparison.csv with B: the names written, for the page's links."""
    windows = data.get("windows", [])
    write_csv(folder / LEVELS_CSV, LEVEL_COLUMNS, (level_row(r, windows) for r in data.get("per_level", [])))
    if not data.get("levels"):
        return [LEVELS_CSV]
    write_csv(folder / COMPARISON_CSV, COMPARISON_COLUMNS, data["levels"])
    return [LEVELS_CSV, COMPARISON_CSV]


def charts_html(data: dict[str, Any]) -> str:
    per_level = data.get("per_level", [])
    if not per_level:
        return "<p>No level was measured: nothing to draw.</p>"
    figures = [throughput_figure(per_level, data.get("windows", []))]
    if data.get("levels"):
        figures.append(delta_figure(data["levels"], data.get("settings", {}).get("noise_band_pct") or 0.0))
    figures += [throughput_latency_figure(per_level, "ttft_ms", "TTFT"),
                throughput_latency_figure(per_level, "itl_ms", "ITL"),
                latency_figure(per_level, "ttft_ms", "Time to first token against concurrency"),
                latency_figure(per_level, "itl_ms", "Inter-token latency against concurrency")]
    return '<div class="charts">' + "".join(f'<div class="chart">{figure_div(f, f"chart-{i}")}</div>'
                                            for i, f in enumerate(figures)) + "</div>"


def render_bench_html(data: dict[str, Any], title: str, csvs: list[str] | None = None) -> str:
    per_level = data.get("per_level", [])
    windows = data.get("windows", [])
    deployments = "".join(f"<li>{html_text(d['name'])}: <code>{html_text(d.get('target') or 'embedded simulated engine')}"
                          f"</code>, model <code>{html_text(d.get('model'))}</code></li>" for d in data.get("deployments", []))
    comparison = ""
    if data.get("levels"):
        rows = "".join(f"<tr><td>{html_number(r['concurrency'])}</td><td>{html_number(r['a_output_tokens_per_s'])}</td>"
                       f"<td>{html_number(r['b_output_tokens_per_s'])}</td><td>{html_text(windows_cell(r))}</td>"
                       f"<td style='text-align:left'>{html_text(r['verdict'])}</td></tr>" for r in data["levels"])
        comparison = ("<h2>B vs A (output tokens/s, 95% bootstrap CI)</h2><div class=\"scroll\"><table><tr><th>concurrency</th>"
                      f"<th>A tok/s</th><th>B tok/s</th><th>windows A/B</th><th>B vs A</th></tr>{rows}</table></div><p>windows A/B: "
                      "the windows the CI resampled; bins only: one window a side, the drift between windows unmeasured, "
                      "so the level is not judged.</p>")

    def triple(q: dict[str, Any]) -> str:
        return "/".join(html_number(q.get(k)) for k in ("p50", "p95", "p99"))

    def ci_cell(row: dict[str, Any]) -> str:
        ci = throughput_ci(windows, row["concurrency"], row["deployment"])
        return "-" if ci is None else f"{html_number(ci[0])}..{html_number(ci[1])}"

    detail = "".join(
        f"<tr><td>{html_number(r['concurrency'])}</td><td>{html_text(r['deployment'])}</td><td>{html_number(r['output_tokens_per_s'])}</td>"
        f"<td>{ci_cell(r)}</td><td>{html_number(r['requests_per_s'])}</td><td>{triple(r['ttft_ms'])}</td><td>{triple(r['itl_ms'])}</td>"
        f"<td>{html_number(r['errors'])}</td><td>{html_number(r['stalls'])}</td><td style='text-align:left'>"
        f"{html_text(r.get('driver_limited') or '')}</td></tr>" for r in per_level)
    links = " and ".join(f'<a href="{html_text(name)}">{html_text(name)}</a>' for name in csvs or [])
    s = data.get("settings", {})
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>repro bench: {html_text(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{CSS}</style>{plotly_script()}</head><body>
<h1>repro bench: {html_text(title)}</h1>
<ul>{deployments}</ul>
<p>Closed loop: at each concurrency level that many conversations run rounds back to back;
{html_number(s.get('warmup_s'))} s warmup, {html_number(s.get('duration_s'))} s measured per window, {html_number(s.get('repeat'))}
window(s) per level and deployment, sub-windows of {html_number(s.get('bin_s'))} s; max_tokens {html_number(s.get('max_tokens'))}.</p>
{comparison}
{deployment_delta_html(data.get("deployments", []))}
<h2>Charts</h2>
<p>Hover a point for its values; drag to zoom, double-click to zoom out; click a legend entry to hide it.
Error bars are 95% confidence intervals: of each level's throughput over its windows (Student's t; none with one
window), and of B vs A (the bootstrap of the table above).</p>
{charts_html(data)}
<h2>Per level</h2>
{f"<p>These figures as {links} beside this page.</p>" if links else ""}
<div class="scroll"><table><tr><th>c</th><th>deployment</th><th>tok/s</th><th>tok/s 95% CI</th><th>req/s</th><th>TTFT p50/p95/p99 ms</th>
<th>ITL p50/p95/p99 ms</th><th>errors</th><th>stalls</th><th>driver the limit</th></tr>{detail}</table></div>
</body></html>
"""


def write_bench_html(run_dir: Path, data: dict[str, Any], out: Path | None = None) -> Path:
    """bench.html (or `out`), and levels.csv (comparison.csv with B) beside it."""
    target = out or Path(run_dir) / "bench.html"
    csvs = write_csvs(target.parent, data)
    target.write_text(render_bench_html(data, Path(run_dir).name, csvs), encoding="utf-8")
    return target
