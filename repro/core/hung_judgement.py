"""repro's judgement of a harness about to be called hung (`repro harness`): when it is made and
what it found.

Pure. Shortly before a fault's limit, a harness still running is judged once, as `repro wrap`
judges a stall (repro.live.triage: a window of hop metrics, one fresh canary per hop, the harness
family's sockets and threads), with the fault proxy (`proxy`) and the simulated engine
(`engine-0`) as the hops. JUDGE_LEAD_S before the limit leaves room for the judgement's window,
its canaries' deadline and the last look at the harness's sockets and threads, so the harness is
still judged running and stopped at the limit as before. A harness that ends before the limit
is not hung, and its judgement is dropped.

The judgement's canary through the fault proxy is a generation request too, and the proxy logs
it beside the harness's; it carries the x-repro-canary header, so its `request_seen` says
`canary` and repro.core.harness_flows leaves it out of the harness's facts: a canary is never read
as the harness's retry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from repro.core.verdict import Verdict

JUDGE_WINDOW_S = 2.0  # triage's window: hop metrics sampled, one canary per hop at its middle
JUDGE_CANARY_TIMEOUT_S = 2.0  # each canary's deadline; the last look at sockets and threads has the same
JUDGE_SLACK_S = 3.0  # beyond them: the last look, the judging itself, a loaded machine's delays
JUDGE_LEAD_S = JUDGE_WINDOW_S + JUDGE_CANARY_TIMEOUT_S + JUDGE_SLACK_S  # judged this long before the limit
# The most a judgement may take (half the window, then the canaries, then the last look, each to
# its deadline, and the slack) before it is given up as failed: every wait bounded.
JUDGE_BOUND_S = JUDGE_WINDOW_S / 2 + 2 * JUDGE_CANARY_TIMEOUT_S + 2 * JUDGE_SLACK_S


def judge_at_s(limit_s: float) -> float:
    """When, from the harness's start, a harness still running is judged: JUDGE_LEAD_S before the
    limit; with a limit under twice that, at half the limit (the harness is then stopped once
    judged, after the limit: a judgement on a harness already stopped would read no sockets)."""
    return max(limit_s - JUDGE_LEAD_S, limit_s / 2)


@dataclass(frozen=True)
class HungJudgement:
    """What the judgement of a hung run found: its verdicts (none: nothing held that triage sees),
    or the one line saying why it could not be made."""

    at_s: float                      # when it began, seconds from the harness's start
    verdicts: tuple[Verdict, ...] = ()
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The verdicts' own words: side, where, kind, confidence and summary (Verdict.said)."""
        return {"judged_at_s": round(self.at_s, 2), "judging_error": self.error,
                "verdicts": [{"side": v.side, "where": v.where, "kind": v.kind, "confidence": v.confidence,
                              "summary": v.said} for v in self.verdicts]}

