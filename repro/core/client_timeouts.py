"""What a harness's own HTTP client would have done with a stalled round, under its library's
default timeouts and retries: a pure function of the timeline the driver observed (when the
round started, whether headers came, the last byte, how often bytes trickled in), no clock.

Each policy is what the installed library's source says (checked for the versions named):
- aiohttp 3.14: aiohttp.client.DEFAULT_TIMEOUT = ClientTimeout(total=300, sock_connect=30), no
  read timeout; no retries.
- httpx 0.29 (and httpx2, its fork): DEFAULT_TIMEOUT_CONFIG = Timeout(5.0): 5 s to connect and
  5 s per read (any byte resets it); no retries.
- openai 3.60 (sync and async): openai/_constants.py DEFAULT_TIMEOUT = Timeout(600, connect=5.0),
  DEFAULT_MAX_RETRIES = 2; a read timeout is per read (an SSE comment resets it), and the retry
  loop in _base_client.py covers only the time before response headers, with a backoff of
  0.5 s x 2^n (at most 8 s, jittered down to 75%).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TimeoutPolicy:
    library: str  # how the sentence names the client
    exception: str  # what it raises when the read timeout fires
    connect_s: float | None
    read_s: float | None  # per read: any byte resets it
    total_s: float | None  # a deadline on the whole request
    retries: int  # attempts again when a timeout fires before response headers
    source: str  # where the values were read


_OPENAI = dict(exception="APITimeoutError", connect_s=5.0, read_s=600.0, total_s=None, retries=2,
               source="openai 3.60 _constants.py: Timeout(600, connect=5.0), 2 retries before headers")
_ANTHROPIC = dict(_OPENAI, source="anthropic 2.17 _constants.py: Timeout(600, connect=5.0), 2 retries before headers")
POLICIES: dict[str, TimeoutPolicy] = {
    "aiohttp": TimeoutPolicy("aiohttp", "TimeoutError", 30.0, None, 300.0, 0,
                             "aiohttp 3.14 client.DEFAULT_TIMEOUT: ClientTimeout(total=300, sock_connect=30)"),
    "httpx": TimeoutPolicy("httpx", "ReadTimeout", 5.0, 5.0, None, 0, "httpx 0.29 DEFAULT_TIMEOUT_CONFIG: Timeout(5.0)"),
    "openai": TimeoutPolicy("the openai SDK (sync)", **_OPENAI),
    "openai-async": TimeoutPolicy("the openai SDK (async)", **_OPENAI),
    # The anthropic SDK (same generator, same retry loop): anthropic 2.17 _constants.py DEFAULT_TIMEOUT
    # = Timeout(600, connect=5.0), DEFAULT_MAX_RETRIES = 2.
    "anthropic": TimeoutPolicy("the anthropic SDK (sync)", **_ANTHROPIC),
    "anthropic-async": TimeoutPolicy("the anthropic SDK (async)", **_ANTHROPIC),
}


@dataclass(frozen=True)
class WouldBe:
    """What the client would have done: give up at run time `at` (None: it would have waited on)."""

    at: float | None
    text: str


def _backoff(retries: int) -> float:
    """The longest the SDK's retry backoff sleeps in all (0.5 s x 2^n, at most 8 s each)."""
    return sum(min(0.5 * 2**n, 8.0) for n in range(retries))


def _s(value: float) -> str:
    return f"{value:.2g}" if value < 10 else f"{value:.0f}"


def would_be(policy: TimeoutPolicy, *, started_t: float, headers: bool, last_byte_t: float | None,
             trickle_every_s: float | None, observed_until: float) -> WouldBe:
    """The client's fate for a round silent since `last_byte_t` (None: no byte since it was sent
    at `started_t`), whose bytes, if any came without progress, came every `trickle_every_s`;
    the timeline was observed up to `observed_until`. A trickle counts as still coming while the
    silence since its last byte is under twice its interval.

    What lies after `observed_until` was not observed, so every sentence says what it assumes: a
    timeout fires "if no byte comes before then" (a keep-alive slower than the stall trigger could
    not be seen before the stall was flagged), a trickle keeps the round alive "while bytes keep
    coming", and the retry time is an upper bound (the SDK jitters its backoff down)."""
    read_from = last_byte_t if last_byte_t is not None else started_t
    if trickle_every_s is not None and observed_until - read_from >= 2 * trickle_every_s:
        trickle_every_s = None  # it stopped: the read timer runs from its last byte
    observed = f"observed up to t={observed_until:.1f} s"
    fires: list[tuple[float, str]] = []
    kept_alive = ""
    if policy.read_s is not None:
        if trickle_every_s is not None and trickle_every_s < policy.read_s:
            kept_alive = (f"a byte arrived about every {_s(trickle_every_s)} s ({observed}), under its "
                          f"{_s(policy.read_s)} s per-read timeout, which every byte resets")
        elif not headers and policy.retries:
            # Each retry sends the request again and waits a full read timeout again, if it stalls alike.
            at = read_from + policy.read_s * (policy.retries + 1) + _backoff(policy.retries)
            fires.append((at, f"raised {policy.exception} by about t={at:.1f} s after {policy.retries} retries, "
                              f"each waiting {_s(policy.read_s)} s for a byte, if every attempt stalls alike "
                              f"({observed})"))
        else:
            at = read_from + policy.read_s
            since = "the last byte" if last_byte_t is not None else "the request went out"
            fires.append((at, f"raised {policy.exception} at t={at:.1f} s, {_s(policy.read_s)} s after {since} "
                              f"(t={read_from:.1f} s), if no byte comes before then ({observed})"))
    if policy.total_s is not None:
        at = started_t + policy.total_s
        fires.append((at, f"ended the round at t={at:.1f} s by its {_s(policy.total_s)} s total timeout, "
                          f"unless it finishes before then ({observed})"))
    if fires:
        at, how = min(fires)
        return WouldBe(at, f"{policy.library} would have {how}")
    reason = f": {kept_alive}" if kept_alive else ""
    return WouldBe(None, f"{policy.library} would have waited {_s(policy.read_s or 0)} s per read and not "
                         f"timed out while bytes keep coming{reason}")
