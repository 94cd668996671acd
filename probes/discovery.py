"""Hops found, not typed: the engines and routers a Prometheus server already scrapes, as Hops.

This is how repro follows a fleet wherever it runs (Kubernetes included) without a client for the
platform: Prometheus has already discovered the pods, and its API says which it scrapes.

Where the list comes from:
- `/api/v1/targets` (active targets), filtered here by the selector's matchers (=, !=, =~, !~,
  the syntax probes.fleet parses) on each target's labels. The target's `scrapeUrl` is where the
  hop is read, and its origin is the engine's API (SGLang, vLLM and llama.cpp serve /metrics on
  their API port).
- the series the selector matches (`/api/v1/series`), when the targets API is not usable: it does
  not answer (Thanos, Mimir), the selector names a metric (`__name__`), or no target matches
  (series federated or remote-written from elsewhere carry labels no local target has). The API
  URL is then `http://<instance>`; give `repro_api_url` for anything else.

A target's role is its `repro_role` label if it has one (engine, router or proxy), else what the
series Prometheus holds for it say (the dialect whose names they are: repro.core.snapshot's
ROLE_OF_DIALECT), else engine: the selector chose it. A router or a proxy is usually read on a
port of its own (smg's --prometheus-port, an nginx or HAProxy exporter), so its scrape origin is
not its API: unless the target carries `repro_api_url` (a label set in the scrape config or by
relabelling, documented in docs/watch.md#discovery-and-the-status-page), such a hop is read by its metrics only and never sent a
canary (Hop.canary False). A hop is named by its `instance` label unless `name_label` says
otherwise (a target without that label keeps its instance).

Bounded: every call shares one deadline (`timeout`). Bad input (URL, selector, label) raises
probes.fleet.FleetError, a Prometheus that does not answer or is not Prometheus raises
DiscoveryError, each one line; nothing matching is an empty list.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Any

import anyio

from probes.dialects import DIALECTS, detect
from probes.fleet import FleetError, Matcher, PrometheusFleet
from repro.core.errors import ReproError
from repro.core.hop import Hop, TopologyError, make_hop, origin_of, unique_hops
from repro.core.kinds import ROLES
from repro.core.snapshot import ROLE_OF_DIALECT

API_URL_LABEL = "repro_api_url"  # on a target: the hop's API, when it is not the scrape origin
ROLE_LABEL = "repro_role"  # on a target: engine, router or proxy, when its series cannot say
SERIES_WINDOW_S = 600.0  # the series looked at: those with samples in the last ten minutes
# The names that tell a component's dialect (each dialect's `keys`), plus `up`: the series query
# asks for these only, so its answer stays small however many series the targets export.
ROLE_NAMES = tuple(sorted({name for d in DIALECTS for name in d.keys} | {"up"}))
LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
HOST_PORT = re.compile(r"[A-Za-z0-9.\-]+:\d+|\[[0-9A-Fa-f:.]+\]:\d+")

TargetKey = tuple[str, str]  # (job, instance): what ties a target to the series it produced


class DiscoveryError(ReproError):
    """Prometheus did not answer discovery, or what answered is not Prometheus: one line."""


async def discover_hops(prometheus_url: str, selector: str, *, timeout: float = 5.0,
                        name_label: str = "instance") -> list[Hop]:
    """The hops Prometheus scrapes under `selector`, sorted by name (see the module docstring)."""
    if not LABEL_NAME.fullmatch(name_label or ""):
        raise FleetError(f"name label {name_label!r} is not a Prometheus label name; give e.g. instance or pod")
    fleet = PrometheusFleet(prometheus_url, selector, timeout=timeout)  # FleetError on a bad URL or selector
    try:
        with anyio.fail_after(timeout):
            return await _discover(fleet, name_label)
    except TimeoutError:
        raise DiscoveryError(f"prometheus {fleet.base_url}: no answer to discovery in {timeout:g} s") from None


async def _discover(fleet: PrometheusFleet, name_label: str) -> list[Hop]:
    targets: list[dict[str, Any]] | None = None
    if not any(m.name == "__name__" for m in fleet.selector):  # a metric name is no target label
        data, error = await fleet.api("/api/v1/targets", {"state": "active"}, method="GET")
        if error is None and isinstance(data.get("activeTargets"), list):
            targets = matching_targets(data["activeTargets"], fleet.selector)
    now = time.time()
    series, error = await fleet.api("/api/v1/series", {"match[]": fleet.query(ROLE_NAMES),
                                                        "start": f"{now - SERIES_WINDOW_S:.3f}", "end": f"{now:.3f}"})
    if error is not None:
        raise DiscoveryError(f"prometheus discovery: {error.removeprefix('prometheus: ')}")
    series = series or []  # PrometheusFleet.api gives {} for an empty `data`
    if not isinstance(series, list):
        raise DiscoveryError(f"prometheus {fleet.base_url}: /api/v1/series answered no list (is this Prometheus?)")
    if targets:
        return hops_from_targets(targets, names_by_target(series), name_label)
    return hops_from_series(series, name_label)


# --- pure: the API's answers -> hops ------------------------------------------------------------

def matching_targets(targets: list[dict[str, Any]], matchers: tuple[Matcher, ...]) -> list[dict[str, Any]]:
    """The active targets whose labels every matcher accepts."""
    return [t for t in targets if isinstance(t, dict) and all(m.matches(t.get("labels") or {}) for m in matchers)]


def names_by_target(series: list[dict[str, str]]) -> dict[TargetKey, set[str]]:
    """Metric names per (job, instance), from /api/v1/series label sets."""
    out: dict[TargetKey, set[str]] = {}
    for labels in series:
        out.setdefault((labels.get("job", ""), labels.get("instance", "")), set()).add(labels.get("__name__", ""))
    return out


def role_of(labels: dict[str, str], names: set[str], where: str) -> str:
    """`repro_role` when given, else the dialect the names belong to, else engine."""
    given = labels.get(ROLE_LABEL)
    if given is not None:
        if given not in ROLES:
            raise FleetError(f"{where}: label {ROLE_LABEL}={given!r} is not one of {'|'.join(ROLES)}; "
                             "fix the label in the scrape config")
        return given
    dialect = detect({name: {} for name in names})
    return ROLE_OF_DIALECT.get(dialect.name, "engine") if dialect else "engine"


def hop_of(labels: dict[str, str], metrics_url: str, names: set[str], name_label: str) -> Hop:
    """One target as a Hop: its API is `repro_api_url`, or for an engine its metrics page's origin;
    a router or proxy without `repro_api_url` is read only (canary False)."""
    name = labels.get(name_label) or labels.get("instance") or origin_of(metrics_url).split("://", 1)[1]
    where = f"prometheus target {name!r}"
    role = role_of(labels, names, where)
    api = labels.get(API_URL_LABEL)
    try:
        hop = make_hop({"name": name, "url": api or origin_of(metrics_url), "metrics": metrics_url, "role": role},
                       where + (f" (label {API_URL_LABEL})" if api else ""))
    except TopologyError as exc:
        raise FleetError(str(exc)) from None
    return hop if api or role == "engine" else dataclasses.replace(hop, canary=False)


def hops_from_targets(targets: list[dict[str, Any]], names: dict[TargetKey, set[str]], name_label: str) -> list[Hop]:
    hops = []
    for target in targets:
        labels, scrape_url = target.get("labels") or {}, target.get("scrapeUrl")
        if not isinstance(scrape_url, str) or not scrape_url.startswith(("http://", "https://")):
            continue  # Prometheus always gives one; anything else is not a target we can read
        key = (labels.get("job", ""), labels.get("instance", ""))
        hops.append(hop_of(labels, scrape_url, names.get(key, set()), name_label))
    return distinct(hops, name_label)


def hops_from_series(series: list[dict[str, str]], name_label: str) -> list[Hop]:
    """Hops from series alone (no target to say where it was scraped): one per (job, instance),
    its API `repro_api_url` or http://<instance>; an instance that is no host:port is skipped."""
    groups: dict[TargetKey, dict[str, str]] = {}
    for labels in series:
        key = (labels.get("job", ""), labels.get("instance", ""))
        if labels.get("__name__") == "up" or key not in groups:  # `up` carries the target's labels only
            groups[key] = {k: v for k, v in labels.items() if k != "__name__"}
    names = names_by_target(series)
    hops = []
    for key, labels in groups.items():
        instance = key[1]
        if not (labels.get(API_URL_LABEL) or HOST_PORT.fullmatch(instance)):
            continue
        metrics_url = (f"http://{instance}/metrics" if HOST_PORT.fullmatch(instance)
                       else origin_of(labels[API_URL_LABEL]) + "/metrics")
        hops.append(hop_of(labels, metrics_url, names.get(key, set()), name_label))
    return distinct(hops, name_label)


def distinct(hops: list[Hop], name_label: str) -> list[Hop]:
    """One hop per name, sorted: a target listed twice (two jobs scraping one page) is one hop;
    two different hops with one name is a label that does not tell them apart."""
    by_name: dict[str, Hop] = {}
    for hop in hops:
        other = by_name.setdefault(hop.name, hop)
        if other.url != hop.url:
            raise FleetError(f"name label {name_label!r}: two targets are both named {hop.name!r} ({other.url}, "
                             f"{hop.url}); name them by a label that differs per target, e.g. instance")
    return unique_hops(sorted(by_name.values(), key=lambda h: h.name), "prometheus discovery")
