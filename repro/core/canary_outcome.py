"""What a fresh-connection canary found: typed, so that no decision reads an error message."""

from __future__ import annotations

from typing import Any

import msgspec

from repro.core.kinds import CanaryFailure, TlsReason

# The header every canary's generation request carries: a fault proxy of repro's counts no canary
# toward a fault's after=N across connections (a stall judged must not move the round the fault
# meets), and a log reader can tell a canary from a harness's request.
CANARY_HEADER = "x-repro-canary"

class CanaryOutcome(msgspec.Struct, kw_only=True):
    hop: str
    url: str
    api: str = "chat"  # the wire API canaried (repro.core.wire_api): its path is in url
    ok: bool = False
    failure: CanaryFailure | None = None  # how it failed (see repro.core.kinds); None when ok
    status: int | None = None
    connect_s: float | None = None
    first_byte_s: float | None = None
    total_s: float = 0.0
    error: str | None = None  # for people: what failed, in words; never read by a decision
    health_status: int | None = None
    events: int = 0  # SSE events that are progress (the terminal one and keep-alives not counted)
    done: bool = False  # the stream ended ([DONE] or end of body) within the deadline
    # failure "connect": the connection was refused, so nothing listens at the URL's host and port
    # (a stopped process, or a wrong port); False for a connection that timed out or was unreachable.
    refused: bool = False
    tls_reason: TlsReason | None = None  # failure "tls": why the handshake failed
    # An https hop: whether its certificate was checked (False: --insecure); None for plain http.
    tls_verified: bool | None = None
    # failure "http": why the answer says it refused (error_shapes.read_answer's cause: "busy" for
    # an engine's 503 busy JSON or a 529 overloaded_error, "rate", "context", ...); None: not said.
    cause: str | None = None
    # failure "http": the provider whose error the answer quotes (error_shapes.read_answer's relayed:
    # a gateway passing on its upstream's answer, LiteLLM's "OpenAIException - ..."); None: it quotes none.
    relayed: str | None = None
    # failure "http": the kind of hop whose shape the error answer has (error_shapes Said.role:
    # "engine" for an engine's own error JSON, which a proxy passes on unchanged); None: not known.
    answer_role: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)
