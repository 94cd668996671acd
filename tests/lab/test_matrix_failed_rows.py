"""A matrix row about failed rounds compares their verdicts: a wrong verdict on a failed round is a
mismatch, not a pass for want of a stall (the rows themselves are in tests/lab/test_scenarios.py)."""

from __future__ import annotations

import pytest

from repro.lab.matrix import Expect, Scenario
from repro.lab.runner import run_scenario

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]


def test_a_wrong_verdict_on_a_failed_round_does_not_match(tmp_path):
    wrong = Expect("client", ("rate-limited",), ("engine-0",), round_outcome="failed")
    result = run_scenario(Scenario("messages/overloaded-wrong", "direct", wrong, engine_fault="overloaded,after=1",
                                   api="messages", rounds=2), tmp_path)
    assert result.error is None, result.error
    assert not result.match and result.got == "failed: server/engine-0/engine-overloaded", result.got
    assert result.expected == "failed: client/engine-0/rate-limited"
    right = Expect("server", ("engine-overloaded",), ("engine-0",), round_outcome="failed")
    result = run_scenario(Scenario("messages/overloaded", "direct", right, engine_fault="overloaded,after=1",
                                   api="messages", rounds=2), tmp_path)
    assert result.match and result.time_to_verdict_s is not None and result.time_to_verdict_s < 2.5


def test_a_stall_row_still_ignores_failed_rounds_verdicts(tmp_path):
    """A row expecting a stall verdict gets none from rounds that only failed: it says failure."""
    stall = Expect("server", ("engine-overloaded",), ("engine-0",))
    result = run_scenario(Scenario("chat/overloaded-as-stall", "direct", stall, engine_fault="overloaded,after=1",
                                   rounds=2), tmp_path)
    assert not result.match and result.got == "failure"
