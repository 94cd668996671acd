"""The faults `repro harness` plays by default, each with its own limit, and the sweep's bound.

Pure data: which hop plays the fault (the fault proxy or the simulated engine), the spec it is
given, and how long the harness may take before it is called hung. The total is printed before a
sweep starts so an operator knows how long it can take at worst.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

PLAYERS = ("proxy", "engine", "context")


@dataclass(frozen=True)
class HarnessFault:
    name: str
    # "proxy": a spec of the fault proxy (proxies/spec.py HTTP_FAULTS; "" the healthy control);
    # "engine": a fault of the simulated engine (repro/sim/config.py SIM_FAULTS);
    # "context": the engine's context length in tokens (a prompt past it is refused with its 400)
    played_by: str
    spec: str
    limit_s: float      # after this long without an exit the harness is called hung
    what: str = ""      # one line: what it stands for in the wild


# The counts (after=N) let the harness's first two requests through, so each fault meets an agent loop
# already under way, as multi-round hangs do. The engine counts its own requests across
# connections; the proxy counts per connection for wedge-after, across connections otherwise.
DEFAULT_FAULTS: tuple[HarnessFault, ...] = (
    HarnessFault("healthy", "proxy", "", 60.0, "no fault: the control run"),
    HarnessFault("wedge-reused", "proxy", "wedge-after=2", 60.0,
                 "a reused keep-alive connection goes silent (a wedged proxy or LB)"),
    HarnessFault("hold-eom", "proxy", "hold-eom,after=2", 60.0,
                 "every event incl. [DONE] arrives, the response's end never does"),
    HarnessFault("reset-mid-stream", "proxy", "truncate-reset=3,after=2", 60.0,
                 "the connection closes 3 events into a stream"),
    HarnessFault("engine-hang", "engine", "hang,after=2", 60.0,
                 "the engine admits requests and never produces a token"),
    HarnessFault("engine-slow", "engine", "slow=20", 90.0,
                 "tokens 20 x slower but flowing: must not be called hung"),
    HarnessFault("429-retry-after", "proxy", "status=429,retry-after=2,after=2", 60.0,
                 "rate limited from the 3rd request on, Retry-After: 2"),
    HarnessFault("529-overloaded", "proxy", "status=529,after=2", 60.0,
                 "overloaded (Anthropic's 529) from the 3rd request on"),
    HarnessFault("503", "proxy", "status=503,after=2", 60.0,
                 "unavailable from the 3rd request on"),
    HarnessFault("body-limit", "proxy", "body-limit=65536", 60.0,
                 "a gateway's 64 KiB body limit, crossed as the history grows"),
    HarnessFault("context-limit", "context", "8192", 60.0,
                 "an 8192-token context, crossed as the history grows"),
)


def pick_faults(names: list[str] | None, limit_s: float | None = None) -> tuple[HarnessFault, ...]:
    """The named faults in the order given (all by default); KeyError names an unknown one."""
    by_name = {fault.name: fault for fault in DEFAULT_FAULTS}
    chosen = tuple(by_name[name] for name in names) if names else DEFAULT_FAULTS
    if limit_s is None:
        return chosen
    return tuple(replace(f, limit_s=limit_s) for f in chosen)


def worst_case_s(faults: tuple[HarnessFault, ...]) -> float:
    """The sweep's bound: every fault run to its limit."""
    return sum(fault.limit_s for fault in faults)
