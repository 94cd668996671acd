"""The start pacer: a token bucket with times in and delays out (no clock, no sleeping)."""

import pytest

from repro.core.pacer import StartPacer


def test_a_burst_starts_at_once_then_one_start_per_interval_in_order():
    pacer = StartPacer(rate=100.0, burst=3)
    waits = [pacer.reserve(10.0) for _ in range(6)]
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert waits[3:] == pytest.approx([0.01, 0.02, 0.03])


def test_waiting_rounds_start_at_the_rate_even_as_time_passes():
    pacer = StartPacer(rate=10.0, burst=1)
    assert pacer.reserve(0.0) == 0.0
    assert pacer.reserve(0.0) == pytest.approx(0.1)   # slot at 0.1
    assert pacer.reserve(0.05) == pytest.approx(0.15)  # slot at 0.2, asked at 0.05
    assert pacer.reserve(1.0) == 0.0                   # the queue drained long ago


def test_an_idle_pacer_refills_to_its_burst_and_no_further():
    pacer = StartPacer(rate=10.0, burst=2)
    for _ in range(4):
        pacer.reserve(0.0)
    # A minute of idleness earns a burst of 2, not 600 starts.
    assert [pacer.reserve(60.0) for _ in range(3)] == [0.0, 0.0, pytest.approx(0.1)]


@pytest.mark.parametrize("rate, burst", [(0.0, 1), (-1.0, 5), (10.0, 0)])
def test_a_pacer_that_could_never_start_anything_is_refused(rate, burst):
    with pytest.raises(ValueError, match="rate > 0 and burst >= 1"):
        StartPacer(rate=rate, burst=burst)
