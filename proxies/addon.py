"""A mitmproxy addon that injects round-aware HTTP faults in front of an LLM engine.

Used in-process by proxies.runner.start_proxy and as a script through proxies/faults.py. Where
each fault acts and what it does there is in proxies.spec.HTTP_FAULTS; when it takes effect, in
proxies.arming; the slow-drip writer, the one part that reaches into mitmproxy, in proxies.drip.

mitmproxy behaviour this relies on:
- Bodies are buffered unless `flow.response.stream` is set in `responseheaders`
  (https://docs.mitmproxy.org/stable/overview-features/#streaming), so every flow gets a stream
  callable here (SSE must flow event by event) except under `buffer`.
- A flow is held by awaiting inside an async hook; we await our own asyncio.Event, never
  flow.intercept(): intercept + kill leaves the client hanging (mitmproxy#8045).
- flow.kill() takes effect only from inside a hook, once it returns (mitmproxy#4711), so kills
  happen inside hooks.
- The stream callable is synchronous: it drops bytes by returning [], never b"": HTTP/1 sends an
  empty chunk as the end of a chunked body (mitmproxy/proxy/layers/http/_http1.py), which would
  end it early and desync the keep-alive connection.
- client_disconnected runs only once the connection's handler has ended, which a pending hook
  prevents (mitmproxy/proxy/server.py), so a hold polls the client connection's state itself to
  notice a client that went away.

Every hold ends on: admin release (the flow continues), client disconnect, proxy shutdown, or the
safety maximum `repro_hold_max` (the flow is killed: the client sees the connection close).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from mitmproxy import exceptions, http
from mitmproxy.connection import ConnectionState

from proxies.arming import Arming
from proxies.drip import Drip, close_client
from proxies.flowlog import EVENTS_LOG_BATCH, EVENTS_LOG_INTERVAL_S, FlowLog
from proxies.metrics import AdminServer, ProxyMetrics
from proxies.spec import (
    DEFAULT_HOLD_MAX_S,
    HTTP_FAULT,
    Action,
    FaultSpec,
    FaultSpecError,
    HttpFault,
    Stage,
    parse_proxy_fault,
    retry_after,
)
from repro.core.canary_outcome import CANARY_HEADER
from repro.core.sse import EventBoundaries

log = logging.getLogger("repro.proxy")

HOLD_POLL_S = 0.25  # how often a hold looks for a client that went away


def client_address(flow: http.HTTPFlow) -> str | None:
    peer = flow.client_conn.peername
    if not peer:
        return None
    host = str(peer[0])
    if host.startswith("::ffff:"):  # IPv4-mapped: the driver knows its socket as 127.0.0.1:port
        host = host[7:]
    return f"{host}:{peer[1]}"


@dataclass
class Hold:
    flow_id: str
    client_id: str
    stage: str
    started: float = field(default_factory=time.monotonic)
    event: asyncio.Event = field(default_factory=asyncio.Event)
    reason: str | None = None


@dataclass
class FlowState:
    flow_id: str
    client: str | None
    client_id: str
    fault: FaultSpec | None
    kind: HttpFault | None  # the fault's row in the table: where it acts and what it does
    boundaries: EventBoundaries = field(default_factory=EventBoundaries)
    events: int = 0
    bytes: int = 0
    pending_events: int = 0
    last_events_log: float = field(default_factory=time.monotonic)
    last_activity: float = field(default_factory=time.monotonic)
    truncated: bool = False
    hold: Hold | None = None
    closed: bool = False
    watchdog: asyncio.Task | None = None
    drip: Drip | None = None
    answered: bool = False  # the proxy answered it itself (status, body-limit): nothing went upstream

    def action_at(self, stage: Stage) -> Action | None:
        """What the flow's fault does at `stage`, if it acts there."""
        return self.kind.action if self.kind is not None and self.kind.stage is stage else None


class FaultProxyAddon:
    """The fault-injecting addon. Thread-safe control: arm(), disarm(), release(), state()."""

    def __init__(self, spec: str | None = None, *, flow_log: str | os.PathLike | None = None,
                 hold_max: float = DEFAULT_HOLD_MAX_S) -> None:
        self.metrics = ProxyMetrics()
        self.flow_log = FlowLog(flow_log)
        self.hold_max = float(hold_max)
        self.arming: Arming | None = Arming(parse_proxy_fault(spec), time.monotonic()) if spec else None
        self.flows: dict[str, FlowState] = {}
        self.holds: dict[str, Hold] = {}
        self.conn_requests: dict[str, int] = {}  # requests ever seen per client connection
        self.conn_idle_since: dict[str, float] = {}  # when the connection's last response ended
        self.admin: AdminServer | None = None
        self.master = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self.metrics.set_armed(self.arming.spec.name if self.arming else None)

    # --- mitmproxy lifecycle ---------------------------------------------------------------

    def load(self, loader) -> None:
        self.master = getattr(loader, "master", None)
        loader.add_option("repro_fault", str, "", "fault spec, e.g. wedge-after=2 (empty: pass-through)")
        loader.add_option("repro_flow_log", str, "", "append a JSON Lines flow log to this file")
        loader.add_option("repro_metrics_port", int, 0,
                          "metrics + admin port on 127.0.0.1 (0: a free port, -1: none)")
        loader.add_option("repro_hold_max", int, DEFAULT_HOLD_MAX_S,
                          "release any held flow after this many seconds (a safety net)")
        self._remember_loop()

    def configure(self, updated: set[str]) -> None:
        options = self.master.options if self.master is not None else None
        if options is None:
            return
        if "repro_fault" in updated and options.repro_fault:
            try:
                self._arm(parse_proxy_fault(options.repro_fault))
            except FaultSpecError as exc:
                raise exceptions.OptionsError(str(exc)) from None
        if "repro_flow_log" in updated and options.repro_flow_log:
            self.flow_log.close()
            self.flow_log = FlowLog(options.repro_flow_log)
        if "repro_hold_max" in updated:
            if options.repro_hold_max <= 0:
                raise exceptions.OptionsError(f"repro_hold_max must be positive, got {options.repro_hold_max}")
            self.hold_max = float(options.repro_hold_max)

    def running(self) -> None:
        self._remember_loop()
        options = self.master.options if self.master is not None else None
        port = options.repro_metrics_port if options is not None else -1
        if port >= 0 and self.admin is None:
            self.admin = AdminServer(self.metrics, self, port=port)
            # the subprocess runner waits for this line; keep its wording stable
            log.warning(f"repro proxy metrics at {self.admin.metrics_url}")

    def done(self) -> None:
        self._release_all("shutdown")
        if self.admin is not None:
            self.admin.stop()
            self.admin = None
        self.flow_log.close()

    def client_disconnected(self, client) -> None:
        for hold in list(self.holds.values()):
            if hold.client_id == client.id:
                self._release(hold, "disconnect")
        self.conn_requests.pop(client.id, None)
        self.conn_idle_since.pop(client.id, None)
        if self.arming is not None:
            self.arming.forget(client.id)

    # --- HTTP hooks --------------------------------------------------------------------------

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        self._remember_loop()
        client_id = flow.client_conn.id
        reused = self.conn_requests.get(client_id, 0) > 0
        self.conn_requests[client_id] = self.conn_requests.get(client_id, 0) + 1
        now = time.monotonic()
        # A canary of repro's is faulted as the fault stands, not counted toward it (proxies/arming.py).
        counted = CANARY_HEADER not in flow.request.headers
        armed = self.arming is not None and self.arming.decide(client_id, flow.request.path, now, counted=counted)
        fault = self.arming.spec if armed else None
        st = FlowState(flow.id, client_address(flow), client_id, fault, HTTP_FAULT[fault.name] if fault else None)
        self.flows[flow.id] = st
        self.metrics.open_flows.inc()
        self.metrics.requests.inc()
        self._log(st, "request_seen", method=flow.request.method, path=flow.request.path.split("?")[0],
                  request_on_conn=self.conn_requests[client_id], canary=True if not counted else None)
        if st.action_at(Stage.REUSE) is Action.KILL and reused:
            idle = now - self.conn_idle_since.get(client_id, now)
            if idle >= st.kind.value_of(fault):
                self._applied(st, idle_s=round(idle, 3))
                self._kill(flow, st)  # as if the server closed the idle connection just as it was reused

    async def request(self, flow: http.HTTPFlow) -> None:
        st = self.flows.get(flow.id)
        if st is None or st.closed:
            return
        if not await self._act(flow, st, Stage.REQUEST):
            return
        st.last_activity = time.monotonic()
        self._log(st, "forwarded", request_bytes=len(flow.request.raw_content or b""))

    async def responseheaders(self, flow: http.HTTPFlow) -> None:
        st = self.flows.get(flow.id)
        if st is None or st.closed:
            return
        st.last_activity = time.monotonic()
        self._log(st, "response_headers", status=flow.response.status_code)
        if st.answered:
            return  # our own short answer (mitmproxy emulates this hook for it): nothing to stream
        if st.action_at(Stage.RESPONSE) is Action.BUFFER:
            self._applied(st)  # no stream: mitmproxy reads the whole body before sending any of it
            return
        if st.action_at(Stage.STREAM) is Action.DRIP:
            ms = st.kind.value_of(st.fault)
            st.drip = Drip.attach(self.master, flow, float(ms) / 1000,
                                  lambda events, nbytes: self._count(st, events, nbytes))
            if st.drip is not None:
                self._applied(st, per_event_ms=ms)
        flow.response.stream = StreamTap(self, st)
        await self._act(flow, st, Stage.RESPONSE)

    async def response(self, flow: http.HTTPFlow) -> None:
        """For a streamed response this runs after the body was forwarded, before its end is sent."""
        st = self.flows.get(flow.id)
        if st is None or st.closed:
            return
        if st.answered:
            self.conn_idle_since[st.client_id] = time.monotonic()
            self._close(st, outcome="answered", status=flow.response.status_code)
            return
        if st.action_at(Stage.RESPONSE) is Action.BUFFER:
            body = flow.response.content or b""
            self._count(st, len(st.boundaries.ends(body)), len(body))
        if st.drip is not None:
            await st.drip.finish()
        self._flush_events(st)
        if st.truncated:
            if st.kind.action is Action.HOLD:
                await self._hold(flow, st, "response", hold=st.hold)
            self._kill(flow, st)  # the body was cut: never end it cleanly, even on admin release
            return
        if not await self._act(flow, st, Stage.EOM):
            return
        self.conn_idle_since[st.client_id] = time.monotonic()
        self._close(st, outcome="ok", status=flow.response.status_code)

    def error(self, flow: http.HTTPFlow) -> None:
        st = self.flows.get(flow.id)
        if st is None:
            return
        if st.hold is not None:
            self._release(st.hold, "disconnect")
            self._end_hold(st)
        self._close(st, outcome="error", error=flow.error.msg if flow.error else None)

    # --- faults ----------------------------------------------------------------------------------

    async def _act(self, flow: http.HTTPFlow, st: FlowState, stage: Stage) -> bool:
        """Apply the flow's fault if it holds, kills, delays or starts a watch at `stage`.

        Returns False if the flow was killed: the hook must stop there. BUFFER and DRIP shape the
        body and are set up by responseheaders itself.
        """
        action = st.action_at(stage)
        if action is Action.KILL:
            self._applied(st)
            self._kill(flow, st)
            return False
        if action is Action.HOLD:
            self._applied(st)
            if await self._hold(flow, st, stage.value) != "admin":
                self._kill(flow, st)
                return False
        elif action is Action.DELAY:
            self._applied(st, delay_ms=st.fault.value)
            await asyncio.sleep(float(st.kind.value_of(st.fault)) / 1000)
        elif action is Action.RESPOND:
            self._answer(flow, st, int(st.fault.value))
        elif action is Action.REFUSE_LARGE:
            size = len(flow.request.raw_content or b"")
            if size > int(st.fault.value):
                self._answer(flow, st, 413, body_bytes=size)
        elif action is Action.IDLE_CUT:
            # the watch first runs after request() has returned, so it counts from the forwarding
            st.watchdog = asyncio.ensure_future(self._idle_watch(flow, st, float(st.kind.value_of(st.fault))))
        return True

    def _answer(self, flow: http.HTTPFlow, st: FlowState, status: int, **fields: Any) -> None:
        """Answer `status` ourselves (mitmproxy then sends it and never connects upstream)."""
        wait = retry_after(st.fault)
        # x-repro-fault: its own answer says so, as smg's x-smg-error-code does (repro.core.error_shapes):
        # the short JSON looks like an engine's, and the judge must not place it behind the proxy.
        flow.response = http.Response.make(status, error_json(flow.request.path, status),
                                           {"content-type": "application/json", FAULT_HEADER: st.fault.name,
                                            **({"retry-after": wait} if wait is not None else {})})
        st.answered = True
        self._applied(st, status=status, **fields)

    # --- holds ---------------------------------------------------------------------------------

    def _begin_hold(self, st: FlowState, stage: str) -> Hold:
        self._flush_events(st)
        st.hold = hold = Hold(st.flow_id, st.client_id, stage)
        self.holds[st.flow_id] = hold
        self.metrics.held_flows.inc()
        self._log(st, "held", stage=stage)
        return hold

    async def _hold(self, flow: http.HTTPFlow, st: FlowState, stage: str, hold: Hold | None = None) -> str:
        """Hold the flow until released; returns why: admin, disconnect, shutdown or max."""
        hold = hold or self._begin_hold(st, stage)
        deadline = hold.started + self.hold_max
        while not hold.event.is_set():
            if not (flow.client_conn.state & ConnectionState.CAN_READ):
                self._release(hold, "disconnect")
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._release(hold, "max")
                break
            try:
                await asyncio.wait_for(hold.event.wait(), min(HOLD_POLL_S, remaining))
            except TimeoutError:
                pass
        self._end_hold(st)
        return hold.reason or "admin"

    def _end_hold(self, st: FlowState) -> None:
        hold = st.hold
        if hold is None or self.holds.pop(st.flow_id, None) is None:
            return
        self.metrics.held_flows.dec()
        self._log(st, "released", stage=hold.stage, reason=hold.reason,
                  held_s=round(time.monotonic() - hold.started, 3))

    @staticmethod
    def _release(hold: Hold, reason: str) -> None:
        if not hold.event.is_set():
            hold.reason = reason
            hold.event.set()

    def _release_all(self, reason: str) -> int:
        holds = list(self.holds.values())
        for hold in holds:
            self._release(hold, reason)
        return len(holds)

    def _kill(self, flow: http.HTTPFlow, st: FlowState) -> None:
        if flow.killable:
            flow.kill()
        self._close(st, outcome="killed")

    # --- streaming -----------------------------------------------------------------------------

    def _truncate(self, st: FlowState) -> None:
        """The first byte past event K was dropped: the client now waits (hold) or will see a reset."""
        st.truncated = True
        self._applied(st, events_passed=st.events)
        if st.kind.action is Action.HOLD:
            self._begin_hold(st, "response")  # the flow log calls a body held mid-stream a held response

    async def _idle_watch(self, flow: http.HTTPFlow, st: FlowState, seconds: float) -> None:
        """Close the client connection once upstream was silent for `seconds`, as nginx/ALB do."""
        while not st.closed:
            wait = st.last_activity + seconds - time.monotonic()
            if wait > 0:
                await asyncio.sleep(min(wait, 0.5))
                continue
            self._applied(st, idle_s=seconds)
            self._flush_events(st)
            if not close_client(self.master, flow):
                log.warning("idle-cut: could not reach the client connection to close it")
            return

    def _count(self, st: FlowState, events: int, nbytes: int) -> None:
        st.events += events
        st.bytes += nbytes
        st.pending_events += events
        st.last_activity = time.monotonic()
        if events:
            self.metrics.events_forwarded.inc(events)
        if nbytes:
            self.metrics.bytes_forwarded.inc(nbytes)
        if st.pending_events >= EVENTS_LOG_BATCH or (
                st.pending_events and time.monotonic() - st.last_events_log >= EVENTS_LOG_INTERVAL_S):
            self._flush_events(st)

    def _flush_events(self, st: FlowState) -> None:
        if st.pending_events:
            self._log(st, "events_forwarded", count=st.pending_events, total=st.events, bytes=st.bytes)
            st.pending_events = 0
        st.last_events_log = time.monotonic()

    # --- bookkeeping -----------------------------------------------------------------------------

    def _applied(self, st: FlowState, **fields: Any) -> None:
        self.metrics.faults_applied.labels(fault=st.fault.name).inc()
        self._log(st, "fault_applied", **fields)

    def _close(self, st: FlowState, **fields: Any) -> None:
        if st.closed:
            return
        st.closed = True
        self._flush_events(st)
        if st.watchdog is not None:
            st.watchdog.cancel()
        if st.drip is not None:
            st.drip.cancel()
        self.flows.pop(st.flow_id, None)
        self.metrics.open_flows.dec()
        self._log(st, "closed", events=st.events, bytes=st.bytes, **fields)

    def _log(self, st: FlowState, event: str, **fields: Any) -> None:
        if st.fault is not None and "fault" not in fields:
            fields["fault"] = st.fault.name
        self.flow_log.write(event, flow=st.flow_id, client=st.client, **fields)

    # --- control (any thread) ------------------------------------------------------------------

    def _remember_loop(self) -> None:
        try:
            self.loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
        except RuntimeError:
            pass

    def _call(self, fn, *args):
        """Run fn on the proxy's loop (its state belongs to that thread) and return its result."""
        loop = self.loop
        if loop is None or loop.is_closed() or not loop.is_running() or threading.get_ident() == self._loop_thread:
            return fn(*args)

        async def call():
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(call(), loop).result(5)

    def _arm(self, spec: FaultSpec | None) -> None:
        passes = spec is None or HTTP_FAULT[spec.name].action is Action.PASS
        self.arming = None if passes else Arming(spec, time.monotonic())
        self.metrics.set_armed(spec.name if spec is not None else None)
        self.flow_log.write("armed" if self.arming else "disarmed", fault=spec.text if spec else None)

    def arm(self, spec: str | None) -> None:
        """Arm a fault from now on (counts for after=N start at zero); None or 'pass' disarms."""
        parsed = parse_proxy_fault(spec) if spec else None  # raise in the caller's thread
        self._call(self._arm, parsed)

    def disarm(self) -> None:
        """New requests pass; flows already held stay held until release()."""
        self._call(self._arm, None)

    def release(self) -> int:
        """Release every held flow (they continue); returns how many."""
        return self._call(self._release_all, "admin")

    def state(self) -> dict[str, Any]:
        def snapshot():
            return {
                "fault": self.arming.spec.text if self.arming else None,
                "open_flows": len(self.flows),
                "held_flows": len(self.holds),
                "held": [{"flow": h.flow_id, "stage": h.stage, "held_s": round(time.monotonic() - h.started, 3)}
                         for h in self.holds.values()],
            }

        return self._call(snapshot)


# The header on every answer the proxy writes itself (never on one it passes on): the fault's name.
FAULT_HEADER = "x-repro-fault"
# What each status means, in the words the OpenAI and Anthropic APIs use for it.
_ERROR_KINDS = {413: ("request_too_large", "request body too large"),
                429: ("rate_limit_error", "rate limit exceeded"),
                503: ("api_error", "service unavailable"),
                529: ("overloaded_error", "overloaded")}


def error_json(path: str, status: int) -> bytes:
    """A short JSON error in the envelope of the API the path belongs to: Anthropic's
    {"type": "error", "error": {...}} for /v1/messages, OpenAI's {"error": {...}} otherwise."""
    # The words a gateway would say, nothing more: a harness shows them, and a table quotes them.
    kind, message = _ERROR_KINDS.get(status, ("api_error", "error"))
    if path.split("?")[0].startswith("/v1/messages"):
        body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return json.dumps(body).encode()


class StreamTap:
    """flow.response.stream callable: counts events and bytes, truncates, hands events to a drip."""

    def __init__(self, addon: FaultProxyAddon, st: FlowState) -> None:
        self.addon, self.st = addon, st
        self.limit = int(st.fault.value) if st.kind is not None and st.kind.truncates else None

    def __call__(self, data: bytes) -> bytes | list[bytes]:
        st = self.st
        if not data:
            return []  # end of message: nothing to add (b"" here is fine, but [] says so)
        st.last_activity = time.monotonic()
        if st.truncated:
            return []
        ends = st.boundaries.ends(data)
        if self.limit is not None:
            allowed = self.limit - st.events
            if len(ends) > allowed or (len(ends) == allowed and (not ends or ends[-1] < len(data))):
                # event K may have ended on a CR that closed the last chunk: its LF still goes out
                cut = ends[allowed - 1] if allowed > 0 else st.boundaries.lf_rest
                self.addon._count(st, max(allowed, 0), cut)
                self.addon._truncate(st)
                return [data[:cut]] if cut else []
        if st.drip is not None:
            st.drip.feed(data, ends)
            return []
        self.addon._count(st, len(ends), len(data))
        return data
