"""What to do about each `repro audit` finding, and what to check for a note: the setting to
change, on which hop, to what value, and how to confirm it. One place for all of it, as
next_actions.py is for verdicts. Pure (no I/O).

A hop's software is read from the Server header it answered with (`software_of`); where it is not
known, the advice names the kind of setting, never a product's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from repro.core.next_actions import BODY_LIMIT_KNOB


@dataclass(frozen=True)
class AuditAction:
    do: str  # what to change, on which hop, to what value
    confirm: str  # what to run to see it is fixed

    def to_dict(self) -> dict[str, str]:
        return {"do": self.do, "confirm": self.confirm}


# Where each client library sets how long its pool keeps an idle connection.
CLIENT_POOL_KNOB = {"aiohttp": "aiohttp.TCPConnector(keepalive_timeout=...)",
                    "httpx": "httpx.Limits(keepalive_expiry=...)",
                    "openai": "the openai SDK's http_client, httpx.Limits(keepalive_expiry=...)",
                    "openai-async": "the openai SDK's http_client, httpx.Limits(keepalive_expiry=...)"}
# Where each server sets how long it keeps idle pooled connections to the hop behind it.
UPSTREAM_POOL_KNOB = {
    "nginx": "nginx's keepalive_timeout in its upstream block (default 60 s; it applies only when that block "
             "has `keepalive N`: without it nginx opens a new upstream connection for each request and reuses none)",
    "caddy": "Caddy's reverse_proxy transport http keepalive (default 2 min)",
    "envoy": "Envoy's cluster common_http_protocol_options idle_timeout (default 1 h)",
}
# Where each server sets how long it waits for the hop behind's next byte before it cuts the answer.
IDLE_READ_KNOB = {"nginx": "nginx: proxy_read_timeout, default 60 s", "caddy": "Caddy: reverse_proxy read_timeout",
                  "envoy": "Envoy: the route's timeout and idle_timeout"}


def software_of(server_header: str | None) -> str | None:
    """The product a Server header names, lower case ("nginx/1.22.1" -> "nginx"); None when absent."""
    if not server_header or not server_header.split():
        return None
    return server_header.split()[0].split("/")[0].lower() or None


def below(timeout_s: float) -> float:
    """A value clear of a timeout of `timeout_s`: four fifths of it, to a tenth of a second."""
    return max(0.1, math.floor(timeout_s * 8) / 10)


def client_pool_action(client: str, hop: str, timeout_s: float, idle_s: float) -> AuditAction:
    value = below(timeout_s)
    knob = CLIENT_POOL_KNOB.get(client, "its pool's idle timeout")
    return AuditAction(
        do=f"set {client}'s pool idle time below {hop}'s keep-alive of {timeout_s:.1f} s, e.g. {value:g} s "
           f"({knob}); or raise {hop}'s keep-alive timeout above {idle_s:g} s",
        confirm=f"repro audit with the same hops and --client-idle {value:g}: no keepalive-mismatch at {hop}")


def upstream_pool_action(front: str, software: str | None, behind: str, timeout_s: float,
                         idle_s: float) -> AuditAction:
    value = below(timeout_s)
    knob = UPSTREAM_POOL_KNOB.get(software or "", f"how long {front} keeps idle connections to {behind}")
    return AuditAction(
        do=f"set {front}'s idle time for its pooled connections to {behind} below {behind}'s keep-alive of "
           f"{timeout_s:.1f} s, e.g. {value:g} s ({knob}); or raise {behind}'s keep-alive timeout above {idle_s:g} s",
        confirm=f"repro audit with the same hops and --upstream-keepalive {front}={value:g}: no keepalive-mismatch "
                f"at {behind}")


def upstream_pool_check(front: str, software: str | None, behind: str) -> AuditAction:
    """What to read for a mismatch resting on an assumed upstream pool: the setting, then the audit again."""
    knob = UPSTREAM_POOL_KNOB.get(software or "", f"how long {front} keeps idle connections to {behind} "
                                                  "(its upstream pool's idle timeout)")
    return AuditAction(do=f"read {knob}",
                       confirm=f"repro audit with the same hops and --upstream-keepalive {front}=SECONDS (the value "
                               "read): a finding if it outlives the hop behind's keep-alive")


def body_limit_action(hop: str, software: str | None, needed_bytes: int, needed: str, horizon: int) -> AuditAction:
    knob = BODY_LIMIT_KNOB.get(software or "", f"{hop}'s request-body limit")
    return AuditAction(
        do=f"raise {hop}'s request-body limit to at least {needed} (round {horizon}'s request at this growth; "
           f"{knob}), or trim or summarise what each round sends",
        confirm=f"repro audit with the same hops: {hop}'s max body above {needed_bytes} B, no body-limit-ahead")


def context_action(hop: str, at: int, needed_tokens: int, horizon: int) -> AuditAction:
    return AuditAction(
        do=f"trim or summarise the conversation's history before round {at}, or serve a model with a context of "
           f"at least {needed_tokens} tokens on {hop} (round {horizon} at this growth)",
        confirm=f"repro audit with the same hops (and --growth-per-round BYTES for a trimmed history): no "
                f"context-limit-ahead at {hop}")


def cancel_action(hop: str, did_not_pass_on: bool, deadline_s: float) -> AuditAction:
    if did_not_pass_on:
        do = (f"make {hop} close its connection to the hop behind when its client closes (it did not pass the "
              f"close on); restart what behind it still counts the cancelled streams")
    else:
        do = (f"upgrade or fix {hop} so that it frees a request whose client closed the connection (it still "
              f"counted one {deadline_s:g} s after); restart it to free what it holds")
    return AuditAction(do=do, confirm=f"repro audit with the same hops: {hop}'s cancel column a release time "
                                      f"below {deadline_s:g} s, not kept")


def idle_stream_action(hop: str, software: str | None, budget_s: float) -> AuditAction:
    knob = IDLE_READ_KNOB.get(software or "", f"{hop}'s read or idle timeout towards the hop behind it")
    return AuditAction(
        do=f"raise {hop}'s idle timeout for an answer with no byte yet above {budget_s:g} s, the time to first "
           f"token a long context may take ({knob})",
        confirm=f"repro audit with the same hops, the engine being repro sim: {hop}'s idle cut none")
