"""What `repro audit` measured, as plain records: each hop's measurements (HopAudit), the race
probes, the cancel and idle-stream runs, how a conversation grows, and the bound on the audit's
time. Pure (no I/O); audit_findings judges them.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from enum import StrEnum


# What each measurement of a hop came to, as values: what the report prints and what is "not
# measured" are decided from these, never from the sentences that say how it was obtained.
class KeepAliveSeen(StrEnum):
    CLOSED = "closed"  # the hop closed the idle connection (keepalive_timeout_s)
    STILL_OPEN = "still-open"  # still open at the limit: no timeout up to it
    NOT_MEASURED = "not-measured"  # no connection, no answer, or the hop ended it after the request


class BodySeen(StrEnum):
    LIMIT = "limit"  # max_body_bytes accepted, the next step refused
    NO_LIMIT = "no-limit"  # the cap was accepted
    REFUSES_ALL = "refuses-all"  # even the smallest chat request was refused for its size
    NOT_MEASURED = "not-measured"


class CancelSeen(StrEnum):
    RELEASED = "released"  # the gauge was back at its baseline before the deadline
    KEPT = "kept"  # still above it at the deadline
    NOT_MEASURED = "not-measured"


class IdleStreamSeen(StrEnum):
    CUT = "cut"  # an error status, or the stream closed, before its first event
    NOT_CUT = "not-cut"  # its first event came
    NOT_MEASURED = "not-measured"


class GaugeUnread(StrEnum):
    """Why a hop's gauge was not read around a cancelled stream."""

    NO_METRICS_PAGE = "no-metrics-page"  # not measurable here: no metrics=URL given
    NO_GAUGE = "no-gauge"  # not measurable here: its metrics page has no such gauge
    READ_FAILED = "read-failed"  # the page could not be read
    NOT_COUNTED = "not-counted"  # the gauge did not count the stream

    @property
    def measurable(self) -> bool:
        """False for what this stack cannot give (listed, the exit unchanged), True for a failure."""
        return self not in (GaugeUnread.NO_METRICS_PAGE, GaugeUnread.NO_GAUGE)

# How long each client library keeps an idle pooled connection before dropping it, by default:
# aiohttp TCPConnector(keepalive_timeout=15.0) (aiohttp/connector.py), httpx Limits(keepalive_expiry=5.0)
# (httpx/_config.py), the openai SDK's DEFAULT_CONNECTION_LIMITS sets no expiry, so httpx's 5 s.
CLIENT_POOL_IDLE_S = {"aiohttp": 15.0, "httpx": 5.0, "openai": 5.0, "openai-async": 5.0}


# Characters per token, to turn a conversation's characters into an engine's tokens: English
# text under the common BPE tokenizers runs 3.5 to 4.5; 4 is the usual rule, stated in the evidence.
CHARS_PER_TOKEN = 4.0


@dataclass(frozen=True)
class RaceOutcome:
    """A race probe: `pairs` pairs of requests, each pair on one kept-alive connection, about `gap_s` apart."""

    target: str  # the hop the pairs were sent to
    gap_s: float
    pairs: int
    failed: int  # second requests that met a reset, an EOF or a 502/503/504
    failures: tuple[str, ...] = ()  # what each failure was ("reset", "eof", "http 502")
    # The second request on the first's connection (the client's pool reuses it), or on a fresh one
    # (what the hop reuses is then its own pooled connection to the hop behind).
    same_connection: bool = True

    def sent(self) -> str:
        return ("on the same connection (reused without checking it was still open)" if self.same_connection
                else "on a fresh connection (so the hop's own upstream pool is what is reused)")

    def failures_text(self) -> str:
        counts = Counter(self.failures)
        return ", ".join(f"{n} {what}" if n > 1 else what for what, n in counts.items())


@dataclass(frozen=True)
class HopAudit:
    """One hop's measurements, each with how it was obtained (None: not measured, or no limit up to the bound)."""

    name: str
    role: str
    keepalive_timeout_s: float | None = None  # None: still open at keepalive_limit_s (or not measured)
    keepalive_limit_s: float = 0.0
    keepalive_how: str = "not measured"
    max_body_bytes: int | None = None  # the largest body accepted; None: no limit up to body_cap_bytes
    body_cap_bytes: int = 0
    body_step_bytes: int = 0
    body_how: str = "not measured"
    body_refuses_all: bool = False  # even the smallest chat request was refused for its size (not a limit of 0)
    context_tokens: int | None = None
    context_how: str = "not measured"
    upstream_keepalive_s: float | None = None  # how long it pools idle connections to the hop behind, when known
    upstream_how: str = ""
    # A stream cancelled at the first hop: seconds until this hop's gauge was back (None: kept, or not measured).
    cancel_release_s: float | None = None
    cancel_how: str = "not measured"
    # A stream sent to this hop whose first token came late: seconds until it was cut (None: not cut, or not measured).
    idle_stream_cut_s: float | None = None
    idle_stream_how: str = "not measured"
    server: str | None = None  # the Server header of its answer to GET /v1/models (None: none sent, or no answer)
    keepalive_seen: KeepAliveSeen = KeepAliveSeen.NOT_MEASURED
    body_seen: BodySeen = BodySeen.NOT_MEASURED
    cancel_seen: CancelSeen = CancelSeen.NOT_MEASURED
    idle_stream_seen: IdleStreamSeen = IdleStreamSeen.NOT_MEASURED

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class Growth:
    """How a conversation's request grows: its first round's body, and bytes (and characters) per round."""

    first_bytes: int
    per_round_bytes: int
    how: str  # "run defaults (...)", "--growth-per-round", "run RUN_DIR: ..."


def kib(n: float) -> str:
    """A size as people read it: bytes below 10 KiB, else KiB (one decimal at most), MiB from 1 MiB."""
    if n < 10240:
        return f"{int(n)} B"
    if n >= 1048576:
        return f"{n / 1048576:.1f}".removesuffix(".0") + " MiB"
    return f"{n / 1024:.1f}".removesuffix(".0") + " KiB"


@dataclass(frozen=True)
class Release:
    """One hop's gauge around a cancelled stream: before it, while it streamed, and after the close."""

    hop: str
    signal: str  # what was read: "engine running", "router active", "proxy in-flight"
    baseline: float | None = None  # just before the stream (None: not read)
    during: float | None = None  # while it streamed
    released_s: float | None = None  # seconds after the close it was back at the baseline; None: not (yet)
    last: float | None = None  # the last value read after the close
    last_s: float = 0.0  # when that was, seconds after the close
    why: str = ""  # why it was not measured, "" when it was
    unread: GaugeUnread | None = None  # why not, as a value (None: measured)

    @property
    def measured(self) -> bool:
        return self.unread is None

    @property
    def kept(self) -> bool:
        return self.measured and self.released_s is None

    def text(self, deadline_s: float) -> str:
        if not self.measured:
            return f"{self.hop} {self.signal}: not measured ({self.why})"
        head = f"{self.hop} {self.signal}: {self.baseline:g} before, {self.during:g} while streaming"
        if self.released_s is not None:
            return f"{head}, back to {self.baseline:g} {self.released_s:.1f} s after the close"
        return f"{head}, still {self.last:g} at {self.last_s:.1f} s after the close (deadline {deadline_s:g} s)"

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class CancelRun:
    """A streamed request sent to `entry`, `events` SSE events read, then its connection closed;
    `releases`: the gauges of `entry` and every hop behind it, client side first."""

    entry: str
    events: int
    releases: tuple[Release, ...]
    deadline_s: float
    why: str = ""  # why the stream could not be cancelled (it ended, it failed): "" when it was

    def to_dict(self) -> dict:
        return {"entry": self.entry, "events": self.events, "deadline_s": self.deadline_s, "why": self.why,
                "releases": [r.to_dict() for r in self.releases]}


@dataclass(frozen=True)
class IdleStreamRun:
    """A streamed request sent to `entry` whose first token the engine holds back `delay_s` seconds."""

    entry: str
    delay_s: float
    cut_s: float | None = None  # seconds until the hop cut it (an error status, or the stream closed)
    first_token_s: float | None = None  # seconds until its first event: the hop held the idle stream
    how: str = ""  # what was seen: "http 504", "closed (eof) with no event", "first event"
    why: str = ""  # why not measured, "" when it was

    @property
    def seen(self) -> IdleStreamSeen:
        if self.why:
            return IdleStreamSeen.NOT_MEASURED
        return IdleStreamSeen.CUT if self.cut_s is not None else IdleStreamSeen.NOT_CUT

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class TimeBound:
    """The most `repro audit` can take, composed as it runs: every hop's keep-alive wait at once,
    alongside them the steps that run one after another (each step the deadline that ends it), then
    the race probes at once. Parallel parts take the max, sequential ones the sum."""

    keepalive_s: float
    steps: tuple[tuple[str, float], ...]  # (what, seconds), one after another, alongside the keep-alive waits
    race_s: float = 0.0  # the race probes, after both (0: not run)

    @property
    def seconds(self) -> int:
        return math.ceil(max(self.keepalive_s, sum(s for _, s in self.steps)) + self.race_s)

    def text(self) -> str:
        """"at most 117 s (keep-alive waits 20 s; alongside: body and context 20 s + ...; then race probes 30 s)"."""
        alongside = " + ".join(f"{what} {seconds:g} s" for what, seconds in self.steps)
        parts = [f"keep-alive waits {self.keepalive_s:g} s"] + ([f"alongside: {alongside}"] if self.steps else [])
        then = f"; then race probes {self.race_s:g} s" if self.race_s else ""
        return f"at most {self.seconds} s ({'; '.join(parts)}{then})"
