"""An engine fault's after=N counts the engine's requests across all connections, the way the fault
proxy's after=N does by default; an option the engine cannot honour is refused, never ignored."""

from __future__ import annotations

import pytest

from repro.core.faultspec import FaultSpecError
from repro.sim.config import SimConfig, parse_sim_fault
from repro.sim.engine import Engine


@pytest.mark.parametrize("text", ["hang,after=3,per=conn", "hang,path=/v1/chat"])
def test_options_the_engine_cannot_honour_are_refused_in_one_line(text):
    with pytest.raises(FaultSpecError) as caught:
        parse_sim_fault(text)
    message = str(caught.value)
    assert "\n" not in message and text in message and "wedge-after=N" in message


def test_per_global_says_what_the_engine_does_anyway():
    assert parse_sim_fault("hang,after=3,per=global").after_requests == 3


def test_after_n_counts_every_request_the_engine_sees_whichever_connection_sent_it():
    engine = Engine(SimConfig(fault="hang,after=3"))
    seen = []
    for _ in range(5):  # as if from five different connections: the engine knows none of them
        engine.note_request()
        seen.append(engine.fault_active("hang"))
    assert seen == [False, False, False, True, True]


def test_times_n_turns_away_only_the_n_requests_after_after_n():
    """An engine's limit that some requests meet and others do not: a fresh canary after them is served."""
    engine = Engine(SimConfig(fault="rate-limit=1,after=2,times=2"))
    seen = []
    for _ in range(6):
        engine.note_request()
        seen.append(engine.fault_active("rate-limit"))
    assert seen == [False, False, True, True, False, False]


@pytest.mark.parametrize("text", ["hang,times=2", "rate-limit,times=0", "overloaded,times=x"])
def test_times_is_for_faults_that_turn_requests_away_and_counts_requests(text):
    with pytest.raises(FaultSpecError) as caught:
        parse_sim_fault(text)
    assert "\n" not in str(caught.value) and text in str(caught.value)
