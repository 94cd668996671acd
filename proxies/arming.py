"""When an armed HTTP fault takes effect: after=N requests (globally or per connection), after=Ts;
and, with times=K, when it stops: once K requests have met it (counted the same way).

No clock of its own: the caller passes the times in, so the policy can be tested without sleeping.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proxies.spec import HTTP_FAULT, FaultSpec


@dataclass
class Arming:
    """The armed fault and the request counts that decide when it takes effect."""

    spec: FaultSpec
    armed_at: float  # the caller's clock when the fault was armed
    seen_global: int = 0
    seen_per_conn: dict[str, int] = field(default_factory=dict)
    met: dict[str, int] = field(default_factory=dict)  # requests the fault met, by connection ("" for all)

    @property
    def after_requests(self) -> int:
        return int(self.spec.value) if HTTP_FAULT[self.spec.name].value_is_after else self.spec.after_requests

    @property
    def times(self) -> int | None:
        """How many requests the fault meets before it clears; None: it never clears."""
        raw = self.spec.params.get("times")
        return None if raw is None else int(raw)

    @property
    def per_connection(self) -> bool:
        return self.spec.per_connection or HTTP_FAULT[self.spec.name].per_connection

    def decide(self, client_id: str, path: str, now: float, *, counted: bool = True) -> bool:
        """Count this request (seen at `now`, same clock as armed_at); True if the fault applies to it.
        Not `counted` (a canary of repro's judging a stall): faulted as the fault stands, and neither
        its after=N nor its times=K moved by it, when they count requests across connections. Per
        connection (wedge-after=N) every request counts: a canary that reaches the proxy on a
        connection of rounds (a hop in front pooling its upstream connections) is one of that
        connection's requests, which is what such a fault models."""
        counted = counted or self.per_connection
        prefix = self.spec.params.get("path")
        if prefix and not path.startswith(prefix):
            return False  # not a round: neither counted nor faulted
        count = self.seen_per_conn.get(client_id, 0) if self.per_connection else self.seen_global
        if counted:
            self.seen_global += 1
            self.seen_per_conn[client_id] = self.seen_per_conn.get(client_id, 0) + 1
        if now - self.armed_at < self.spec.after_seconds:
            return False
        if count < self.after_requests:
            return False
        key = client_id if self.per_connection else ""
        met = self.met.get(key, 0)
        if self.times is not None and met >= self.times:
            return False  # cleared: it has met its K requests
        if counted:
            self.met[key] = met + 1
        return True

    def forget(self, client_id: str) -> None:
        """The connection closed; its count is never needed again (connection ids are not reused)."""
        self.seen_per_conn.pop(client_id, None)
        self.met.pop(client_id, None)
