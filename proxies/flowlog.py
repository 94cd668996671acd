"""The proxy's flow log: JSON Lines, one record per flow event, flushed per line.

`repro run` tails this file while the proxy runs (the proxy may be another process), so every
line is written whole and flushed at once. Records carry `t_mono` (time.monotonic(), the same
clock as the run) and `client` ("host:port" of the client peer) so a stalled round can be matched
to its own connection. Only method, path (no query string), status and counts are recorded:
never headers, so Authorization and api keys cannot leak. A `request_seen` record of one of repro's
own canaries (it carries the `x-repro-canary` header: repro.core.canary_outcome) says `canary: true`,
so a reader tells repro's probes from the client's requests; other records leave the field out.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

# events_forwarded is throttled: one line per this many seconds or events per flow, not one per event.
EVENTS_LOG_INTERVAL_S = 0.5
EVENTS_LOG_BATCH = 64


class FlowLog:
    def __init__(self, path: Path | str | None) -> None:
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self._file = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8", buffering=1)

    def write(self, event: str, *, flow: str | None = None, client: str | None = None, **fields: Any) -> None:
        if self._file is None:
            return
        record = {"t_mono": time.monotonic(), "flow": flow, "client": client, "event": event}
        record.update({k: v for k, v in fields.items() if v is not None})
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            if self._file is not None:
                self._file.write(line)
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def read_flow_log(path: Path | str) -> list[dict[str, Any]]:
    """Every whole record in a flow log (a half-written last line is skipped)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records
