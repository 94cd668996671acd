"""When a fault met the harness and what the harness did next, read from the fault proxy's flow log.

Pure: the flow log's records in (proxies/flowlog.py: `t_mono`, `flow`, `client`, `event`, ...),
and the harness's start and exit on the same clock (time.monotonic(): the proxy runs in our process).
Only the agent's generation requests count (chat completions, Messages, Responses, completions):
a model list or a health check is not a round. A flow whose `request_seen` says `canary` is one of
repro's own canaries (a judgement's, through the proxy: repro.core.hung_judgement), never the
harness's: it is no request, retry or connection of the harness's.

- The fault's moment: the first flow the proxy applied the fault to; when the engine plays it,
  the first generation flow that did not end well (a status other than 200, or no clean end).
- What the harness did next: the first generation request it sent after that flow began, on the
  same client connection (a retry there) or a new one; or nothing (it exited, or waited).
- When it noticed: the first of that next request, its giving up on the faulted flow (it closed
  the connection: the proxy saw a disconnect) and its exit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

GENERATION_PATHS = ("/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/completions")


@dataclass(frozen=True)
class FlowFacts:
    requests: int                       # generation requests the harness sent
    connections: int                    # client connections they came on
    fault_at: float | None = None       # when the fault met the harness (None: it never did)
    next_request_at: float | None = None  # its first generation request after the fault
    same_connection: bool | None = None   # that request came on the faulted flow's connection
    gave_up_at: float | None = None     # it closed the faulted flow's connection itself
    retries: int = 0                    # generation requests after the fault
    through: int = 0                    # of those, how many the engine answered well (200, a clean end)
    largest_request_bytes: int | None = None  # the largest generation request body forwarded upstream

    def noticed_at(self, exited_at: float | None, stopped_at: float | None = None) -> float | None:
        """The harness's first reaction to the fault: a new request, giving up, or its exit; a
        connection closed once we began to stop it (`stopped_at`) is our doing, not its."""
        if self.fault_at is None:
            return None
        moments = [t for t in (self.next_request_at, self.gave_up_at, exited_at) if t is not None
                   and t >= self.fault_at and (stopped_at is None or t < stopped_at)]
        return min(moments) if moments else None

    @property
    def how(self) -> str:
        """How it went on after the fault: "same connection", "new connection" or "" (it did not)."""
        if self.same_connection is None:
            return ""
        return "same connection" if self.same_connection else "new connection"


def _is_generation(path: Any) -> bool:
    return isinstance(path, str) and path.split("?")[0] in GENERATION_PATHS


def _is_canary(events: list[Mapping[str, Any]]) -> bool:
    """One of repro's canaries: the proxy marked its request (it carried x-repro-canary)."""
    return any(e.get("event") == "request_seen" and e.get("canary") is True for e in events)


def _flows(records: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    flows: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        if record.get("flow"):
            flows.setdefault(record["flow"], []).append(record)
    return flows


def _ended_badly(events: list[Mapping[str, Any]]) -> bool:
    """A flow the engine did not answer well: a status other than 200, or no clean end."""
    statuses = [e.get("status") for e in events if e.get("event") in ("response_headers", "closed") and "status" in e]
    clean = any(e.get("event") == "closed" and e.get("outcome") in ("ok", "answered") for e in events)
    return not clean or any(status != 200 for status in statuses)


def read_flow_facts(records: Iterable[Mapping[str, Any]], *, engine_fault: bool) -> FlowFacts:
    """The facts of one harness run through the proxy; `engine_fault`: the engine plays the fault
    (its moment is then the first generation flow that ended badly), else the proxy."""
    flows = _flows(records)
    seen = sorted(((events[0]["t_mono"], flow, events) for flow, events in flows.items()
                   if events[0].get("event") == "request_seen" and _is_generation(events[0].get("path"))
                   and not _is_canary(events)),
                  key=lambda item: item[0])
    sizes = [e["request_bytes"] for _, _, events in seen for e in events
             if e.get("event") == "forwarded" and isinstance(e.get("request_bytes"), int)]
    facts = {"requests": len(seen), "connections": len({events[0].get("client") for _, _, events in seen}),
             "largest_request_bytes": max(sizes) if sizes else None}
    faulted = next(((t, events) for t, _, events in seen
                    if (_ended_badly(events) if engine_fault else any(e.get("event") == "fault_applied" for e in events))),
                   None)
    if faulted is None:
        return FlowFacts(**facts)
    began, events = faulted
    fault_at = next((e["t_mono"] for e in events if e.get("event") == "fault_applied"), began)
    after = [(t, other) for t, _, other in seen if t > began]
    client = events[0].get("client")
    gave_up = next((e["t_mono"] for e in events
                    if (e.get("event") == "released" and e.get("reason") == "disconnect")
                    or (e.get("event") == "closed" and e.get("outcome") == "error")), None)
    return FlowFacts(**facts, fault_at=fault_at, next_request_at=after[0][0] if after else None,
                     same_connection=(after[0][1][0].get("client") == client) if after else None,
                     gave_up_at=gave_up, retries=len(after),
                     through=sum(1 for _, other in after if not _ended_badly(other)))
