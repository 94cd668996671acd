"""One harness run under one fault, as `repro harness` reports it: the outcome read from the
harness's exit and output (repro.core.harness_outcome), the moments read from the fault
proxy's flow log (repro.core.harness_flows), as seconds from the harness's start, and for a hung
run repro's judgement of it (repro.core.hung_judgement)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from repro.core.harness_faults import HarnessFault
from repro.core.harness_flows import FlowFacts
from repro.core.harness_outcome import HarnessOutcome, HarnessReading
from repro.core.hung_judgement import HungJudgement

FINISHED = "finished"  # the label of a run that ended well without ever meeting its fault
INTERRUPTED = "interrupted"  # the label of a run the user stopped


@dataclass(frozen=True)
class FaultRun:
    fault: HarnessFault
    reading: HarnessReading
    took_s: float                  # from the harness's start to its exit (or to its stop at the limit)
    facts: FlowFacts
    started_at: float              # the harness's start, on the flow log's clock
    exited_at: float | None        # its exit on that clock; None: stopped at the limit
    stopped_at: float | None = None  # when we began to stop it at the limit; None: it exited
    interrupted: bool = False      # a Ctrl-C (or SIGTERM) to repro ended it: its outcome says nothing
    # repro's judgement of a hung run, made shortly before the limit; None: not hung, so not kept
    judgement: HungJudgement | None = None

    def _since_start(self, moment: float | None) -> float | None:
        return None if moment is None else round(moment - self.started_at, 2)

    @property
    def met_fault(self) -> bool:
        return self.facts.fault_at is not None

    @property
    def fault_at_s(self) -> float | None:
        return self._since_start(self.facts.fault_at)

    @property
    def noticed_after_s(self) -> float | None:
        """How long after the fault the harness first reacted (new request, giving up, exit)."""
        noticed = self.facts.noticed_at(self.exited_at, self.stopped_at)
        return None if noticed is None or self.facts.fault_at is None else round(noticed - self.facts.fault_at, 2)

    @property
    def label(self) -> str:
        """The outcome's word; a run that finished without ever meeting the fault says so."""
        if self.interrupted:
            return INTERRUPTED
        if self.reading.outcome is HarnessOutcome.RECOVERED and not self.met_fault:
            return FINISHED
        return self.reading.outcome.value

    def to_json(self) -> dict[str, Any]:
        return {
            "fault": self.fault.name, "played_by": self.fault.played_by, "spec": self.fault.spec,
            "limit_s": self.fault.limit_s, "outcome": self.label, "exit_code": self.reading.exit_code,
            "last_line": self.reading.last_line, "took_s": round(self.took_s, 2),
            "fault_at_s": self.fault_at_s, "noticed_after_s": self.noticed_after_s,
            "went_on": self.facts.how or None, "retry_at_s": self._since_start(self.facts.next_request_at),
            "requests": self.facts.requests, "requests_after_fault": self.facts.retries,
            "through_after_fault": self.facts.through,
            "connections": self.facts.connections, "largest_request_bytes": self.facts.largest_request_bytes,
            # not judged (not hung): the same keys, empty
            **(self.judgement.to_json() if self.judgement is not None
               else {"judged_at_s": None, "judging_error": None, "verdicts": []}),
        }
