"""`repro probe URL...`: read each URL's metrics once (or every --watch seconds) and show them.

A URL may be a metrics page (.../metrics), or a server origin or OpenAI base URL (then
<origin>/metrics is read). --json prints a list with one object per engine, router, proxy or
router worker found; rows always carry url, dialect, ok, running, queued, error.
Exit status: 0 when every page was read, 1 when any was not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import anyio
from rich.console import Group
from rich.markup import escape

from probes.sampler import Sampler
from probes.scrape import new_client, scrape
from repro.commands.options import add_tls_flags, note_on_stderr, trust_from_args
from repro.core.hop import Hop, origin_of
from repro.core.snapshot import ROLE_OF_DIALECT, Snapshot
from repro.core.text import number
from repro.reporting.fit import Col, short_url, table_with_notes


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "probe",
        help="read engines', routers' and proxies' metrics and show running/queued/in-flight",
        description="Read each URL's Prometheus metrics (SGLang, vLLM, TGI, llama.cpp, sglang-router, "
        "the repro proxy) and show them normalized: running, queued, in flight, progress.",
    )
    p.add_argument("urls", nargs="*", metavar="URL",
                   help="metrics page, or server/base URL (then <origin>/metrics), e.g. http://127.0.0.1:30000")
    p.add_argument("--prometheus", metavar="URL",
                   help="read a fleet through a Prometheus server that already scrapes it (one query for all)")
    p.add_argument("--selector", default='{job="sglang"}',
                   help='label selector of the fleet\'s series, with --prometheus (default {job="sglang"})')
    p.add_argument("--json", action="store_true", help="print a JSON list (one object per engine or worker)")
    p.add_argument("--watch", type=float, metavar="SECONDS", help="refresh every SECONDS until Ctrl-C")
    p.add_argument("--timeout", type=float, default=2.0, help="deadline per page in seconds (default 2)")
    add_tls_flags(p)
    p.set_defaults(handler=handle)


def metrics_url_for(url: str) -> str:
    from repro.core.errors import UsageError

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"{url!r} is not an http(s) URL; give e.g. http://127.0.0.1:30000/metrics")
    if parts.path.rstrip("/") in ("", "/v1"):
        return origin_of(url) + "/metrics"
    return url


def handle(args: argparse.Namespace) -> int:
    from repro.core.errors import UsageError

    if not args.timeout > 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {args.timeout:g}")
    if args.watch is not None and not args.watch > 0:
        raise UsageError(f"--watch must be > 0 seconds, got {args.watch:g}")
    trust = trust_from_args(args)
    if trust.insecure and any(url.startswith("https:") for url in [*args.urls, args.prometheus or ""]):
        note_on_stderr("TLS certificates are not verified (--insecure): what an https page says is not "
                       "proven to come from that host")
    if getattr(args, "prometheus", None):
        return _fleet(args)
    if not args.urls:
        raise UsageError("give at least one URL, e.g. repro probe http://127.0.0.1:30000, or --prometheus URL")
    hops = [Hop(name=url, url=url, metrics_url=metrics_url_for(url)) for url in args.urls]
    # The Sampler's bookkeeping gives --watch its rates and staleness, the same rules as `repro run`.
    history = Sampler(hops, interval=args.watch or 1.0, emit=lambda event: None, origin=0.0)

    def read() -> list[dict[str, Any]]:
        snapshots = anyio.run(probe_all, hops, args.timeout)
        now = time.monotonic()
        return [with_tls(history.annotate(hop.name, s, now).to_dict(), trust.insecure)
                for hop, s in zip(hops, snapshots, strict=True)]

    return _show(read, args)


def with_tls(row: dict[str, Any], insecure: bool) -> dict[str, Any]:
    """An https page's row says whether its certificate was checked (false: --insecure)."""
    if row.get("url", "").startswith("https:"):
        row["tls_verified"] = not insecure
    return row


def _fleet(args: argparse.Namespace) -> int:
    """Every target a Prometheus server scrapes under --selector, as snapshots: one query per refresh."""
    from probes.fleet import PrometheusFleet

    fleet = PrometheusFleet(args.prometheus, args.selector, timeout=args.timeout)  # a FleetError is one line
    # One range query a refresh: the latest values, and tokens/s and gauge staleness over the last
    # minute, judged by the same rules as a direct probe (Prometheus scrapes every 15 s by default).
    return _show(lambda: [s.to_dict() for s in anyio.run(lambda: fleet.snapshots_with_rates(window=60.0))], args)


def _show(read: Callable[[], list[dict[str, Any]]], args: argparse.Namespace) -> int:
    """Print one reading (table or JSON), or keep refreshing with --watch. 0 when every page was read."""
    while True:
        dicts = read()
        rows_ = rows(dicts)
        if args.json:
            print(json.dumps(rows_, allow_nan=False), flush=True)
        else:
            render(rows_, clear=args.watch is not None)
        if args.watch is None:
            return 0 if all(d["ok"] for d in dicts) else 1
        time.sleep(args.watch)


async def probe_all(hops: list[Hop], timeout: float) -> list[Snapshot]:
    results: list[Snapshot | None] = [None] * len(hops)
    async with new_client(pool=len(hops)) as client:
        async def one(i: int, hop: Hop) -> None:
            results[i] = await scrape(hop, timeout=timeout, client=client)

        async with anyio.create_task_group() as tasks:
            for i, hop in enumerate(hops):
                tasks.start_soon(one, i, hop)
    return results  # type: ignore[return-value]


def rows(snapshots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per page read, then one per worker a router reported (role "worker", via the router)
    and one per upstream a proxy or gateway reported (role "backend", via the gateway)."""
    out = []
    for s in snapshots:
        row = {k: v for k, v in s.items() if k not in ("hop", "series", "labels", "workers", "backends")}
        row["role"] = ROLE_OF_DIALECT.get(s["dialect"], "?")
        row["labels"] = s.get("labels", {})
        out.append(row)
        for worker in s.get("workers", []):
            out.append({"url": worker["url"], "role": "worker", "via": s["url"], "dialect": s["dialect"],
                        "ok": s["ok"], "running": None, "queued": None, "in_flight": worker.get("active"),
                        "healthy": worker.get("healthy"), "circuit": worker.get("circuit"), "error": None})
        for backend in s.get("backends", []):
            out.append({"url": backend["name"], "role": "backend", "via": s["url"], "dialect": s["dialect"],
                        "ok": s["ok"], "running": None, "queued": backend.get("queued"),
                        "in_flight": backend.get("in_flight"), "healthy": backend.get("healthy"),
                        "state": backend.get("state"), "error": None})
    return out


FIGURES = ("running", "queued", "in flight", "held", "tok/s", "itl count")


def probe_table(rows_: list[dict[str, Any]], *, width: int, title: str) -> Group:
    """One row a page (its host:port and the last part of its path; the whole URL is in --json),
    then its workers or backends; notes (errors, staleness, health) in a column or, when the
    terminal is narrow, under the table."""
    cells, notes, labels = [], [], []
    for row in rows_:
        worker = row["role"] in ("worker", "backend")
        if worker:
            health = {True: "healthy", False: "UNHEALTHY", None: "health ?"}[row.get("healthy")]
            note = health + (f", circuit {row['circuit']}" if row.get("circuit") else "") \
                + (f", {row['state']}" if row.get("state") else "")
        elif row["ok"]:
            note = ("stale: " + ", ".join(row["stale"])) if row.get("stale") else ""
        else:
            note = row.get("error") or ""
        where = short_url(row["url"])
        cells.append([
            ("└ " if worker else "") + escape(where), row["role"] if worker else row["dialect"],
            ("yes" if row["ok"] else "[red]NO[/red]") if not worker else "",
            number(row.get("running")), number(row.get("queued")), number(row.get("in_flight")), number(row.get("held")),
            number(row.get("gen_tokens_per_s")), number(row.get("itl_count")),
        ])
        notes.append(escape(note))
        labels.append(where)
    columns = [Col("page", cut=True), Col("dialect"), Col("ok"), *(Col(f, "right") for f in FIGURES)]
    # A figure no page gave (held: only the repro proxy's) is left out rather than a column of "-".
    read = [i for i in range(len(columns)) if i < 3 or any(row[i] not in ("-", "") for row in cells)]
    return table_with_notes([columns[i] for i in read], [[row[i] for i in read] for row in cells], notes, labels,
                            note_header="note", width=width, title=title)


def render(rows_: list[dict[str, Any]], *, clear: bool = False) -> None:
    from rich.console import Console

    console = Console(file=sys.stdout)
    table = probe_table(rows_, width=console.width, title=f"repro probe · {time.strftime('%H:%M:%S')}")
    if clear and console.is_terminal:
        console.clear()
    console.print(table)
