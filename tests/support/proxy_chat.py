"""One streamed chat round through a proxy, every SSE event timed, and what the engine and the
proxy say about it: for the fault proxy's and the relay's end-to-end tests."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any

import httpx

STALL_S = 0.8  # "nothing arrives" deadline for a held flow
BODY = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 6}


def engine_state(engine) -> dict[str, Any]:
    return httpx.get(engine.url + "/sim/state", timeout=5).json()


def metric(proxy, name: str) -> float:
    for line in httpx.get(proxy.metrics_url, timeout=5).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in proxy metrics")


class Outcome:
    def __init__(self) -> None:
        self.status: int | None = None
        self.events: list[str] = []
        self.times: list[float] = []
        self.error: BaseException | None = None
        self.started = time.monotonic()

    @property
    def done(self) -> bool:
        return "data: [DONE]" in self.events and self.error is None


def chat(client: httpx.Client, read_timeout: float = 5.0, body: dict | None = None) -> Outcome:
    """One streamed round; records every SSE event with its arrival time, and how it ended."""
    out = Outcome()
    timeout = httpx.Timeout(5.0, read=read_timeout)
    try:
        with client.stream("POST", "/v1/chat/completions", json=body or BODY, timeout=timeout) as response:
            out.status = response.status_code
            for line in response.iter_lines():
                if line.startswith("data:"):
                    out.events.append(line)
                    out.times.append(time.monotonic() - out.started)
    except httpx.HTTPError as exc:
        out.error = exc
    return out


@contextmanager
def client_for(url: str):
    with httpx.Client(base_url=url, limits=httpx.Limits(max_connections=1)) as client:
        yield client
