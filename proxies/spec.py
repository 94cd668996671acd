"""The fault names the proxy layers understand, parsed with the one shared grammar (repro.core.faultspec).

HTTP layer (mitmproxy addon, round-aware):
    pass                 forward everything, SSE event by event (the healthy proxy)
    buffer               buffer the whole response before sending any of it (TTFT == total)
    hold-request         read the request, never forward it (the engine never sees it)
    hold-response        forward, let the engine finish, withhold the response headers
    truncate-hold=K      pass K SSE events, drop the rest, withhold the end of the body
    hold-eom             pass every event incl. [DONE], withhold the end of the body
    truncate-reset=K     pass K SSE events, then close the connection mid-body
    drop                 close the client connection without a response (engine never sees it)
    wedge-after=N        per client connection: N requests pass, later ones are held
    keepalive-race[=S]   close a kept-alive connection when it is reused (after S s idle)
    delay=MS             hold each request MS milliseconds before forwarding it
    slow-drip[=MS]       delay every SSE event by MS milliseconds (default 200)
    idle-cut=S           close a stream whose upstream was silent for S seconds (nginx/ALB)

TCP layer (proxies.relay, named after Toxiproxy toxics, byte-level, not round-aware):
    freeze, half-open, reset, slicer[=BYTES], limit-data=BYTES, latency=MS
"""

from __future__ import annotations

from repro.core.faultspec import FaultSpec, FaultSpecError, ValueKind, parse_fault_spec

PROXY_FAULTS: dict[str, ValueKind] = {
    "pass": ValueKind.NONE,
    "buffer": ValueKind.NONE,
    "hold-request": ValueKind.NONE,
    "hold-response": ValueKind.NONE,
    "truncate-hold": ValueKind.INT,
    "hold-eom": ValueKind.NONE,
    "truncate-reset": ValueKind.INT,
    "drop": ValueKind.NONE,
    "wedge-after": ValueKind.INT,
    "keepalive-race": ValueKind.OPTIONAL_FLOAT,
    "delay": ValueKind.INT,
    "slow-drip": ValueKind.OPTIONAL_INT,
    "idle-cut": ValueKind.FLOAT,
}

RELAY_FAULTS: dict[str, ValueKind] = {
    "pass": ValueKind.NONE,
    "freeze": ValueKind.NONE,
    "half-open": ValueKind.NONE,
    "reset": ValueKind.NONE,
    "slicer": ValueKind.OPTIONAL_INT,
    "limit-data": ValueKind.INT,
    "latency": ValueKind.INT,
}

SLOW_DRIP_DEFAULT_MS = 200

# Extra KEY=VALUE options the HTTP layer understands: path=/v1/chat limits the fault (and its
# request counting) to paths with that prefix, so health checks and model lists do not count as rounds.
PROXY_PARAMS = ("path",)


def parse_proxy_fault(text: str) -> FaultSpec:
    """Parse an HTTP-layer fault spec; raises FaultSpecError with a one-line message."""
    spec = parse_fault_spec(text, PROXY_FAULTS, what="proxy fault")
    if spec.name == "wedge-after" and spec.after_requests:
        raise FaultSpecError(
            f"proxy fault {text!r}: wedge-after=N already says after how many requests; drop the after= option"
        )
    unknown = sorted(set(spec.params) - set(PROXY_PARAMS))
    if unknown:
        raise FaultSpecError(
            f"proxy fault {text!r}: unknown option {unknown[0]!r}; options are after=, per= and path="
        )
    if "path" in spec.params and not spec.params["path"].startswith("/"):
        raise FaultSpecError(f"proxy fault {text!r}: path must start with '/', e.g. path=/v1/chat/completions")
    if spec.name == "idle-cut" and not spec.value:
        raise FaultSpecError(f"proxy fault {text!r}: idle-cut needs a positive number of seconds, e.g. idle-cut=2")
    return spec


def parse_relay_fault(text: str) -> FaultSpec:
    """Parse a TCP-layer (relay) fault spec; raises FaultSpecError with a one-line message."""
    spec = parse_fault_spec(text, RELAY_FAULTS, what="relay fault")
    if spec.params or spec.per_connection:
        extra = next(iter(spec.params), "per")
        raise FaultSpecError(f"relay fault {text!r}: the TCP layer takes only after=N (connections) or after=Ts, not {extra}=")
    return spec


__all__ = ["PROXY_FAULTS", "RELAY_FAULTS", "FaultSpec", "FaultSpecError", "parse_proxy_fault", "parse_relay_fault"]
