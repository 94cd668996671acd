"""Streamed chat completions held open against a server: a known number of requests in flight."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx


class HeldStreams:
    """n streamed chat completions kept open (and read) from a thread of their own until close()."""

    def __init__(self, url: str, n: int, *, model: str = "sim-model", max_tokens: int = 100_000) -> None:
        self.url, self.n, self.model, self.max_tokens = url.rstrip("/") + "/v1/chat/completions", n, model, max_tokens
        self.statuses: list[int] = []
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),), daemon=True)

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(60.0),
                                     limits=httpx.Limits(max_connections=self.n)) as client:
            tasks = [asyncio.ensure_future(self._one(client, i)) for i in range(self.n)]
            await asyncio.wait_for(self._stop.wait(), 80)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _one(self, client: httpx.AsyncClient, i: int) -> None:
        body = {"model": self.model, "stream": True, "max_tokens": self.max_tokens,
                "messages": [{"role": "user", "content": f"hold stream {i}"}]}
        async with client.stream("POST", self.url, json=body) as response:
            self.statuses.append(response.status_code)
            async for _ in response.aiter_bytes():
                pass

    def __enter__(self) -> HeldStreams:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        while self._stop is None:
            time.sleep(0.01)
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
