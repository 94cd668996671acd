"""Probes: every hop's metrics as one Snapshot, fresh-connection canaries, the fleet source.

Sans-I/O parsing (exposition, dialects, staleness) and a thin I/O shell (scrape, sampler, canary,
fleet). Imports only repro.core (tests/test_layers.py)."""

from probes.canary import run_canary
from probes.exposition import parse_metrics
from probes.sampler import Sampler
from probes.scrape import scrape

__all__ = ["Sampler", "parse_metrics", "run_canary", "scrape"]
