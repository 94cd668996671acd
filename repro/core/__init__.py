"""The bottom layer: the vocabulary every other package speaks, with no I/O of its own.

Events and their typed payloads (Snapshot, CanaryOutcome, Verdict), the Hop, the fault-spec
grammar, the SSE decoder, the verdict's pure classify, the error base and the exit codes. Modules
here import nothing of ours outside `repro.core` (tests/test_layers.py checks it), so the probes,
the proxies and the simulated engine can all build on it.
"""
