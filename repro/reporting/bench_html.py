"""A bench's results for people: the terminal tables and bench.html (throughput and latency
against concurrency, one line per deployment; inline SVG and CSS, no script, no network)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from repro.core.text import number
from repro.reporting.html import CSS, html_number, html_text

PALETTE = ("#1e88e5", "#e53935", "#43a047", "#8e24aa")


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


def line_chart(title: str, unit: str, series: dict[str, list[tuple[int, float | None]]],
               width: int = 520, height: int = 300) -> str:
    """An SVG line chart: x the concurrency levels (evenly spaced, as swept), y from 0; one line per series."""
    levels = sorted({x for points in series.values() for x, _ in points})
    values = [y for points in series.values() for _, y in points if y is not None]
    if not levels or not values:
        return f"<p>{html_text(title)}: no data.</p>"
    left, right, top, bottom = 60, 20, 30, 40
    top_value = max(values) * 1.1 or 1.0

    def x(level: int) -> float:
        if len(levels) == 1:
            return left + (width - left - right) / 2
        return left + levels.index(level) * (width - left - right) / (len(levels) - 1)

    def y(value: float) -> float:
        return top + (height - top - bottom) * (1 - value / top_value)

    parts = [f'<text x="{left}" y="18" font-weight="bold">{html_text(title)} ({html_text(unit)})</text>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#999"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#999"/>']
    for fraction in (0, 0.25, 0.5, 0.75, 1.0):
        value = top_value * fraction
        parts.append(f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{html_text(number(round(value, 1)))}'
                     f'</text><line x1="{left}" y1="{y(value):.1f}" x2="{width - right}" y2="{y(value):.1f}" '
                     'stroke="#eee"/>')
    for level in levels:
        parts.append(f'<text x="{x(level):.1f}" y="{height - bottom + 16}" text-anchor="middle">{level}</text>')
    parts.append(f'<text x="{(left + width - right) / 2:.1f}" y="{height - 6}" text-anchor="middle">concurrency</text>')
    for index, (name, points) in enumerate(series.items()):
        color = PALETTE[index % len(PALETTE)]
        known = [(x(level), y(value), value) for level, value in sorted(points) if value is not None]
        if len(known) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py, _ in known)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for px, py, value in known:
            parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{color}"><title>{html_text(name)}: '
                         f'{html_text(number(value))} {html_text(unit)}</title></circle>')
        parts.append(f'<rect x="{width - right - 90}" y="{top + index * 16}" width="10" height="10" fill="{color}"/>'
                     f'<text x="{width - right - 75}" y="{top + index * 16 + 9}">{html_text(name)}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">' + "".join(parts) + "</svg>")


def _series(per_level: list[dict[str, Any]], pick) -> dict[str, list[tuple[int, float | None]]]:
    found: dict[str, list[tuple[int, float | None]]] = {}
    for row in per_level:
        found.setdefault(row["deployment"], []).append((row["concurrency"], pick(row)))
    return found


def render_bench_html(data: dict[str, Any], title: str) -> str:
    per_level = data.get("per_level", [])
    charts = "".join((
        line_chart("output throughput", "tokens/s", _series(per_level, lambda r: r["output_tokens_per_s"])),
        line_chart("TTFT p50", "ms", _series(per_level, lambda r: r["ttft_ms"]["p50"])),
        line_chart("inter-token latency p50", "ms", _series(per_level, lambda r: r["itl_ms"]["p50"])),
        line_chart("TTFT p99", "ms", _series(per_level, lambda r: r["ttft_ms"]["p99"])),
    ))
    deployments = "".join(f"<li>{html_text(d['name'])}: <code>{html_text(d.get('target') or 'embedded simulated engine')}"
                          f"</code>, model <code>{html_text(d.get('model'))}</code></li>" for d in data.get("deployments", []))
    comparison = ""
    if data.get("levels"):
        rows = "".join(f"<tr><td>{html_number(r['concurrency'])}</td><td>{html_number(r['a_output_tokens_per_s'])}</td>"
                       f"<td>{html_number(r['b_output_tokens_per_s'])}</td><td>{html_text(windows_cell(r))}</td>"
                       f"<td style='text-align:left'>{html_text(r['verdict'])}</td></tr>" for r in data["levels"])
        comparison = ("<h2>B vs A (output tokens/s, 95% bootstrap CI)</h2><table><tr><th>concurrency</th><th>A tok/s</th>"
                      f"<th>B tok/s</th><th>windows A/B</th><th>B vs A</th></tr>{rows}</table><p>windows A/B: the "
                      "windows the CI resampled; bins only: one window a side, the drift between windows unmeasured, "
                      "so the level is not judged.</p>")

    def triple(q: dict[str, Any]) -> str:
        return "/".join(html_number(q.get(k)) for k in ("p50", "p95", "p99"))

    detail = "".join(
        f"<tr><td>{html_number(r['concurrency'])}</td><td>{html_text(r['deployment'])}</td><td>{html_number(r['output_tokens_per_s'])}</td>"
        f"<td>{html_number(r['requests_per_s'])}</td><td>{triple(r['ttft_ms'])}</td><td>{triple(r['itl_ms'])}</td>"
        f"<td>{html_number(r['errors'])}</td><td>{html_number(r['stalls'])}</td><td style='text-align:left'>"
        f"{html_text(r.get('driver_limited') or '')}</td></tr>" for r in per_level)
    s = data.get("settings", {})
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>repro bench: {html_text(title)}</title>
<style>{CSS}</style></head><body>
<h1>repro bench: {html_text(title)}</h1>
<ul>{deployments}</ul>
<p>Closed loop: at each concurrency level that many conversations run rounds back to back;
{html_number(s.get('warmup_s'))} s warmup, {html_number(s.get('duration_s'))} s measured per window, {html_number(s.get('repeat'))}
window(s) per level and deployment, sub-windows of {html_number(s.get('bin_s'))} s; max_tokens {html_number(s.get('max_tokens'))}.</p>
{comparison}
<h2>Against concurrency</h2>{charts}
<h2>Per level</h2>
<table><tr><th>c</th><th>deployment</th><th>tok/s</th><th>req/s</th><th>TTFT p50/p95/p99 ms</th>
<th>ITL p50/p95/p99 ms</th><th>errors</th><th>stalls</th><th>driver the limit</th></tr>{detail}</table>
</body></html>
"""


def write_bench_html(run_dir: Path, data: dict[str, Any], out: Path | None = None) -> Path:
    target = out or Path(run_dir) / "bench.html"
    target.write_text(render_bench_html(data, Path(run_dir).name), encoding="utf-8")
    return target
