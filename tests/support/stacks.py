"""Real third-party proxies for tests: the launchers of repro.lab.stacks, a missing binary a skip.

    with started(nginx, sim.url, tmp_path) as proxy: ...

Each waits (bounded) until listening and is always stopped (SIGCONT first), as repro.lab.stacks says.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from repro.lab.stacks import (
    LAUNCHERS,
    Proxy,
    StackUnavailable,
    buffering_mitmdump,
    caddy,
    haproxy,
    nginx,
    socat,
)

__all__ = ["LAUNCHERS", "Proxy", "buffering_mitmdump", "caddy", "haproxy", "nginx", "socat", "started"]


@contextlib.contextmanager
def started(launcher: Callable[..., contextlib.AbstractContextManager[Proxy]], upstream: str,
            workdir: Path | None = None, **options) -> Iterator[Proxy]:
    """A launcher from repro.lab.stacks; pytest.skip when its binary is not installed here."""
    try:
        with launcher(upstream, workdir, **options) as proxy:
            yield proxy
    except StackUnavailable as exc:  # only a launcher raises it, before anything started
        pytest.skip(str(exc))
