"""Prometheus exposition text -> Snapshots. Pure: no I/O, never raises on bad input.

Why the line filter before the parser: a router or engine page is mostly histogram buckets and
process metrics that no adapter reads. Keeping only the sample lines an adapter reads (and, for
OpenMetrics, the families they belong to, whose parser checks family structure) makes parsing
cheap enough to run every 0.5 s inside the driver's event loop, and means one malformed line in
an unrelated family does not blind the probe. What is kept goes through prometheus_client's own
parsers (text format, or OpenMetrics when the page ends with `# EOF`), so label escaping, NaN,
+Inf and timestamps are read the way Prometheus reads them.

Two pages that are not Prometheus text are recognized by their first bytes and read by
probes/status_pages.py: nginx's stub_status and LiteLLM's /health/backlog JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families as text_families

from probes.dialects import FAMILIES, KNOWN_PREFIXES, READS, SeriesIndex, detect
from probes.status_pages import looks_like_stub_status, parse_backlog, parse_stub_status
from repro.core.snapshot import Snapshot, failed

MAX_PAGE_BYTES = 8 * 1024 * 1024  # real pages are well under 1 MB; anything bigger is not a metrics page
OPENMETRICS_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created", "_gcount", "_gsum", "_info")

Sample = tuple[str, dict[str, str], float]

# Why a known component's page can lack every series read here, by name prefix.
HINTS = {
    "caddy_": ": Caddy exports caddy_http_* only with `metrics` enabled for its servers",
    "litellm_": ": LiteLLM needs `callbacks: [\"prometheus\"]`",
    "envoy_": ": is this page filtered (?usedonly, ?filter=)?",
    "haproxy_": ": is this page filtered (?scope=...)?",
}


def parse_metrics(text: str, *, hop: str = "", url: str = "") -> list[Snapshot]:
    """One Snapshot per serving component on the page (one, unless series carry an `instance`
    label, as on a Prometheus /federate page). A page that cannot be read gives one Snapshot
    with ok=False and an error that says what was wrong."""
    try:
        return _parse(text, hop=hop, url=url)
    except Exception as exc:  # the contract: bad input never raises; say what happened instead
        return [failed(_one_line(f"unreadable metrics page: {type(exc).__name__}: {exc}"), hop=hop, url=url)]


def _parse(text: str, *, hop: str, url: str) -> list[Snapshot]:
    if not isinstance(text, str):
        return [failed(f"metrics page is {type(text).__name__}, not text", hop=hop, url=url)]
    if len(text) > MAX_PAGE_BYTES:
        return [failed(f"metrics page is {len(text) / 1e6:.1f} MB, over the {MAX_PAGE_BYTES >> 20} MB cap: "
                       "not a metrics page?", hop=hop, url=url)]
    text = _unquote(text)
    # Two status pages that are not Prometheus text, told apart by their first bytes.
    if looks_like_stub_status(text):
        return [parse_stub_status(text, hop=hop, url=url)]
    if text[:64].lstrip()[:1] == "{":
        backlog = parse_backlog(text, hop=hop, url=url)
        if backlog is not None:
            return [backlog]
    openmetrics = text.rstrip().endswith("# EOF")
    kept, first_other, sample_lines = _relevant_lines(text.splitlines(), openmetrics)
    if not kept or not any(not line.startswith("#") for line in kept):
        return [failed(_why_nothing(text, first_other, sample_lines), hop=hop, url=url)]
    try:
        samples = _samples(kept, openmetrics)
    except Exception as exc:
        kind = "OpenMetrics" if openmetrics else "Prometheus text"
        return [failed(_one_line(f"malformed {kind} page: {exc}"), hop=hop, url=url)]
    groups: dict[str | None, list[Sample]] = {}
    for sample in samples:
        groups.setdefault(sample[1].get("instance"), []).append(sample)
    out = []
    for instance, group in groups.items():
        snapshot = snapshot_from_samples(group, hop=hop, url=url if instance is None or len(groups) == 1 else instance)
        out.append(snapshot)
    return out


def snapshot_from_samples(samples: Iterable[Sample], *, hop: str = "", url: str = "") -> Snapshot:
    """Normalize already-parsed samples (also used by the Prometheus fleet source)."""
    index: SeriesIndex = {}
    for name, labels, value in samples:
        # Duplicated series (same name and labels twice, e.g. concatenated pages): the last wins,
        # so nothing is counted twice.
        index.setdefault(name, {})[tuple(sorted(labels.items()))] = float(value)
    dialect = detect(index)
    if dialect is None:
        names = ", ".join(sorted(index)[:3])
        return failed(f"no known serving metrics among the series read ({names})", hop=hop, url=url)
    fields = _finite(dialect.normalize(index))
    fields.setdefault("ok", True)  # an adapter may say the page itself reports a failure
    return Snapshot(hop=hop, url=url, dialect=dialect.name, **fields)


def _finite(fields: dict) -> dict:
    """Sums of finite values can still overflow (two series of 1e308): such a number says nothing,
    like a NaN, and JSON cannot carry it - None in fields and entries, dropped from `series`."""

    def clean(value):
        return None if isinstance(value, float) and not math.isfinite(value) else value

    for key, value in fields.items():
        if key == "series":
            fields[key] = {name: v for name, v in value.items() if math.isfinite(v)}
        elif key in ("backends", "workers"):
            fields[key] = [{k: clean(v) for k, v in entry.items()} for entry in value]
        else:
            fields[key] = clean(value)
    return fields


def _unquote(text: str) -> str:
    # llama.cpp build 7010 served /metrics as one JSON string (llama.cpp#17384): unwrap it.
    if text[:1] == '"' and text.rstrip()[-1:] == '"':
        try:
            inner = json.loads(text)
        except ValueError:
            return text
        if isinstance(inner, str):
            return inner
    return text


def _relevant_lines(lines: list[str], openmetrics: bool) -> tuple[list[str], str | None, int]:
    kept: list[str] = []
    first_other = None
    sample_lines = 0
    for line in lines:
        if not line or line[0] == "#":
            if openmetrics and line.startswith(("# TYPE ", "# UNIT ", "# HELP ")):
                family = line.split(" ", 3)[2] if line.count(" ") >= 2 else ""
                if family in FAMILIES:
                    kept.append(line)
            elif openmetrics and line == "# EOF":
                kept.append(line)
            continue
        sample_lines += 1
        name = line.partition("{")[0].partition(" ")[0]
        if name in READS or (openmetrics and _family_of(name) in FAMILIES):
            kept.append(line)
        elif first_other is None:
            first_other = line
    return kept, first_other, sample_lines


def _family_of(name: str) -> str:
    for suffix in OPENMETRICS_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _samples(lines: list[str], openmetrics: bool) -> list[Sample]:
    text = "\n".join(lines) + "\n"
    families = openmetrics_families(text) if openmetrics else text_families(text)
    return [(s.name, s.labels, s.value) for family in families for s in family.samples]


def _why_nothing(text: str, first_other: str | None, sample_lines: int) -> str:
    stripped = text.lstrip()
    if not stripped:
        return "empty metrics page"
    if stripped[:1] == "<":
        return "not a metrics page: got HTML/XML (wrong port or path?)"
    if stripped[:1] in "{[":
        return "not a metrics page: got JSON (wrong path?)"
    if first_other is not None:
        # Is it Prometheus text at all? Parse a few of its lines to tell gibberish from another exporter.
        probe = [line for line in text.splitlines() if line and line[0] != "#"][:20]
        try:
            names = sorted({s.name for f in text_families("\n".join(probe) + "\n") for s in f.samples})
        except Exception as exc:
            return _one_line(f"not Prometheus text: {exc} (first line {first_other[:60]!r})")
        known = [name for name in names if name.startswith(KNOWN_PREFIXES)]
        if known:
            hint = next((h for prefix, h in HINTS.items() if known[0].startswith(prefix)), "")
            return _one_line(f"serving metrics present but none this probe reads (e.g. {known[0]}){hint}")
        if any(name.startswith("gen_ai_") for name in names):
            return _one_line("OpenTelemetry GenAI metrics (e.g. Envoy AI Gateway's ext_proc page) have no in-flight "
                             "gauge: read the gateway's Envoy /stats/prometheus instead")
        return _one_line(f"no LLM-serving metrics on the page ({sample_lines} series, e.g. {names[0] if names else '?'}); "
                         "is this the engine's /metrics (SGLang needs --enable-metrics)?")
    return "no metric samples on the page (only comments)"


def _one_line(message: str, limit: int = 300) -> str:
    message = " ".join(message.split())
    return message if len(message) <= limit else message[: limit - 1] + "…"
