import pytest

from repro.core.harness_faults import DEFAULT_FAULTS, pick_faults, worst_case_s


def test_default_sweep_has_a_healthy_control_and_unique_names():
    names = [fault.name for fault in DEFAULT_FAULTS]
    assert "healthy" in names and len(names) == len(set(names))


def test_picked_faults_keep_the_given_order_and_a_shared_limit():
    faults = pick_faults(["429-retry-after", "healthy"], limit_s=5.0)
    assert [f.name for f in faults] == ["429-retry-after", "healthy"]
    assert worst_case_s(faults) == 10.0


def test_an_unknown_fault_is_refused():
    with pytest.raises(KeyError):
        pick_faults(["no-such-fault"])
