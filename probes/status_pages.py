"""Status pages that are not Prometheus text, read into the same Snapshot. Pure: never raises.

- nginx `stub_status` (ngx_http_stub_status_module; Debian's nginx has it built in): four lines,

      Active connections: 3
      server accepts handled requests
       120 120 431
      Reading: 0 Writing: 2 Waiting: 1

  read as dialect "nginx", in_flight from Reading + Writing less the status request itself
  (probes.dialects.nginx_in_flight says why those two). accepts - handled > 0 means nginx hit
  a connection limit (worker_connections) and dropped clients: kept as a series.
- LiteLLM's `GET /health/backlog` JSON, `{"in_flight_requests": N, "queued_requests": M, ...}`
  (LiteLLM proxy docs, "Health checks"; measured on LiteLLM 1.108.7): the same per-worker counter as
  litellm_in_flight_requests, this request included, so one is taken off. Read as dialect "litellm".

Both are recognized by their first bytes only, so Prometheus pages never pay for this.
"""

from __future__ import annotations

import json
import math
import re

from probes.dialects import minus_own_request, nginx_in_flight
from repro.core.snapshot import Snapshot, failed

STUB_STATUS_HEAD = "Active connections:"
MAX_STATUS_PAGE = 64 * 1024  # a real stub_status page is ~100 bytes, a backlog answer ~100 more

_ACTIVE = re.compile(r"Active connections:[ \t]*([0-9]+)")
_TITLES = re.compile(r"server[ \t]+accepts[ \t]+handled[ \t]+requests")
_COUNTS = re.compile(r"([0-9]+)[ \t]+([0-9]+)[ \t]+([0-9]+)")
_STATES = re.compile(r"Reading:[ \t]*([0-9]+)[ \t]+Writing:[ \t]*([0-9]+)[ \t]+Waiting:[ \t]*([0-9]+)")
_LINES = (
    (_ACTIVE, "'Active connections: N'"),
    (_TITLES, "'server accepts handled requests'"),
    (_COUNTS, "three counts (accepts handled requests)"),
    (_STATES, "'Reading: N Writing: N Waiting: N'"),
)


def looks_like_stub_status(text: str) -> bool:
    return text[:64].lstrip().startswith(STUB_STATUS_HEAD)


def parse_stub_status(text: str, *, hop: str = "", url: str = "") -> Snapshot:
    """nginx's stub_status page -> Snapshot; anything else -> ok=False with a one-line error."""
    try:
        return _stub_status(text, hop=hop, url=url)
    except Exception as exc:  # the contract: never raise on a page
        return failed(_one_line(f"unreadable nginx stub_status page: {type(exc).__name__}: {exc}"),
                      hop=hop, url=url, dialect="nginx")


def _stub_status(text: str, *, hop: str, url: str) -> Snapshot:
    if len(text) > MAX_STATUS_PAGE:
        return failed(f"not an nginx stub_status page: {len(text)} bytes, a real one is ~100", hop=hop, url=url,
                      dialect="nginx")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != len(_LINES):
        return failed(_one_line(f"malformed nginx stub_status page: {len(lines)} non-empty lines, expected 4 "
                                f"(first {lines[0][:60]!r})" if lines else "empty nginx stub_status page"),
                      hop=hop, url=url, dialect="nginx")
    numbers: list[int] = []
    for number, (line, (pattern, wanted)) in enumerate(zip(lines, _LINES, strict=True), start=1):
        match = pattern.fullmatch(line)
        if match is None:
            return failed(_one_line(f"malformed nginx stub_status page: line {number} should be {wanted}, "
                                    f"got {line[:60]!r}"), hop=hop, url=url, dialect="nginx")
        if any(len(group) > 19 for group in match.groups()):  # nginx counts are 64-bit atomics
            return failed(f"malformed nginx stub_status page: a count on line {number} is out of range", hop=hop,
                          url=url, dialect="nginx")
        numbers += [int(group) for group in match.groups()]
    active, accepts, handled, requests, reading, writing, waiting = (float(n) for n in numbers)
    series = {
        "stub_status.active": active, "stub_status.accepts": accepts, "stub_status.handled": handled,
        "stub_status.requests": requests, "stub_status.reading": reading, "stub_status.writing": writing,
        "stub_status.waiting": waiting, "stub_status.dropped": max(0.0, accepts - handled),
    }
    return Snapshot(hop=hop, url=url, ok=True, dialect="nginx", in_flight=nginx_in_flight(reading, writing),
                    series=series)


def parse_backlog(text: str, *, hop: str = "", url: str = "") -> Snapshot | None:
    """LiteLLM's /health/backlog JSON -> Snapshot; None when the text is not that JSON at all
    (the caller then reports it as it would any other page)."""
    if len(text) > MAX_STATUS_PAGE or text[:64].lstrip()[:1] != "{":
        return None
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict) or "in_flight_requests" not in body:
        return None
    numbers = {key: number for key, value in body.items() if (number := _number(value)) is not None}
    if "in_flight_requests" not in numbers:
        return failed(_one_line(f"malformed LiteLLM /health/backlog answer: in_flight_requests is "
                                f"{body['in_flight_requests']!r:.40}, not a number"), hop=hop, url=url, dialect="litellm")
    return Snapshot(hop=hop, url=url, ok=True, dialect="litellm",
                    in_flight=minus_own_request(numbers["in_flight_requests"]), queued=numbers.get("queued_requests"),
                    series={f"health_backlog.{key}": value for key, value in numbers.items()})


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # a JSON integer with hundreds of digits
        return None
    return number if math.isfinite(number) else None


def _one_line(message: str, limit: int = 300) -> str:
    message = " ".join(message.split())
    return message if len(message) <= limit else message[: limit - 1] + "…"
