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


@pytest.mark.parametrize("fault", DEFAULT_FAULTS, ids=lambda f: f.name)
def test_every_default_spec_is_one_its_player_parses(fault):
    from proxies.spec import parse_proxy_fault
    from repro.core.harness_faults import PLAYERS
    from repro.sim.config import SimConfig, parse_sim_fault

    assert fault.played_by in PLAYERS and fault.limit_s > 0 and fault.what
    if fault.played_by == "proxy":
        assert fault.spec == "" or parse_proxy_fault(fault.spec).text == fault.spec
    elif fault.played_by == "engine":
        assert parse_sim_fault(fault.spec).text == fault.spec
    else:
        assert SimConfig(context_length=int(fault.spec)).validate().context_length == int(fault.spec)


def test_the_proxy_counts_only_the_apis_generation_path_unless_the_spec_says():
    from repro.core.harness_faults import HarnessFault
    from repro.session.harness_sweep import proxy_spec

    wedge = pick_faults(["wedge-reused"])[0]
    assert proxy_spec(wedge, "messages") == "wedge-after=2,path=/v1/messages"
    own = HarnessFault("own", "proxy", "status=503,path=/v1/chat", 5.0, "w")
    assert proxy_spec(own, "chat") == "status=503,path=/v1/chat"
    assert proxy_spec(pick_faults(["engine-hang"])[0], "chat") is None
    assert proxy_spec(pick_faults(["healthy"])[0], "chat") is None
