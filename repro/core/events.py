"""Everything that happens in a run, as immutable data.

Each event carries `t`: seconds on the monotonic clock since the run started (the header
records the monotonic origin, so events from other processes on this host - the proxy's
flow log - line up). The run log is these events as JSON Lines; msgspec encodes and
decodes them (a well-kept, C-accelerated library: encoding an event costs about a
microsecond, which matters when every SSE event of a 1000-stream run is logged).
"""

from __future__ import annotations

from typing import Any

import msgspec

from repro.core.canary_outcome import CanaryOutcome
from repro.core.error_shapes import ErrorAnswer
from repro.core.hop import Hop
from repro.core.snapshot import Snapshot
from repro.core.socket_state import SocketState
from repro.core.verdict import Verdict


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", omit_defaults=True):
    t: float


class RunStarted(Event, tag="run_started", kw_only=True):
    """The log header: configuration (secrets already redacted), versions, clock origins."""

    config: dict[str, Any]
    versions: dict[str, str]
    monotonic_origin: float
    wall_clock_origin: float
    hops: list[Hop] = []


class DeploymentRecorded(Event, tag="deployment", kw_only=True):
    """What every hop said it was running when the run started (probes/deployment.py): per hop
    name, {role, url, settings (flat, secrets redacted), read (endpoint -> ok / why not)}."""

    hops: dict[str, dict[str, Any]]


class RoundStarted(Event, tag="round_started", kw_only=True):
    conv: int
    round: int
    prompt_chars: int
    messages: int
    paced_s: float = 0.0  # how long the start pacer held the round back (repro/core/pacer.py)
    worker: int | None = None  # with --workers: the worker process that drives it; None: the run's only loop


class RoundConnected(Event, tag="round_connected", kw_only=True):
    """Request headers went out on a connection: which one, and was it reused."""

    conv: int
    round: int
    local: str
    reused: bool
    pool_wait_s: float


class ClientRetry(Event, tag="client_retry", kw_only=True):
    """An attempt of the round failed and the client's own retry loop (the openai SDK's, with
    --client-timeouts native) backs off before sending it again."""

    conv: int
    round: int
    attempt: int  # the attempt that failed, from 1
    status: int | None = None  # its HTTP status, when an answer came
    error: str | None = None  # else what ended it before headers
    retry_after_s: float | None = None  # the answer's Retry-After, when it gave one


class FirstByte(Event, tag="first_byte", kw_only=True):
    """Response headers arrived."""

    conv: int
    round: int
    status: int


class SSEReceived(Event, tag="sse", kw_only=True):
    """SSE events that arrived in one read: `events` of them, numbered `seq - events + 1` to
    `seq` within the round, with `chars` of reply text between them; `done` when the stream's
    `data: [DONE]` was among them. Several events in one read is normal (a server sends usage
    and [DONE] together, a proxy coalesces, a busy client reads late), so it is no sign of lag
    by itself. One record per read, not per event: they share their arrival time, and a driver
    that has fallen behind should not also spend a log record on each."""

    conv: int
    round: int
    seq: int
    chars: int = 0
    done: bool = False
    events: int = 1


class RoundDone(Event, tag="round_done", kw_only=True):
    """A round answered to its end. status, reply_chars, events and max_gap_s are None when not
    read: `repro wrap` sees a harness's rounds only as its sockets' byte counters (no HTTP status,
    text or SSE events), and a value not read is never written as 0."""

    conv: int
    round: int
    status: int | None
    reply_chars: int | None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    ttfb_s: float | None = None
    ttft_s: float | None = None
    duration_s: float
    events: int | None
    max_gap_s: float | None
    finish_reason: str | None = None
    tool_calls: int = 0  # calls the reply made ("tools" rounds): the next round sends their results


class RoundFailed(Event, tag="round_failed", kw_only=True):
    """A round that ended without its answer. `failure` says how (repro.core.kinds.RoundFailure),
    decided where it happened, so that the verdict never reads `error` (words for people)."""

    conv: int
    round: int
    phase: str
    error: str
    status: int | None = None
    duration_s: float
    events: int = 0
    # http | connect | connect-timeout | reset | early-close | truncated | timeout | stream | deadline (the
    # round deadline passed, counted from its connection) | client-wait (it passed before the client sent it)
    failure: str | None = None
    local: str | None = None
    reused: bool | None = None
    idle_s: float | None = None  # how long the connection sat idle before this round reused it
    last_progress_t: float | None = None  # the round's last SSE event (its start when none came)
    server: str | None = None  # the response's Server header, when one came
    via: str | None = None  # its Via header: the proxies that forwarded it
    # An HTTP failure's answer as it came (bounded body, secrets masked, identifying headers):
    # which hop wrote it and why (repro.core.error_shapes)
    answer: ErrorAnswer | None = None
    request_bytes: int | None = None  # the size of the request body this round sent (HTTP failures)
    # How many tool definitions (`tools`) that request body carried (HTTP failures; 0: none). None in a
    # log written before the field existed, or by a writer that does not know the body: not known, so
    # no verdict says the request carried tools.
    tool_definitions: int | None = None


class RoundStalled(Event, tag="round_stalled", kw_only=True):
    """No progress for `stalled_for_s`: the round is suspected stuck (it may still recover).

    The one stall record: the driver's watchdog emits it, the live judge and `repro report`
    judge it, the verdict reads it."""

    conv: int
    round: int
    phase: str
    stalled_for_s: float
    started_t: float
    last_progress_t: float
    last_byte_t: float | None = None
    local: str | None = None
    reused: bool | None = None
    events: int = 0
    in_flight: int = 0  # rounds the driver had open when this one was flagged
    # Seconds between reads of bytes without an SSE event since the last progress (keep-alive
    # comments): how often a client's per-read timeout would be reset. None: no such bytes came.
    trickle_every_s: float | None = None


class RoundAbandoned(Event, tag="round_abandoned", kw_only=True):
    """The driver gave up on a stalled round; its conversation goes on or retires."""

    conv: int
    round: int
    phase: str
    stalled_for_s: float
    duration_s: float
    events: int = 0


class SocketSample(Event, tag="socket", kw_only=True):
    """One TCP connection's kernel state: the driver's own for a stalled round (conv, round), or a
    harness's connection read from outside (pid)."""

    socket: SocketState
    conv: int | None = None
    round: int | None = None


class LoopLag(Event, tag="loop_lag", kw_only=True):
    """The driver's own event-loop lag over the last interval: a client that starves itself."""

    max_ms: float
    p99_ms: float
    in_flight: int
    # With --workers: whose loop. A worker's lag delays that worker's rounds only: a stall in
    # another worker is judged on that worker's own loop (repro.core.evidence_book).
    worker: int | None = None
    # The parent's loop in a sharded run: it drives no round, but it reads the hops and times the
    # canaries, so its lag makes what it read late by as much.
    judge: bool = False


class ProbeSample(Event, tag="probe", kw_only=True):
    hop: str
    snapshot: Snapshot


class CanaryResult(Event, tag="canary", kw_only=True):
    hop: str
    outcome: CanaryOutcome


class ProxyFlow(Event, tag="proxy_flow", kw_only=True):
    data: dict[str, Any]


class VerdictReached(Event, tag="verdict", kw_only=True):
    verdict: Verdict
    # A verdict on one wire API's fresh canaries, not on a round (`repro watch --api chat,messages`:
    # the APIs after the first are canaried only): that API. None: a round's verdict.
    api: str | None = None


class Note(Event, tag="note", kw_only=True):
    """A human-readable remark from the tool (an error it recovered from, a warning)."""

    level: str
    message: str


class RunFinished(Event, tag="run_finished", kw_only=True):
    summary: dict[str, Any]
    reason: str


EventTypes = (
    RunStarted
    | DeploymentRecorded
    | RoundStarted
    | RoundConnected
    | ClientRetry
    | FirstByte
    | SSEReceived
    | RoundDone
    | RoundFailed
    | RoundStalled
    | RoundAbandoned
    | LoopLag
    | SocketSample
    | ProbeSample
    | CanaryResult
    | ProxyFlow
    | VerdictReached
    | Note
    | RunFinished
)
