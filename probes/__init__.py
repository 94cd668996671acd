"""Probes: every hop's metrics as one Snapshot, fresh-connection canaries, topology, fleet source.

Sans-I/O core (exposition, dialects, staleness) and a thin I/O shell (scrape, sampler, canary,
fleet, command)."""

from probes.canary import CanaryOutcome, run_canary
from probes.exposition import parse_metrics
from probes.sampler import Sampler
from probes.scrape import scrape
from probes.snapshot import Snapshot
from probes.topology import Hop, TopologyError, load_topology, parse_hop_flag, parse_hop_flags

__all__ = ["CanaryOutcome", "Hop", "Sampler", "Snapshot", "TopologyError", "load_topology", "parse_hop_flag",
           "parse_hop_flags", "parse_metrics", "run_canary", "scrape"]
