"""The closed vocabularies of the verdict contract, as types a checker and a reader can follow."""

from __future__ import annotations

from typing import Literal, get_args

Side = Literal["client", "server", "unknown"]
Confidence = Literal["high", "medium", "low"]
Phase = Literal["before-first-byte", "mid-stream", "after-last-event"]
Role = Literal["proxy", "router", "engine"]
Kind = Literal[
    "client-overloaded",
    "judge-overloaded",
    "client-queued",
    "harness-idle",
    "round-deadline",
    "connection-wedged",
    "request-withheld",
    "response-withheld",
    "engine-hung",
    "engine-saturated",
    "engine-overloaded",
    "engine-slow",
    "engine-frontend-lost",
    "engine-unreachable",
    "engine-unresponsive",
    "hop-unresponsive",
    "hop-unreachable",
    "hop-error",
    "engine-error",
    "keepalive-race",
    "connection-reset",
    "request-rejected",
    "tls-rejected",
    "request-too-large",
    "context-exceeded",
    "rate-limited",
    "no-evidence",
]
# How a fresh canary failed, decided where the failure happened (probes/canary.py), never by
# reading an error message: connect (refused, unreachable, or no connection in time), timeout (a
# connection, then no answer in time), http (an answer other than 200), stream (200, then no
# token or no end), reset (the peer closed or reset the connection mid-answer), tls (our client
# rejected the hop's certificate, or the handshake failed: `TlsReason` says why).
CanaryFailure = Literal["connect", "timeout", "http", "stream", "reset", "tls"]
# How a round failed (events.RoundFailed.failure), decided by the driver where it happened.
RoundFailure = Literal["http", "connect", "connect-timeout", "reset", "early-close", "truncated", "timeout", "stream",
                       "deadline", "client-wait", "tls"]
# Why a TLS handshake failed (repro/io/tls.py): the certificate's issuer is not trusted here, its
# name does not match the host, it expired or is not yet valid, or the handshake itself failed.
TlsReason = Literal["unknown-ca", "name-mismatch", "expired", "not-yet-valid", "handshake"]
TLS_REASON_WORDS: dict[str, str] = {
    "unknown-ca": "unknown CA: its issuer is not trusted here",
    "name-mismatch": "name mismatch: the certificate is not valid for this host",
    "expired": "expired certificate",
    "not-yet-valid": "certificate not yet valid",
    "handshake": "TLS handshake failed",
}

ROLES: tuple[str, ...] = get_args(Role)
PHASES: tuple[str, ...] = get_args(Phase)
