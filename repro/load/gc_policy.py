"""Garbage-collector settings for streaming, applied around a run of the driver by whoever runs it."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_tuned_for_streaming(young_threshold: int = 20_000) -> Iterator[None]:
    """Cheaper garbage collection while streams run, restored afterwards.

    Every chunk allocates a few short-lived containers (h11 events, tuples), so the default
    young-generation threshold of 700 triggers collections that also walk the long-lived
    heap (clients, connections, histories): 15-20% of the driver's CPU at 256 streams.
    Freezing what exists at start (modules, config) and collecting the young generation
    every 20k allocations instead keeps reference cycles collected, only less often.
    """
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(old[0], young_threshold), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()
