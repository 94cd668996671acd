"""What a `repro watch` is told: its settings (built by repro/commands/watch.py from the flags)
and the rotating run log's bounds."""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from repro.core.hop import Hop
from repro.core.wire_api import Api
from repro.io.rotating_log import (
    DEFAULT_KEEP_BYTES,
    DEFAULT_KEEP_SECONDS,
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_SEGMENT_SECONDS,
)
from repro.load.driver import DriverConfig
from repro.load.prompts import PromptSource


def default_watch_dir() -> Path:
    return Path("runs") / f"watch-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


@dataclass(frozen=True)
class LogBounds:
    """The rotating run log's bounds (repro/io/rotating_log.py has why these defaults)."""

    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    segment_seconds: float = DEFAULT_SEGMENT_SECONDS
    keep_seconds: float = DEFAULT_KEEP_SECONDS
    keep_bytes: int = DEFAULT_KEEP_BYTES


@dataclass
class WatchSettings:
    driver: DriverConfig  # base_url and model are set per stack; conversations: per stack
    prompts: PromptSource
    sock: socket.socket  # the --listen socket, bound by the command (a port in use is a usage error there)
    # target URL -> (model, listed): the first model it lists, or (unlisted_model, False) when it did
    # not answer; a ReproError when it answered without a model list. Blocking: run in a thread.
    model_of: Callable[[str], tuple[str, bool]] = lambda url: ("", False)
    unlisted_model: str = "unlisted"
    hops: list[Hop] = field(default_factory=list)  # given (--hop, --topology, --target), client side first
    prometheus: str | None = None  # discovery: Prometheus's base URL
    selector: str = '{job="sglang"}'
    name_label: str = "instance"
    discover_every: float = 30.0
    per_engine: int = 1  # conversations per discovered engine (no --target)
    canary_every: float = 15.0
    canary_timeout: float = 3.0
    probe_interval: float = 2.0
    duration: float | None = None  # None: until a signal
    out: Path | None = None
    log: LogBounds = field(default_factory=LogBounds)
    # --api's APIs after the first (driver.api): fresh canaries only, each judged on its own
    # (repro/session/watch_apis.py), with its key (ANTHROPIC_API_KEY for messages)
    canary_apis: tuple[Api, ...] = ()
    api_keys: dict[str, str | None] = field(default_factory=dict)
