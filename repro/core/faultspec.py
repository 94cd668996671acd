"""The one fault-spec grammar shared by the simulated engine, the fault proxy and the CLI.

    NAME[=VALUE][,after=N|after=Ts][,per=conn|global][,KEY=VALUE...]

`after=3` arms the fault after 3 requests have passed, `after=2.5s` after 2.5 seconds.
`per=conn` counts requests per client connection (the proxy's wedge faults), `per=global`
(default) across all. Each consumer declares which names it knows and what VALUE they take,
so a typo fails at once with a message that names the input and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from repro.core.errors import ReproError


class FaultSpecError(ReproError, ValueError):
    """A fault spec that cannot be understood; the message is one line for the user."""


class ValueKind(Enum):
    NONE = "no value"
    INT = "an integer"
    FLOAT = "a number"
    OPTIONAL_INT = "an optional integer"
    OPTIONAL_FLOAT = "an optional number"


@dataclass(frozen=True)
class FaultSpec:
    name: str
    value: float | int | None = None
    after_requests: int = 0
    after_seconds: float = 0.0
    per_connection: bool = False
    params: Mapping[str, str] = field(default_factory=dict)
    text: str = ""

    def __str__(self) -> str:
        return self.text or self.name


def _number(raw: str, kind: ValueKind, what: str, spec: str):
    try:
        if kind in (ValueKind.INT, ValueKind.OPTIONAL_INT):
            number = int(raw)
        else:
            number = float(raw)
    except ValueError:
        raise FaultSpecError(f"fault spec {spec!r}: {what} must be {kind.value}, got {raw!r}") from None
    if number < 0 or number != number:
        raise FaultSpecError(f"fault spec {spec!r}: {what} must not be negative, got {raw!r}")
    return number


def parse_fault_spec(text: str, known: Mapping[str, ValueKind], *, what: str = "fault") -> FaultSpec:
    """Parse one spec; `known` maps each accepted fault name to the kind of VALUE it takes."""
    spec = (text or "").strip()
    if not spec:
        raise FaultSpecError(f"empty {what} spec: give NAME[=VALUE][,after=N], one of: {', '.join(sorted(known))}")
    head, *options = [part.strip() for part in spec.split(",")]
    name, _, raw_value = head.partition("=")
    name = name.strip().lower()
    if name not in known:
        raise FaultSpecError(
            f"unknown {what} {name!r} in {spec!r}: use one of {', '.join(sorted(known))}"
        )
    kind = known[name]
    value = None
    if raw_value:
        if kind is ValueKind.NONE:
            raise FaultSpecError(f"{what} spec {spec!r}: {name} takes no value; write just {name!r}")
        value = _number(raw_value.strip(), kind, f"the value of {name}", spec)
    elif kind in (ValueKind.INT, ValueKind.FLOAT):
        raise FaultSpecError(f"{what} spec {spec!r}: {name} needs {kind.value}, e.g. {name}=2")
    after_requests, after_seconds, per_connection = 0, 0.0, False
    params: dict[str, str] = {}
    for option in options:
        key, sep, raw = option.partition("=")
        key, raw = key.strip().lower(), raw.strip()
        if not sep or not key or not raw:
            raise FaultSpecError(f"{what} spec {spec!r}: option {option!r} must be KEY=VALUE, e.g. after=3")
        if key == "after":
            if raw.endswith("s"):
                after_seconds = float(_number(raw[:-1], ValueKind.FLOAT, "after (seconds)", spec))
            else:
                after_requests = int(_number(raw, ValueKind.INT, "after (requests)", spec))
        elif key == "per":
            if raw not in ("conn", "connection", "global"):
                raise FaultSpecError(f"{what} spec {spec!r}: per must be 'conn' or 'global', got {raw!r}")
            per_connection = raw != "global"
        else:
            params[key] = raw
    return FaultSpec(
        name=name,
        value=value,
        after_requests=after_requests,
        after_seconds=after_seconds,
        per_connection=per_connection,
        params=params,
        text=spec,
    )
