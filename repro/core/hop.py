"""Hops: the named, ordered parts of a serving stack, from the client side inwards.

Given as a TOML file (`[[hop]]` tables) or repeated `--hop name=...,url=...` flags; the first
hop is what the driver talks to. Bad input raises TopologyError with one line that names the
file, hop and field, and says how to fix it.

Which metrics page a hop is read at has one rule, applied when a Hop is made (`metrics_url`
left out): an engine or a router serves Prometheus on its API port (SGLang, vLLM, smg), so it is
read at `<origin>/metrics`; a proxy reads no page unless one is given, because its `/metrics`
is usually the engine's page proxied through; `metrics=none` turns probing off for any hop.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from repro.core.errors import ReproError
from repro.core.kinds import ROLES, Role
from repro.core.wire_api import WIRE_APIS, Api

AUTO = "auto"  # metrics_url not given: the role decides (see the module docstring)
NO_METRICS = "none"  # metrics=none: never probe this hop


class TopologyError(ReproError, ValueError):
    """Bad topology input; the message is one line naming the input and the fix."""


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def default_metrics_url(role: str, url: str) -> str | None:
    return origin_of(url) + "/metrics" if role in ("engine", "router") else None


@dataclass(frozen=True)
class Hop:
    name: str
    url: str  # base URL requests go to (the canary posts here)
    metrics_url: str | None = AUTO  # the page this hop is read at; None: not probed
    role: Role = "engine"
    # False: `url` is not an API the canaries may post to, only where the hop was found (a router
    # discovered through its separate metrics port): the hop is read, never sent a canary.
    canary: bool = True

    def __post_init__(self) -> None:
        if self.metrics_url == AUTO:
            object.__setattr__(self, "metrics_url", default_metrics_url(self.role, self.url))
        elif self.metrics_url is not None and self.metrics_url.lower() == NO_METRICS:
            object.__setattr__(self, "metrics_url", None)

    def to_dict(self) -> dict[str, str | bool | None]:
        out: dict[str, str | bool | None] = {"name": self.name, "url": self.url, "metrics_url": self.metrics_url,
                                             "role": self.role}
        if not self.canary:
            out["canary"] = False
        return out


def _check_url(value: object, where: str, field: str) -> str:
    if value is None:
        # As the user writes it: a flag's key=value, a file's TOML string.
        example = "http://127.0.0.1:30000" if where.startswith("--hop") else '"http://127.0.0.1:30000"'
        raise TopologyError(f"{where}: missing {field}; add {field}={example}")
    try:
        netloc = urlsplit(value).netloc if isinstance(value, str) else ""
    except ValueError:  # e.g. an unclosed IPv6 bracket
        netloc = ""
    if not isinstance(value, str) or not value.startswith(("http://", "https://")) or not netloc:
        raise TopologyError(f"{where}: {field} {value!r} is not an http(s) URL; give e.g. {field}=\"http://127.0.0.1:30000\"")
    if "@" in netloc:
        raise TopologyError(f"{where}: {field} carries credentials; pass the key in OPENAI_API_KEY instead "
                            "(URLs are written to the run log, keys never are)")
    return value


def make_hop(fields: dict[str, object], where: str) -> Hop:
    if not isinstance(fields, dict):
        raise TopologyError(f"{where}: a hop must be a table like [[hop]] name=\"engine-0\" url=\"http://...\", "
                            f"got {type(fields).__name__}")
    unknown = sorted(set(fields) - {"name", "url", "metrics_url", "metrics", "role"})
    if unknown:
        raise TopologyError(f"{where}: unknown field {unknown[0]!r}; allowed: name, url, metrics (or metrics_url, its older spelling), role")
    name = fields.get("name")
    if not isinstance(name, str) or not name.strip():
        raise TopologyError(f"{where}: missing name; add name=\"engine-0\" (any short label)")
    url = _check_url(fields.get("url"), where, "url")
    metrics = fields.get("metrics_url", fields.get("metrics"))
    if metrics is None:
        metrics = AUTO
    elif not (isinstance(metrics, str) and metrics.lower() == NO_METRICS):
        metrics = _check_url(metrics, where, "metrics")
    role = fields.get("role", "engine")
    if role not in ROLES:
        raise TopologyError(f"{where}: role {role!r} is not one of {'|'.join(ROLES)}; set role=\"engine\" (or proxy, router)")
    return Hop(name=name.strip(), url=url.rstrip("/"), metrics_url=metrics, role=role)  # type: ignore[arg-type]


def unique_hops(hops: Iterable[Hop], source: str) -> list[Hop]:
    """Refuse a hop name given twice: samples, canaries and verdicts are keyed by name."""
    seen: set[str] = set()
    hops = list(hops)
    for hop in hops:
        if hop.name in seen:
            raise TopologyError(f"{source}: hop name {hop.name!r} appears twice; give each hop its own name")
        seen.add(hop.name)
    return hops


def hops_of_toml(raw: str, source: str) -> list[Hop]:
    """The hops of a stack file's text (`[[hop]]` tables); `source` names the file in errors."""
    try:
        data = tomllib.loads(raw)
    except tomllib.TOMLDecodeError as exc:
        raise TopologyError(f"{source}: not valid TOML ({exc}); see the [[hop]] example in docs/commands.md") from None
    tables = data.get("hop")
    if not isinstance(tables, list) or not tables:
        raise TopologyError(f"{source}: no [[hop]] tables; add e.g. [[hop]] name=\"engine-0\" url=\"http://127.0.0.1:30000\"")
    header_lines = [n for n, line in enumerate(raw.splitlines(), 1) if line.strip().startswith("[[hop]]")]
    hops = []
    for i, table in enumerate(tables):
        line = f" (line {header_lines[i]})" if i < len(header_lines) else ""
        hops.append(make_hop(table, f"{source}: hop {i + 1}{line}"))
    return unique_hops(hops, source)


def parse_hop_flag(text: str) -> Hop:
    """`name=proxy,url=http://...,metrics=http://.../metrics,role=proxy` -> Hop."""
    fields: dict[str, object] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise TopologyError(f"--hop {text!r}: {part!r} is not key=value; write e.g. name=engine-0,url=http://127.0.0.1:30000")
        fields[key.strip()] = value.strip()
    return make_hop(fields, f"--hop {text!r}")


def chat_url(base_url: str) -> str:
    """The chat-completions endpoint of an OpenAI-compatible base URL (with or without /v1)."""
    return api_url(base_url, "chat")


def api_url(base_url: str, api: Api) -> str:
    """The endpoint of a wire API under a base URL (with or without /v1, or already any API's
    endpoint: `--target http://h/v1/chat/completions --api messages` means h's /v1/messages)."""
    base = base_url.rstrip("/")
    if api == "chat" and base.endswith("/chat/completions"):
        return base  # a chat endpoint given whole, under whatever prefix
    for known in WIRE_APIS.values():
        if base.endswith(known.path):
            base = base[:-len(known.path)]
            break
    else:
        base = base.removesuffix("/v1")
    return base + WIRE_APIS[api].path
