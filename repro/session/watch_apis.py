"""A watch's canaries on the wire APIs after the first (`repro watch --api chat,messages`).

The canary conversations speak the first API (the harness's); each API after it gets a fresh
canary to every hop with every canary wave, kept in an evidence book of its own and judged on its
own, as `repro triage --api` does: a path that fails on one API while another works through the
same hops ("chat works through litellm, messages does not") is a verdict and an incident, which
clears when that API's canaries all answer again. A hop's up or down stays its first API's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from repro.core import events as ev
from repro.core.classify import classify
from repro.core.evidence_book import EvidenceBook
from repro.core.hop import Hop
from repro.core.verdict import Verdict
from repro.core.wire_api import WIRE_APIS, Api
from repro.live.evidence_wave import EvidenceWave


@dataclass
class ApiCanaries:
    """One more API's fresh canaries to a stack's hops: its book (fed every event, keeping this
    API's canaries only) and its wave."""

    api: Api
    book: EvidenceBook
    wave: EvidenceWave | None = None  # made by the watch once the stack's model is known

    def failed(self, hops: Sequence[Hop], *, since: float) -> list[str]:
        """The hops whose canary of this API, sent at `since` or later, did not answer."""
        return [h.name for h in hops if h.canary and (last := self.last(h.name, since)) is not None
                and not last.outcome.ok]

    def answered(self, hops: Sequence[Hop], *, since: float) -> bool:
        """Every canaried hop's canary of this API, sent at `since` or later, answered."""
        canaried = [h for h in hops if h.canary]
        return bool(canaried) and all((last := self.last(h.name, since)) is not None and last.outcome.ok
                                      for h in canaried)

    def last(self, hop: str, since: float) -> ev.CanaryResult | None:
        history = self.book.canaries.get(hop) or []
        return history[-1] if history and history[-1].t >= since else None

    def judged(self, *, since: float, until: float, first: EvidenceBook, first_api: Api) -> Verdict:
        """This API's wave judged as triage judges a window (no round of ours: a stand-in stall from
        `since`), its summary saying which API's path it is, and whether the first API's canaries
        of the same wave answered at every hop (only when they were read)."""
        stall = ev.RoundStalled(t=since, conv=0, round=0, phase="before-first-byte",
                                stalled_for_s=round(max(0.0, until - since), 3), started_t=since, last_progress_t=since)
        evidence = dataclasses.replace(self.book.evidence_for(stall, until=until, driver_in_flight=0),
                                       round_watched=False)
        verdict = classify(evidence)
        canaried = [h.name for h in self.book.hops if h.canary]
        first_ok = [(first.canaries.get(name) or [None])[-1] for name in canaried]
        besides = ""
        if canaried and all(c is not None and c.t >= since and c.outcome.ok for c in first_ok):
            besides = f" ({first_api}, {WIRE_APIS[first_api].path}, answers at every hop in the same wave)"
        said = f"{self.api} ({WIRE_APIS[self.api].path}) canaries fail{besides}: {verdict.summary}"
        return msgspec.structs.replace(verdict, summary=said)
