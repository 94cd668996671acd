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
    # The sentence of repro.core.next_actions that closes the summary (refusal and TLS kinds), kept
    # apart so the panel says it once, as the next action. None: the verdict has none, or it came
    # from a log written before the field existed (its advice is then still inside `summary`).
    advice: str | None = None

    @property
    def said(self) -> str:
        """The summary with its closing advice: what the JSON's `summary` holds."""
        return "; ".join(part for part in (self.summary, self.advice) if part)

    def to_dict(self) -> dict[str, Any]:
        # next_action is derived, never stored: the run log keeps the verdict as judged, and a log
        # re-read by `repro report` gets the advice of the version that reads it. The JSON's summary
        # ends with the advice, as it always has; `advice` itself is not a key of the contract.
        data = msgspec.to_builtins(self)
        data.pop("advice", None)
        return {**data, "summary": self.said, "next_action": next_action(self).to_dict()}
