"""What a sharded run's parent (repro/load/shards.py) and its worker processes (repro/load/shard_worker.py) say
to each other: msgspec JSON lines, the parent's on the worker's stdin, the worker's on its stdout.

Parent -> worker: Start (once, first), then Judged (a judge request answered), Drain and Stop.
Worker -> parent: Ready (its driver is made: the window of a bench starts its clock), the events
the parent observes (STREAMED, and SSE reads when the Start asks for them), JudgeRequest and PrepareRequest (the parent judges, with its evidence book, probes, canaries
and every worker's rounds), then Finished with the worker's round outcomes. Every message is
tagged by `type`, like the events themselves.
"""

from __future__ import annotations

import msgspec

from repro.core import events as ev
from repro.load.driver import DriverConfig
from repro.load.prompts import PromptSource
from repro.load.round import RoundOutcome


class Start(msgspec.Struct, tag="start", tag_field="type", kw_only=True):
    # The dataclasses as msgspec encodes them, every field, and decoded back into their own types
    # (tuples, a transcript, a field added later), not the dicts of asdict.
    index: int
    config: DriverConfig  # its conversation_ids: the worker's share
    prompts: PromptSource
    origin: float  # the run's time.monotonic() origin: CLOCK_MONOTONIC is the same in every process of a host
    segment: str  # the worker's run-log segment, a file name in run_dir
    run_dir: str
    judge_lead_s: float | None = None  # None: the parent has no judge; stalls are flagged and abandoned
    # SSE reads streamed too: `repro bench` counts tokens by their arrival, in the parent.
    forward_sse: bool = False


class Judged(msgspec.Struct, tag="judged", tag_field="type"):
    id: int


class Stop(msgspec.Struct, tag="stop", tag_field="type"):
    pass


class Drain(msgspec.Struct, tag="drain", tag_field="type"):
    """Start no new round; end once the rounds in flight have (a bench window's grace). A Stop
    that follows still cuts them."""


class JudgeRequest(msgspec.Struct, tag="judge", tag_field="type"):
    id: int
    stall: ev.RoundStalled


class PrepareRequest(msgspec.Struct, tag="prepare", tag_field="type"):
    id: int
    t: float


class Ready(msgspec.Struct, tag="ready", tag_field="type"):
    pass


class Finished(msgspec.Struct, tag="finished", tag_field="type"):
    outcomes: list[RoundOutcome]


# What the parent needs from a worker's events: round starts, connections and ends (rounds in
# flight, counts, failures to judge, which proxy records are this round's), stalls, the stalled
# round's own socket and the worker's loop lag (evidence). The rest (SSE reads, first bytes,
# notes) stays in the worker's segment: SSE reads alone are most of a run's events, and the
# parent would only drop them.
STREAMED = frozenset((
    ev.RoundStarted, ev.RoundConnected, ev.RoundDone, ev.RoundFailed, ev.RoundStalled, ev.RoundAbandoned,
    ev.SocketSample, ev.LoopLag,
))



class ResumeWatch:
    """Which of a worker's unstreamed events the parent must see all the same: the first byte a
    stalled round gets again (an SSE read or its headers). The parent judges the stall, and the
    moment the round resumed bounds the evidence it may use (EvidenceBook.resumed)."""

    def __init__(self) -> None:
        self.stalled: set[tuple[int, int]] = set()

    def sent(self, event: ev.Event) -> None:
        """A streamed event went to the parent."""
        kind = type(event)
        if kind is ev.RoundStalled:
            self.stalled.add((event.conv, event.round))
        elif kind is ev.RoundDone or kind is ev.RoundFailed or kind is ev.RoundAbandoned:
            self.stalled.discard((event.conv, event.round))

    def wanted(self, event: ev.Event) -> bool:
        """An event not streamed: whether to send it (once: the round's first byte after its stall)."""
        if not self.stalled or (type(event) is not ev.SSEReceived and type(event) is not ev.FirstByte):
            return False
        key = (event.conv, event.round)
        if key not in self.stalled:
            return False
        self.stalled.discard(key)
        return True


ToWorker = Start | Judged | Drain | Stop
FromWorker = (ev.RoundStarted | ev.RoundConnected | ev.RoundDone | ev.RoundFailed | ev.RoundStalled | ev.RoundAbandoned
              | ev.SocketSample | ev.LoopLag | ev.SSEReceived | ev.FirstByte | Ready | JudgeRequest | PrepareRequest | Finished)

encoder = msgspec.json.Encoder()
