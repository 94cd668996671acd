"""The simulated engine's decode step as a function of the batch, and the one knob that shifts it
(SGLang's --cuda-graph-max-bs): pure, no clock. Speed itself is measured by
benchmarks/decode_curve.py, never here."""

from __future__ import annotations

import pytest

from repro.cli import build_parser
from repro.sim.config import SimConfig, SimConfigError
from repro.sim.engine import decode_step_seconds

CURVE = dict(itl=0.02, itl_per_request=0.0002, wave_size=16, wave_step=0.002)


def test_the_default_is_the_flat_itl_the_sim_always_had():
    config = SimConfig()
    assert {decode_step_seconds(config, batch) for batch in (0, 1, 48, 64, 1000)} == {config.itl}


@pytest.mark.parametrize(("batch", "expected"), [
    (1, 0.02 + 0.0002 * 1 + 0.002 * 1),
    (16, 0.02 + 0.0002 * 16 + 0.002 * 1),
    (17, 0.02 + 0.0002 * 17 + 0.002 * 2),  # one request past a full wave costs a whole wave
    (48, 0.02 + 0.0002 * 48 + 0.002 * 3),
    (64, 0.02 + 0.0002 * 64 + 0.002 * 4),
])
def test_base_plus_per_request_plus_a_step_every_wave(batch, expected):
    assert decode_step_seconds(SimConfig(**CURVE), batch) == pytest.approx(expected)


def test_the_knob_slows_only_batches_above_it():
    off, on = SimConfig(**CURVE, cuda_graph_max_bs=48), SimConfig(**CURVE, cuda_graph_max_bs=64)
    ratio = {batch: decode_step_seconds(off, batch) / decode_step_seconds(on, batch) for batch in (32, 48, 49, 64, 65, 96)}
    # At or below 48 both run graphed; between 49 and 64 only the raised setting does; above 64 neither.
    assert ratio[32] == ratio[48] == 1.0
    assert ratio[49] == ratio[64] == pytest.approx(off.no_graph_slowdown)
    assert ratio[65] == ratio[96] == pytest.approx(1.0)
    # Throughput of a full batch, tokens per second: the gain shows at 64 and nowhere else.
    gain = {b: (b / decode_step_seconds(on, b)) / (b / decode_step_seconds(off, b)) - 1 for b in (48, 64, 80, 96)}
    assert gain[48] == gain[80] == gain[96] == pytest.approx(0.0) and gain[64] == pytest.approx(0.13)


@pytest.mark.parametrize(("field", "value", "flag"), [
    ("itl_per_request", -0.1, "--itl-per-request"), ("wave_size", -1, "--wave-size"),
    ("cuda_graph_max_bs", 0, "--cuda-graph-max-bs"), ("no_graph_slowdown", 0.5, "--no-graph-slowdown"),
])
def test_bad_settings_name_the_flag(field, value, flag):
    with pytest.raises(SimConfigError, match=flag):
        SimConfig(**{field: value}).validate()


def test_to_args_carries_the_curve_to_the_sim_process():
    config = SimConfig(**CURVE, cuda_graph_max_bs=48, no_graph_slowdown=1.2, api_key="sk-test")
    args = build_parser().parse_args(["sim", *config.to_args()])
    assert (args.itl, args.itl_per_request, args.wave_size, args.wave_step, args.cuda_graph_max_bs,
            args.no_graph_slowdown, args.api_key) == (0.02, 0.0002, 16, 0.002, 48, 1.2, "sk-test")
    unset = build_parser().parse_args(["sim", *SimConfig().to_args()])
    assert unset.cuda_graph_max_bs is None and unset.api_key is None
