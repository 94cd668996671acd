"""The simulated engine: OpenAI-compatible, SGLang/vLLM metric dialects with their quirks, injectable faults."""

from repro.sim.config import QUIRKS, SIM_FAULTS, SimConfig, SimConfigError, parse_sim_fault
from repro.sim.server import SimProcess, SimThread, serve_in_thread, start_sim_process

__all__ = ["QUIRKS", "SIM_FAULTS", "SimConfig", "SimConfigError", "SimProcess", "SimThread", "parse_sim_fault",
           "serve_in_thread", "start_sim_process"]
