"""The faults `repro harness` plays by default, each with its own limit, and the sweep's bound.

Pure data: which hop plays the fault (the fault proxy or the simulated engine), the spec it is
given, and how long the harness may take before it is called hung. The total is printed before a
sweep starts so an operator knows how long it can take at worst.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HarnessFault:
    name: str
    played_by: str      # "proxy" or "engine"
    spec: str           # the proxy's fault spec or the sim's fault name; "" for the healthy control
    limit_s: float      # after this long without an exit the harness is called hung


DEFAULT_FAULTS: tuple[HarnessFault, ...] = (
    HarnessFault("healthy", "proxy", "", 60.0),
    HarnessFault("wedge-reused", "proxy", "wedge-after=1", 60.0),
    HarnessFault("hold-eom", "proxy", "hold-eom", 60.0),
    HarnessFault("reset-mid-stream", "proxy", "reset-mid-stream", 60.0),
    HarnessFault("engine-hang", "engine", "hang", 60.0),
    HarnessFault("engine-slow", "engine", "slow", 90.0),
    HarnessFault("429-retry-after", "proxy", "status=429,retry-after=2,after=1", 60.0),
    HarnessFault("529-overloaded", "proxy", "status=529,after=1", 60.0),
    HarnessFault("503", "proxy", "status=503,after=1", 60.0),
    HarnessFault("body-limit", "proxy", "body-limit=8000", 60.0),
    HarnessFault("context-limit", "engine", "context-limit", 60.0),
)


def pick_faults(names: list[str] | None, limit_s: float | None = None) -> tuple[HarnessFault, ...]:
    """The named faults in the order given (all by default); KeyError names an unknown one."""
    by_name = {fault.name: fault for fault in DEFAULT_FAULTS}
    chosen = tuple(by_name[name] for name in names) if names else DEFAULT_FAULTS
    if limit_s is None:
        return chosen
    return tuple(HarnessFault(f.name, f.played_by, f.spec, limit_s) for f in chosen)


def worst_case_s(faults: tuple[HarnessFault, ...]) -> float:
    """The sweep's bound: every fault run to its limit."""
    return sum(fault.limit_s for fault in faults)
