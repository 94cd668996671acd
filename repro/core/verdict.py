"""The verdict: the contract users script against (docs/verdicts.md#verdict-kinds), one per judged round."""

from __future__ import annotations

from typing import Any

import msgspec

from repro.core.kinds import Confidence, Kind, Side
from repro.core.next_actions import next_action


class Verdict(msgspec.Struct, kw_only=True):
    side: Side
    where: str | None  # a hop name, "client", "connection", or None
    kind: Kind
    confidence: Confidence
    phase: str | None  # a repro.core.kinds.Phase; None: not observed (triage without the harness's sockets)
    conversation: int
    round: int
    stalled_for_s: float | None  # None: not observed (triage watched no round and read no socket of it)
    evidence: list[dict[str, Any]]  # {hop, signal, value, at}: what carried the decision
    ruled_out: list[str]
    summary: str
    outcome: str = "stalled"  # stalled | failed: what happened to the round
    failure: str | None = None  # how a failed round failed (repro.core.kinds.RoundFailure)
    status: int | None = None  # the HTTP status a failed round got, if any

    def to_dict(self) -> dict[str, Any]:
        # next_action is derived, never stored: the run log keeps the verdict as judged, and a log
        # re-read by `repro report` gets the advice of the version that reads it.
        return {**msgspec.to_builtins(self), "next_action": next_action(self).to_dict()}
