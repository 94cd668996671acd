"""A bench's results as bench.json holds them, for `repro bench` (which writes them) and `repro
compare` (which reads two): each level's figures folded from its windows, the rows comparing
two sides (A and B of one bench, or deployment A of two benches), the load-shaping settings
two runs differ in, the warnings people must see, and the file read back and checked. Plain
data in, plain data out, but for `read_bench`, which reads the file; no driving, no writing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from repro.core.bench_stats import level_rows
from repro.core.errors import ReproError, UsageError
from repro.core.quantiles import REPORTED, quantiles_ms
from repro.reporting.deployment_diff import deltas

BENCH_FILE = "bench.json"
BENCH_KIND = "repro-bench"
BENCH_VERSION = 1


def per_level(windows: list[dict[str, Any]], pooled: dict[tuple[int, str], dict[str, list[float]]] | None = None
              ) -> list[dict[str, Any]]:
    """Each (level, deployment): its windows folded (throughput the mean of windows, latency
    quantiles over every sample when the raw samples are at hand, else the windows' worst)."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for w in windows:
        groups.setdefault((w["concurrency"], w["deployment"]), []).append(w)
    rows = []
    for (level, name), group in sorted(groups.items()):
        valid = [w for w in group if not w.get("invalid")]

        def mean(key: str, valid=valid) -> float | None:
            values = [w[key] for w in valid if w.get(key) is not None]
            return round(sum(values) / len(values), 2) if values else None

        raw = (pooled or {}).get((level, name))
        if raw is not None:
            ttft, itl = quantiles_ms(raw["ttft"]), quantiles_ms(raw["itl"])
        else:
            ttft = {q: max((w["ttft_ms"][q] for w in valid if w["ttft_ms"][q] is not None), default=None)
                    for q, _ in REPORTED}
            itl = {q: max((w["itl_ms"][q] for w in valid if w["itl_ms"][q] is not None), default=None)
                   for q, _ in REPORTED}
        limited = sorted({w["driver_limited"] for w in valid if w.get("driver_limited")})
        rows.append({
            "concurrency": level, "deployment": name, "windows": len(valid),
            "windows_invalid": len(group) - len(valid),
            "tokens_counted_by": "/".join(sorted({w.get("tokens_counted_by") or "usage" for w in valid})) or None,
            "output_tokens_per_s": mean("output_tokens_per_s"), "requests_per_s": mean("requests_per_s"),
            "ttft_ms": ttft, "itl_ms": itl,
            "rounds_without_first_token": sum(w.get("rounds_without_first_token") or 0 for w in valid),
            "errors": sum(w["errors"] for w in group), "stalls": sum(w["stalls"] for w in group),
            "verdicts": [v for w in group for v in w.get("verdicts", [])],
            "driver_limited": "; ".join(limited) or None,
        })
    return rows


def bins_by_level(windows: list[dict[str, Any]], deployment: str) -> dict[int, list[list[float]]]:
    """Each level's valid windows of one deployment, as their bins of tokens/s."""
    found: dict[int, list[list[float]]] = {}
    for w in windows:
        if w["deployment"] == deployment and not w.get("invalid"):
            found.setdefault(w["concurrency"], []).append(w["bins_tokens_per_s"])
    return found


def units_by_level(windows: list[dict[str, Any]], deployment: str) -> dict[int, set[str]]:
    """How each level's valid windows counted tokens: usage, or SSE events where no round reported it."""
    found: dict[int, set[str]] = {}
    for w in windows:
        if w["deployment"] == deployment and not w.get("invalid"):
            found.setdefault(w["concurrency"], set()).add(w.get("tokens_counted_by") or "usage")
    return found


def unit_mismatches(a: dict[int, set[str]], b: dict[int, set[str]], name_a: str = "A",
                    name_b: str = "B") -> dict[int, str]:
    """Levels whose windows counted tokens in different units: SSE events are not tokens, so a
    ratio of the two would measure the counting, not the deployment."""
    found = {}
    for level in sorted(set(a) & set(b)):
        if len(a[level] | b[level]) > 1:
            found[level] = (f"counted in different units ({name_a} by {'/'.join(sorted(a[level]))}, "
                            f"{name_b} by {'/'.join(sorted(b[level]))})")
    return found


# What shapes the load a bench puts on a deployment: two runs that differ in one of these do not
# measure the deployment alike, so `repro compare` will not call their difference significant.
LOAD_SETTINGS = ("levels", "duration_s", "warmup_s", "bin_s", "max_tokens", "rounds_per_conversation",
                 "prompt_chars", "prompts_file", "prompts_sha256", "tools", "client", "connections",
                 "client_timeouts", "workers")


def settings_differ(a: dict[str, Any], b: dict[str, Any]) -> dict[str, list[Any]]:
    """{setting: [run A's, run B's]} for each load-shaping setting that differs (None: not recorded)."""
    found = {key: [a.get(key), b.get(key)] for key in LOAD_SETTINGS if a.get(key) != b.get(key)}
    if a.get("prompts_sha256") and a.get("prompts_sha256") == b.get("prompts_sha256"):
        found.pop("prompts_file", None)  # the same prompts under another path
    return found


def ab_level_rows(windows: list[dict[str, Any]], name_a: str, name_b: str, *, seed: int,
                  noise_pct: float) -> list[dict[str, Any]]:
    """An A/B bench's comparison rows, B against A level by level (repro.core.bench_stats): held
    where the sides counted tokens in different units, marked where a side's driver was the limit."""
    held = unit_mismatches(units_by_level(windows, name_a), units_by_level(windows, name_b))
    rows = level_rows(bins_by_level(windows, name_a), bins_by_level(windows, name_b), seed=seed,
                      noise_pct=noise_pct, held=held)
    figures = per_level(windows)
    mark_driver_limited(rows, {"A": limited_levels(figures, name_a), "B": limited_levels(figures, name_b)})
    return rows


def levels_between_runs(data_a: dict[str, Any], data_b: dict[str, Any], name_a: str, name_b: str,
                        noise_pct: float = 1.0, differ: dict[str, list[Any]] | None = None) -> list[dict[str, Any]]:
    """Deployment A of two bench runs, level by level (`repro compare`): held where the runs counted
    tokens in different units, not judged where their load-shaping settings differ (`differ`, from
    settings_differ), marked where a driver was the limit."""
    a = bins_by_level(data_a["windows"], "A")
    b = bins_by_level(data_b["windows"], "A")
    if not set(a) & set(b):
        raise UsageError(f"{name_a} measured levels {sorted(a) or 'none'} and {name_b} {sorted(b) or 'none'}: no "
                         "level in common; bench both with the same --concurrency")
    held = unit_mismatches(units_by_level(data_a["windows"], "A"), units_by_level(data_b["windows"], "A"),
                           "A", "B")
    rows = level_rows(a, b, noise_pct=noise_pct, held=held, settings_differ=bool(differ))
    mark_driver_limited(rows, {"A": limited_levels(data_a.get("per_level", []), "A"),
                               "B": limited_levels(data_b.get("per_level", []), "A")})
    return rows


def deployment_deltas_between_runs(data_a: dict[str, Any], data_b: dict[str, Any]) -> list[dict[str, Any]] | None:
    """What deployment A's hops reported differently in two bench runs (repro.reporting.deployment_diff),
    or None when a run holds no record (a bench.json written before benches recorded one)."""
    records = [next((d.get("record") for d in data.get("deployments", []) if d.get("name") == "A"), None)
               for data in (data_a, data_b)]
    if not all(records):
        return None
    return deltas(records[0], records[1])


class BenchFileError(ReproError):
    """A folder that holds no readable bench results; one line naming it and the fix."""


def read_bench(folder: Path) -> dict[str, Any]:
    path = Path(folder) / BENCH_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BenchFileError(f"{folder} is not a bench run (no {BENCH_FILE}); pass a folder written by "
                             "`repro bench --out DIR`") from None
    except (OSError, ValueError) as exc:
        raise BenchFileError(f"cannot read {path} ({exc}); pass a folder written by `repro bench --out DIR`") from None
    if not isinstance(data, dict) or data.get("kind") != BENCH_KIND or not isinstance(data.get("windows"), list):
        raise BenchFileError(f"{path} is not a repro bench result; pass a folder written by `repro bench --out DIR`")
    for number, window in enumerate(data["windows"], start=1):
        if problem := _window_problem(window):
            raise BenchFileError(f"{path}: window {number} {problem}; restore the file or bench again with "
                                 "`repro bench --out DIR`")
    if not isinstance(data.get("settings", {}), dict) or not isinstance(data.get("per_level", []), list):
        raise BenchFileError(f"{path}: 'settings' or 'per_level' is malformed; restore the file or bench again "
                             "with `repro bench --out DIR`")
    return data


def _window_problem(window: Any) -> str | None:
    """What makes one bench.json window unusable, or None."""
    if not isinstance(window, dict):
        return "is not an object"
    missing = [key for key in ("deployment", "concurrency", "bins_tokens_per_s") if key not in window]
    if missing:
        return f"lacks {', '.join(repr(k) for k in missing)}"
    if not isinstance(window["concurrency"], int) or isinstance(window["concurrency"], bool):
        return f"has concurrency {window['concurrency']!r}, not a whole number"
    bins = window["bins_tokens_per_s"]
    if not isinstance(bins, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in bins):
        return "has 'bins_tokens_per_s' that is not a list of numbers"
    return None


def limited_levels(per_level_rows: list[dict[str, Any]], deployment: str) -> set[int]:
    """The levels where the driver measuring `deployment` was itself the limit."""
    return {row["concurrency"] for row in per_level_rows
            if row.get("deployment") == deployment and row.get("driver_limited")}


def mark_driver_limited(rows: list[dict[str, Any]], sides: dict[str, set[int]]) -> None:
    """Mark the comparison rows where a side's driver was the limit (`driver_limited`: which sides,
    e.g. "A and B"): their difference may be the client's, not the deployment's."""
    for row in rows:
        found = [side for side, levels in sides.items() if row["concurrency"] in levels]
        row["driver_limited"] = " and ".join(found) or None
        if found:
            row["verdict"] += f" [driver-limited: {row['driver_limited']}]"


def warnings_of(data: dict[str, Any]) -> list[str]:
    """The levels where the driver itself was the limit, and the windows left out, as lines for people."""
    lines = [f"c={row['concurrency']} {row['deployment']}: the driver was the limit ({row['driver_limited']}); "
             "its throughput there measures this client, not the deployment"
             for row in data.get("per_level", []) if row.get("driver_limited")]
    lines += [f"c={w['concurrency']} {w['deployment']} window #{w.get('repeat', 0) + 1}: invalid ({w['invalid']}); "
              "left out of the statistics" for w in data.get("windows", []) if w.get("invalid")]
    return lines
