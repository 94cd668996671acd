"""Fleet source: the same signals, read from a Prometheus server that already scrapes the engines.

One instant query (`/api/v1/query`) fetches every series an adapter reads, for every target the
label selector matches, so hundreds of engines cost one request; results are grouped by
`instance` and go through the same dialect adapters as a scraped page. Rates and staleness come
from one range query (`/api/v1/query_range`) over a short window, judged by the same rules as
the Sampler (probes/staleness.py). Prometheus' own `up` series marks targets it cannot scrape.
Like scrape(), nothing here raises on network trouble: a failure is a Snapshot with ok=False.
"""

from __future__ import annotations

import ast
import re
import time
import warnings
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from probes.dialects import READS
from probes.exposition import snapshot_from_samples
from probes.scrape import connect_reason, shared_tls
from probes.staleness import counter_rate, stale_gauges
from repro.core.errors import ReproError
from repro.core.snapshot import Snapshot, failed

# Only names a dialect reads (plus `up`), as one regex matcher: no escaping needed, since metric
# names are [a-zA-Z0-9_:] - checked here so a future name cannot break the query silently.
FLEET_NAMES = tuple(sorted(READS | {"up"}))
assert all(re.fullmatch(r"[A-Za-z0-9_:]+", name) for name in FLEET_NAMES)
SELECTOR = re.compile(r"^\{\s*(.*?)\s*\}$", re.S)
# One label matcher of a PromQL selector: name, operator, then a string literal as PromQL writes it
# (double or single quotes with Go escapes, which Python's literal syntax shares, or raw backticks).
MATCHER = re.compile(r"""\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)\s*(?:,|$)""",
                     re.S)


class FleetError(ReproError, ValueError):
    """A bad selector or base URL: one line naming it and the fix."""


@dataclass(frozen=True)
class Matcher:
    """`name op "value"` of a selector, evaluated as Prometheus does: a label that is absent reads
    as the empty string, and a regex must match the whole value."""

    name: str
    op: str
    value: str

    def matches(self, labels: dict[str, str]) -> bool:
        have = labels.get(self.name, "")
        if self.op in ("=", "!="):
            return (have == self.value) == (self.op == "=")
        return (re.fullmatch(self.value, have, re.S) is not None) == (self.op == "=~")


def parse_selector(selector: str) -> tuple[Matcher, ...]:
    """`{job="sglang", cluster=~"eu.*"}` -> its matchers; a FleetError (one line) when it is not one."""
    match = SELECTOR.match(selector.strip())
    if not match:
        raise FleetError(f"selector {selector!r} is not a label selector; write it like {{job=\"sglang\"}}")
    inner, matchers, at = match.group(1).rstrip(","), [], 0
    while at < len(inner):
        found = MATCHER.match(inner, at)
        if not found or found.end() == at:
            raise FleetError(f"selector {selector!r}: cannot read {inner[at:at + 30]!r}; each matcher is "
                             "label=\"value\" (or !=, =~, !~), separated by commas")
        name, op, literal = found.groups()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "\\d" and friends: PromQL users write them on purpose
                value = literal[1:-1] if literal.startswith("`") else ast.literal_eval(literal)
        except (ValueError, SyntaxError):
            raise FleetError(f"selector {selector!r}: {literal!r} is not a string literal PromQL reads") from None
        if op in ("=~", "!~"):
            try:
                re.compile(value)
            except (re.error, OverflowError, RecursionError) as exc:  # a{99999999999} overflows
                raise FleetError(f"selector {selector!r}: {value!r} is not a regular expression ({exc})") from None
        matchers.append(Matcher(name, op, value))
        at = found.end()
    return tuple(matchers)


class PrometheusFleet:
    def __init__(self, base_url: str, selector: str = '{job="sglang"}', *, timeout: float = 5.0,
                 group_by: str = "instance", client: httpx.AsyncClient | None = None) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise FleetError(f"Prometheus URL {base_url!r} is not http(s); give e.g. http://127.0.0.1:9090")
        self.selector = parse_selector(selector)  # one line when it is not a selector
        match = SELECTOR.match(selector.strip())
        assert match  # parse_selector checked it
        self.base_url = base_url.rstrip("/")
        self.matchers = match.group(1).rstrip(",")
        self.timeout = timeout
        self.group_by = group_by
        self._client = client

    def query(self, names: tuple[str, ...] = FLEET_NAMES) -> str:
        matchers = f'__name__=~"{"|".join(names)}"'
        return "{" + matchers + ("," + self.matchers if self.matchers else "") + "}"

    async def snapshots(self) -> list[Snapshot]:
        """The latest value of every signal, one Snapshot per target (instance)."""
        start = time.monotonic()
        data, error = await self.api("/api/v1/query", {"query": self.query(), "time": f"{time.time():.3f}"})
        if error:
            return [failed(error, hop="prometheus", url=self.base_url, scrape_s=time.monotonic() - start)]
        groups: dict[str, list[tuple[str, dict[str, str], float]]] = {}
        for series in data.get("result", []):
            self._add(groups, series["metric"], series["value"][1])
        return self._snapshots(groups, time.monotonic() - start)

    async def history(self, window: float = 30.0, step: float | None = None) -> dict[str, list[tuple[float, Snapshot]]]:
        """Per target, a Snapshot per range-query step over the last `window` seconds, oldest first.
        A failure is reported under the key "prometheus"."""
        step = step or max(1.0, window / 10)
        end = time.time()
        start_mono = time.monotonic()
        data, error = await self.api("/api/v1/query_range", {
            "query": self.query(), "start": f"{end - window:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
        if error:
            return {"prometheus": [(end, failed(error, hop="prometheus", url=self.base_url,
                                                scrape_s=time.monotonic() - start_mono))]}
        by_time: dict[float, dict[str, list[tuple[str, dict[str, str], float]]]] = {}
        for series in data.get("result", []):
            for ts, value in series.get("values", []):
                self._add(by_time.setdefault(float(ts), {}), series["metric"], value)
        out: dict[str, list[tuple[float, Snapshot]]] = {}
        for ts in sorted(by_time):
            for snapshot in self._snapshots(by_time[ts], 0.0):
                out.setdefault(snapshot.url, []).append((ts, snapshot))
        return out

    async def snapshots_with_rates(self, window: float = 30.0, step: float | None = None) -> list[Snapshot]:
        """Latest Snapshot per target with gen_tokens_per_s / itl_per_s over the window and the
        staleness judgement, from one range query."""
        out = []
        for _instance, points in sorted((await self.history(window, step)).items()):
            t_last, latest = points[-1]
            readable = [(t, s.to_dict()) for t, s in points if s.ok]
            if latest.ok and len(readable) >= 2:
                (t0, first), (t1, last) = readable[0], readable[-1]
                latest.gen_tokens_per_s = counter_rate(first, last, "gen_tokens_total", t1 - t0)
                latest.itl_per_s = counter_rate(first, last, "itl_count", t1 - t0)
                latest.stale = stale_gauges([d for _, d in readable])
            out.append(latest)
        return out

    # --- plumbing ---------------------------------------------------------------------------

    def _add(self, groups: dict, metric: dict[str, str], value: str) -> None:
        labels = dict(metric)
        name = labels.pop("__name__", "")
        key = labels.get(self.group_by, "")
        groups.setdefault(key, []).append((name, labels, float(value)))

    def _snapshots(self, groups: dict[str, list], elapsed: float) -> list[Snapshot]:
        out = []
        for instance in sorted(groups):
            samples = groups[instance]
            up = [value for name, _, value in samples if name == "up"]
            if up and max(up) < 1:
                snapshot = failed("prometheus: target down (up=0): its last scrape failed", hop=instance, url=instance)
            else:
                snapshot = snapshot_from_samples([s for s in samples if s[0] != "up"], hop=instance, url=instance)
            snapshot.scrape_s = elapsed
            snapshot.labels = {**snapshot.labels, self.group_by: instance}
            out.append(snapshot)
        return out

    async def api(self, path: str, form: dict[str, str], *, method: str = "POST") -> tuple[dict[str, Any], str | None]:
        url = self.base_url + path
        own = self._client is None
        client = self._client or httpx.AsyncClient(trust_env=False, verify=shared_tls())
        try:
            with anyio.move_on_after(self.timeout) as scope:
                # POST: the name regex makes a long query string; Prometheus takes form bodies too
                # (except on the few GET-only endpoints, such as /api/v1/targets).
                if method == "GET":
                    response = await client.get(url, params=form, timeout=self.timeout)
                else:
                    response = await client.post(url, data=form, timeout=self.timeout)
            if scope.cancelled_caught:
                return {}, f"prometheus: no answer from {url} in {self.timeout:g} s"
            try:
                body = response.json()
            except ValueError:
                return {}, f"prometheus: http {response.status_code} from {url}, not JSON (is this the Prometheus URL?)"
            if response.status_code != 200 or body.get("status") != "success":
                return {}, f"prometheus: http {response.status_code}: {body.get('errorType')}: {body.get('error')}"
            return body.get("data") or {}, None
        except httpx.ConnectError as exc:
            return {}, f"connect: {connect_reason(exc)} ({url})"
        except (httpx.HTTPError, OSError, KeyError, TypeError, AttributeError) as exc:
            return {}, f"prometheus: {type(exc).__name__}: {exc}"
        finally:
            if own:
                with anyio.CancelScope(shield=True):
                    await client.aclose()
