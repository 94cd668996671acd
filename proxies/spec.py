"""The faults the proxy layers understand: one table per layer, parsed with the shared grammar
(repro.core.faultspec).

HTTP_FAULTS says, for each mitmproxy-addon fault, what VALUE it takes, where in a flow it acts
and what it does there; the addon's hooks read those properties, never the names. TCP_FAULTS
lists the relay's socket faults, named after Toxiproxy toxics. PROXY_FAULTS and RELAY_FAULTS
(name -> ValueKind, what the grammar needs) and the help of `repro proxy` come from these tables.
This module imports no mitmproxy, so the CLI can parse and list faults without loading it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from repro.core.faultspec import FaultSpec, FaultSpecError, ValueKind, parse_fault_spec

# Every hold ends by this many seconds at the latest (the flow is then killed), so a forgotten
# proxy never holds a client forever; `repro proxy --hold-max` and the repro_hold_max option change it.
DEFAULT_HOLD_MAX_S = 600


class Stage(Enum):
    """Where in a flow an HTTP fault acts, in the order a flow gets there.

    A hold is logged with its stage's value (repro.core.classify reads "held-request" and the
    like from the flow log), so the values are part of the log format.
    """

    REUSE = "reuse"  # a kept-alive client connection carries another request (requestheaders)
    REQUEST = "request"  # the request was read and is not upstream yet (request)
    RESPONSE = "response"  # the engine answered; the client has nothing yet (responseheaders)
    STREAM = "stream"  # the response body, SSE event by SSE event (the stream callable)
    EOM = "eom"  # the body was forwarded, its end not yet sent (response)


class Action(Enum):
    """What an HTTP fault does at its stage."""

    PASS = "pass"
    HOLD = "hold"  # wait for a release; only an admin release lets the flow go on, else it is killed
    KILL = "kill"  # close the client connection
    DELAY = "delay"  # wait VALUE milliseconds, then go on
    BUFFER = "buffer"  # read the whole body before sending any of it
    DRIP = "drip"  # send each SSE event VALUE milliseconds after the one before
    # from the request on, close the client connection once upstream was silent VALUE seconds (as nginx, ALB)
    IDLE_CUT = "idle-cut"
    # answer the request ourselves with an error status (VALUE), never forwarding it upstream: a
    # rate limit (429 with Retry-After), an overloaded or unavailable gateway (529, 503)
    RESPOND = "respond"
    # answer 413 ourselves when the request body is over VALUE bytes (a gateway's body limit, nginx's
    # client_max_body_size): an agent's history grows each round until one crosses it
    REFUSE_LARGE = "refuse-large"


@dataclass(frozen=True)
class Fault:
    name: str
    value: ValueKind
    help: str  # one line: what a client behind the fault sees
    metavar: str = ""  # VALUE's name in the help, e.g. K in truncate-hold=K
    default: float = 0  # VALUE when it is left out (or 0)

    @property
    def usage(self) -> str:
        if self.value is ValueKind.NONE:
            return self.name
        if self.value in (ValueKind.OPTIONAL_INT, ValueKind.OPTIONAL_FLOAT):
            return f"{self.name}[={self.metavar}]"
        return f"{self.name}={self.metavar}"

    @property
    def description(self) -> str:
        return self.help + (f" (default {self.default:g})" if self.default else "")

    def value_of(self, spec: FaultSpec) -> float:
        return spec.value or self.default


@dataclass(frozen=True)
class HttpFault(Fault):
    stage: Stage | None = None  # None: acts nowhere (pass)
    action: Action = Action.PASS
    value_is_after: bool = False  # VALUE is the after=N count itself (wedge-after=N)
    per_connection: bool = False  # requests are counted per client connection unless per= says otherwise
    positive: bool = False  # VALUE must be above 0
    options: tuple[str, ...] = ()  # KEY=VALUE options of this fault alone (beside after=, per=, path=)
    statuses: tuple[int, int] | None = None  # VALUE is an HTTP status in this range (inclusive)

    @property
    def truncates(self) -> bool:
        """HOLD or KILL in the stream act after VALUE events, and the rest of the body is dropped."""
        return self.stage is Stage.STREAM and self.action in (Action.HOLD, Action.KILL)


HTTP_FAULTS: tuple[HttpFault, ...] = (
    HttpFault("pass", ValueKind.NONE, "forward everything, event by event (a healthy proxy)"),
    HttpFault("buffer", ValueKind.NONE, "buffer the whole response, then send it (TTFT = total)",
              stage=Stage.RESPONSE, action=Action.BUFFER),
    HttpFault("hold-request", ValueKind.NONE, "read the request, never forward it upstream",
              stage=Stage.REQUEST, action=Action.HOLD),
    HttpFault("hold-response", ValueKind.NONE, "forward; let the engine finish; withhold the headers",
              stage=Stage.RESPONSE, action=Action.HOLD),
    HttpFault("truncate-hold", ValueKind.INT, "pass K SSE events, drop the rest, withhold the end",
              metavar="K", stage=Stage.STREAM, action=Action.HOLD),
    HttpFault("hold-eom", ValueKind.NONE, "pass every event incl. [DONE], withhold the body's end",
              stage=Stage.EOM, action=Action.HOLD),
    HttpFault("truncate-reset", ValueKind.INT, "pass K SSE events, then close the connection",
              metavar="K", stage=Stage.STREAM, action=Action.KILL),
    HttpFault("drop", ValueKind.NONE, "close the connection; the request never goes upstream",
              stage=Stage.REQUEST, action=Action.KILL),
    HttpFault("wedge-after", ValueKind.INT, "per connection: N requests pass, later ones are held",
              metavar="N", stage=Stage.REQUEST, action=Action.HOLD, value_is_after=True, per_connection=True),
    HttpFault("keepalive-race", ValueKind.OPTIONAL_FLOAT, "close a kept-alive connection on reuse (after S s idle)",
              metavar="S", stage=Stage.REUSE, action=Action.KILL),
    HttpFault("delay", ValueKind.INT, "hold each request MS milliseconds, then forward it",
              metavar="MS", stage=Stage.REQUEST, action=Action.DELAY),
    HttpFault("slow-drip", ValueKind.OPTIONAL_INT, "space SSE events MS milliseconds apart",
              metavar="MS", default=200, stage=Stage.STREAM, action=Action.DRIP),
    HttpFault("idle-cut", ValueKind.FLOAT, "close a stream after S seconds of upstream silence",
              metavar="S", stage=Stage.REQUEST, action=Action.IDLE_CUT, positive=True),
    HttpFault("status", ValueKind.INT, "answer CODE (a short JSON error), never forward; retry-after=S",
              metavar="CODE", stage=Stage.REQUEST, action=Action.RESPOND, options=("retry-after",),
              statuses=(400, 599)),
    HttpFault("body-limit", ValueKind.INT, "answer 413 to a request body over BYTES, never forward it",
              metavar="BYTES", stage=Stage.REQUEST, action=Action.REFUSE_LARGE, positive=True),
)

# Byte-level and not round-aware: after=N counts connections. Why each one behaves as it does
# (and where it differs from its Toxiproxy namesake) is in proxies.relay.
TCP_FAULTS: tuple[Fault, ...] = (
    Fault("pass", ValueKind.NONE, "relay bytes unchanged"),
    Fault("freeze", ValueKind.NONE, "stop reading both ways: buffers fill, writes block"),
    Fault("half-open", ValueKind.NONE, "swallow everything both ways, never send FIN or RST"),
    Fault("reset", ValueKind.NONE, "close with RST on the client's first bytes"),
    Fault("slicer", ValueKind.OPTIONAL_INT, "server->client writes of BYTES, 1 ms apart",
          metavar="BYTES", default=8),
    Fault("limit-data", ValueKind.INT, "pass BYTES server->client per connection, then close",
          metavar="BYTES"),
    Fault("latency", ValueKind.INT, "delay each server->client chunk by MS milliseconds",
          metavar="MS"),
)

HTTP_FAULT: dict[str, HttpFault] = {f.name: f for f in HTTP_FAULTS}
TCP_FAULT: dict[str, Fault] = {f.name: f for f in TCP_FAULTS}
PROXY_FAULTS: dict[str, ValueKind] = {f.name: f.value for f in HTTP_FAULTS}
RELAY_FAULTS: dict[str, ValueKind] = {f.name: f.value for f in TCP_FAULTS}

# Extra KEY=VALUE options the HTTP layer understands: path=/v1/chat limits the fault (and its
# request counting) to paths with that prefix, so health checks and model lists do not count as rounds;
# times=K clears the fault after it has met K requests (a transient 429 or one wedged connection), so
# a harness that retries can be seen to recover.
PROXY_PARAMS = ("path", "times")


def parse_proxy_fault(text: str) -> FaultSpec:
    """Parse an HTTP-layer fault spec; raises FaultSpecError with a one-line message."""
    spec = parse_fault_spec(text, PROXY_FAULTS, what="proxy fault")
    fault = HTTP_FAULT[spec.name]
    if fault.value_is_after and spec.after_requests:
        raise FaultSpecError(
            f"proxy fault {text!r}: {spec.name}={fault.metavar} already says after how many requests; "
            "drop the after= option"
        )
    unknown = sorted(set(spec.params) - set(PROXY_PARAMS) - set(fault.options))
    if unknown:
        own = "".join(f", {option}=" for option in fault.options)
        raise FaultSpecError(
            f"proxy fault {text!r}: unknown option {unknown[0]!r}; options are after=, per=, path=, times={own}"
        )
    _check_own_options(text, spec, fault)
    if "path" in spec.params and not spec.params["path"].startswith("/"):
        raise FaultSpecError(f"proxy fault {text!r}: path must start with '/', e.g. path=/v1/chat/completions")
    times = spec.params.get("times")
    if times is not None and not (times.isdigit() and int(times) > 0):
        raise FaultSpecError(f"proxy fault {text!r}: times must be a whole number of requests above 0, e.g. times=2")
    if fault.positive and not spec.value:
        raise FaultSpecError(f"proxy fault {text!r}: {spec.name} needs a positive number, e.g. {spec.name}=2")
    return spec


def _check_own_options(text: str, spec: FaultSpec, fault: HttpFault) -> None:
    """The status range of status=CODE and the number of retry-after=S."""
    if fault.statuses is not None and spec.value is not None:
        low, high = fault.statuses
        if not low <= spec.value <= high:
            raise FaultSpecError(f"proxy fault {text!r}: {spec.name} takes an HTTP error status from {low} to "
                                 f"{high}, e.g. {spec.name}=429")
    if "retry-after" in spec.params:
        try:
            seconds = float(spec.params["retry-after"])
        except ValueError:
            seconds = -1.0
        if not 0 <= seconds < 86400:
            raise FaultSpecError(f"proxy fault {text!r}: retry-after must be seconds (0 or more), "
                                 f"e.g. retry-after=2")


def retry_after(spec: FaultSpec) -> str | None:
    """The Retry-After header's value a status fault sends (whole seconds, as HTTP's delta-seconds), if any."""
    raw = spec.params.get("retry-after")
    return None if raw is None else str(max(0, round(float(raw))))


def parse_relay_fault(text: str) -> FaultSpec:
    """Parse a TCP-layer (relay) fault spec; raises FaultSpecError with a one-line message."""
    spec = parse_fault_spec(text, RELAY_FAULTS, what="relay fault")
    if spec.params or spec.per_connection:
        extra = next(iter(spec.params), "per")
        raise FaultSpecError(f"relay fault {text!r}: the TCP layer takes only after=N (connections) or after=Ts, not {extra}=")
    return spec


__all__ = ["DEFAULT_HOLD_MAX_S", "HTTP_FAULT", "HTTP_FAULTS", "PROXY_FAULTS", "RELAY_FAULTS", "TCP_FAULT",
           "TCP_FAULTS", "Action", "Fault", "FaultSpec", "FaultSpecError", "HttpFault", "Stage",
           "parse_proxy_fault", "parse_relay_fault", "retry_after"]
