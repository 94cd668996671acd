"""What one set of a watch's canary conversations goes through (a WatchedStack: its hops, its
evidence book and judge, this cycle's Driver), and which stacks the hops given and discovered
make (repro/lab/stacks.py's stacks are something else: the servers the scenario matrix starts).

With --target or --hop given, one stack: the first hop is what the conversations talk to, every
hop is probed and canaried, hops discovered beside them are watched in it too. With hops
discovered from Prometheus and no --target, one stack per discovered engine, talked to directly
(so that a verdict's `where` is that engine), and one stack of the hops only read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import anyio

from probes.sampler import Sampler
from repro.core.evidence_book import EvidenceBook
from repro.core.hop import Hop
from repro.live.live_judge import LiveJudge
from repro.load.driver import Driver
from repro.session.watch_apis import ApiCanaries

READ_ONLY = "read-only"  # the key of the stack of discovered hops that take no conversation (only read)


@dataclass
class WatchedStack:
    """What one set of canary conversations goes through, with its judge."""

    name: str
    hops: list[Hop]  # client side first: hops[0] is what the conversations talk to
    conversations: int
    model: str
    model_listed: bool  # False: the target did not list its models (asked again each cycle)
    book: EvidenceBook
    judge: LiveJudge
    sampler: Sampler | None
    sampler_scope: anyio.CancelScope | None = None
    driver: Driver | None = None  # this cycle's
    apis: list[ApiCanaries] = field(default_factory=list)  # the APIs after the first (--api chat,messages)

    @property
    def target(self) -> str:
        return self.hops[0].url

    def driver_in_flight(self) -> int:
        """Rounds this cycle's Driver has in flight (none between cycles): what its judge weighs."""
        return len(self.driver.in_flight) if self.driver else 0


def wanted_stacks(given: list[Hop], discovered: list[Hop], *, conversations: int,
                  per_engine: int) -> dict[str, tuple[str, list[Hop], int]]:
    """target URL -> (name, hops, conversations) for the hops given and discovered now."""
    if given:  # the canaries go through the first hop given; discovered hops are watched beside
        names = {h.name for h in given}
        urls = {h.url for h in given}
        extra = [h for h in discovered if h.name not in names and h.url not in urls]
        return {given[0].url: (given[0].name, [*given, *extra], conversations)}
    # A hop read by its metrics only (a router on its metrics port: discovery cannot know its
    # API) takes no conversation, and no canary: it is read, in a stack of its own with none.
    talkable = [h for h in discovered if h.canary]
    engines = [h for h in talkable if h.role == "engine"] or talkable
    wanted = {h.url: (h.name, [h], per_engine) for h in engines}
    read_only = [h for h in discovered if h not in engines]
    if read_only:
        wanted[READ_ONLY] = ("read only", read_only, 0)
    return wanted


def hops_behind(given: list[Hop]) -> dict[str, tuple[str, ...]]:
    """Each given hop's canaried hops behind it: the hops given are the canaries' path, client
    side first (discovered hops are each talked to directly, or only read: none is behind another)."""
    return {hop.name: tuple(h.name for h in given[i + 1:] if h.canary) for i, hop in enumerate(given)}


def watched_hops(stacks: Iterable[WatchedStack]) -> list[Hop]:
    """Every hop watched, each once (a hop in several stacks is probed by each)."""
    seen: dict[str, Hop] = {}
    for stack in stacks:
        for hop in stack.hops:
            seen.setdefault(hop.name, hop)
    return list(seen.values())
