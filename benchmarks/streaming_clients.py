"""The streaming clients the driver benchmark compares, each run in its own process.

- ours: repro's Driver (aiohttp + anyio), run log included, exactly as `repro run` drives.
- ours_unpaced: the same with its start pacer off (--max-start-rate 0), to show what the pacer buys.
- ours_httpx, ours_openai, ours_openai_async: the Driver through its other clients (--client), for
  benchmarks/clients.py.
- ours_messages, ours_responses: the Driver speaking the other wire APIs (--api), for
  benchmarks/wire_apis.py.
- aiohttp: a minimal client written the way vLLM's benchmark client is: one shared session,
  iterate over body bytes, split on blank lines, json.loads per event.
- raw: asyncio streams that only read and split the bytes (no HTTP library, no JSON), with the
  driver's 64 KiB read size: the floor.
- httpx_floor: httpx + anyio the way the driver used them before it moved to aiohttp (one
  single-connection client per conversation, aiter_raw) doing nothing per chunk except count
  blank lines like raw: the least any httpx-based driver can cost. It stays as the evidence for
  the move: it is above aiohttp's whole cost.

Each prints one JSON line: events received, rounds completed, CPU seconds of this process, wall
seconds, peak RSS, the event-loop lag p99 (ours: from the driver's own LoopLag events; the
others: the same monitor as a task of their own) and (ours) the most rounds in flight at once.
Run as `python benchmarks/streaming_clients.py KIND URL CONVERSATIONS ROUNDS MAX_TOKENS`.
"""

from __future__ import annotations

import asyncio
import json
import math
import resource
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

MODEL = "sim-model"


def user_turn(conv: int, round_index: int) -> str:
    return f"conversation {conv} round {round_index}: what next? " + "context " * 20


class LagMonitor:
    """The driver's loop-lag measure (repro.load.watchdog.Watchdog.watch_loop_lag) for the other
    clients: sleep 50 ms, record the overshoot, p99 per second; the worst second is reported."""

    def __init__(self) -> None:
        self.p99s: list[float] = []

    async def run(self, sleep, interval: float = 0.05) -> None:
        lags: list[float] = []
        last = time.monotonic()
        try:
            while True:
                before = time.monotonic()
                await sleep(interval)
                after = time.monotonic()
                lags.append(max(0.0, after - before - interval))
                if after - last >= 1.0:
                    self._report(lags)
                    last = after
        finally:
            self._report(lags)

    def _report(self, lags: list[float]) -> None:
        if lags:
            lags.sort()
            self.p99s.append(lags[min(len(lags) - 1, math.ceil(0.99 * len(lags)) - 1)] * 1000)
            lags.clear()

    @property
    def p99_ms(self) -> float:
        return max(self.p99s) if self.p99s else 0.0


async def with_lag_monitor(work) -> float:
    """Run `work` (a coroutine) on asyncio with a lag monitor beside it; return the lag p99."""
    monitor = LagMonitor()
    task = asyncio.ensure_future(monitor.run(asyncio.sleep))
    try:
        await work
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return monitor.p99_ms


def request_body(messages: list[dict], max_tokens: int) -> dict:
    return {"model": MODEL, "messages": messages, "stream": True, "max_tokens": max_tokens,
            "stream_options": {"include_usage": True}}


def run_ours(url: str, conversations: int, rounds: int, max_tokens: int, max_start_rate: float | None = None,
             client: str = "aiohttp", api: str = "chat") -> dict:
    import anyio

    from repro.core import events as ev
    from repro.io.runlog import RunLogWriter
    from repro.load.driver import Driver, DriverConfig
    from repro.load.gc_policy import gc_tuned_for_streaming
    from repro.load.prompts import PromptSource

    lags: list[float] = []
    counts = {"events": 0, "in_flight": 0, "peak_in_flight": 0}
    ended = (ev.RoundDone, ev.RoundFailed, ev.RoundAbandoned)
    with tempfile.TemporaryDirectory() as tmp:
        log = RunLogWriter(Path(tmp))

        def emit(event: ev.Event) -> None:
            log.write(event)
            if type(event) is ev.SSEReceived:
                counts["events"] += event.events  # one record per read, of one or more SSE events
            elif type(event) is ev.LoopLag:
                lags.append(event.p99_ms)
            elif type(event) is ev.RoundStarted:
                counts["in_flight"] += 1
                counts["peak_in_flight"] = max(counts["peak_in_flight"], counts["in_flight"])
            elif type(event) in ended:
                counts["in_flight"] -= 1

        config = DriverConfig(base_url=url, model=MODEL, rounds=rounds, conversations=conversations,
                              max_tokens=max_tokens, stall_after=30.0, round_timeout=120.0, connect_timeout=10.0,
                              # The same load shape as the other clients: every conversation starts at once.
                              ramp_up=0.0, client=client, api=api,
                              **({} if max_start_rate is None else {"max_start_rate": max_start_rate}))
        # The very same user turns as the other clients send.
        prompts = PromptSource(conversations=[[user_turn(c, r) for r in range(1, rounds + 1)] for c in range(conversations)])
        driver = Driver(config, prompts, emit)

        async def drive() -> list:
            # As `repro run` drives: the GC settings are the runner's, around the driver's run.
            with gc_tuned_for_streaming():
                return await driver.run()

        outcomes = anyio.run(drive)
        log.close()
    completed = sum(o.status == "completed" for o in outcomes)
    return {"events": counts["events"], "rounds": completed,
            "loop_lag_p99_ms": max(lags) if lags else 0.0, "peak_in_flight": counts["peak_in_flight"]}


def run_aiohttp(url: str, conversations: int, rounds: int, max_tokens: int) -> dict:
    import aiohttp

    async def main() -> dict:
        counts = {"events": 0, "rounds": 0}
        connector = aiohttp.TCPConnector(limit=conversations)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:

            async def conversation(conv: int) -> None:
                messages: list[dict] = []
                for r in range(1, rounds + 1):
                    messages.append({"role": "user", "content": user_turn(conv, r)})
                    reply = []
                    async with session.post(url + "/v1/chat/completions", json=request_body(messages, max_tokens)) as resp:
                        buffer = b""
                        async for chunk in resp.content.iter_any():
                            buffer += chunk
                            while b"\n\n" in buffer:
                                event, buffer = buffer.split(b"\n\n", 1)
                                if not event.startswith(b"data: "):
                                    continue
                                data = event[6:]
                                counts["events"] += 1
                                if data == b"[DONE]":
                                    continue
                                obj = json.loads(data)
                                for choice in obj.get("choices") or []:
                                    content = (choice.get("delta") or {}).get("content")
                                    if content:
                                        reply.append(content)
                    messages.append({"role": "assistant", "content": "".join(reply)})
                    counts["rounds"] += 1

            counts["loop_lag_p99_ms"] = await with_lag_monitor(
                asyncio.gather(*(conversation(c) for c in range(conversations))))
        return counts

    return asyncio.run(main())


def run_raw(url: str, conversations: int, rounds: int, max_tokens: int) -> dict:
    parts = urlsplit(url)
    host, port = parts.hostname, parts.port

    async def main() -> dict:
        counts = {"events": 0, "rounds": 0}

        async def conversation(conv: int) -> None:
            reader, writer = await asyncio.open_connection(host, port)
            # The driver's read size (repro.load.clients.aiohttp_transport.READ_SIZE), so that the floor is a floor: with
            # asyncio's default 256 KiB, every small read also pays an mmap and munmap.
            writer.transport.max_size = 64 * 1024
            messages: list[dict] = []
            try:
                for r in range(1, rounds + 1):
                    messages.append({"role": "user", "content": user_turn(conv, r)})
                    body = json.dumps(request_body(messages, max_tokens)).encode()
                    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                                 b"content-length: %d\r\n\r\n%s" % (len(body), body))
                    buffer = b""
                    while True:
                        data = await reader.read(65536)
                        if not data:
                            return
                        buffer += data
                        if buffer.endswith(b"0\r\n\r\n"):
                            break
                    counts["events"] += buffer.count(b"\n\n")  # headers end in \r\n\r\n: only SSE events count
                    counts["rounds"] += 1
                    messages.append({"role": "assistant", "content": "reply"})
            finally:
                writer.close()

        counts["loop_lag_p99_ms"] = await with_lag_monitor(
            asyncio.gather(*(conversation(c) for c in range(conversations))))
        return counts

    return asyncio.run(main())


def run_httpx_floor(url: str, conversations: int, rounds: int, max_tokens: int) -> dict:
    import ssl

    import anyio
    import httpx

    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # never used on http; the old driver's choice too
    counts = {"events": 0, "rounds": 0}

    async def conversation(conv: int) -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(limits=limits, verify=tls, trust_env=False, timeout=60.0) as client:
            messages: list[dict] = []
            for r in range(1, rounds + 1):
                messages.append({"role": "user", "content": user_turn(conv, r)})
                async with client.stream("POST", url + "/v1/chat/completions",
                                         json=request_body(messages, max_tokens)) as response:
                    async for chunk in response.aiter_raw():
                        counts["events"] += chunk.count(b"\n\n")
                counts["rounds"] += 1
                messages.append({"role": "assistant", "content": "reply"})

    async def main() -> None:
        monitor = LagMonitor()
        async with anyio.create_task_group() as outer:
            outer.start_soon(monitor.run, anyio.sleep)
            async with anyio.create_task_group() as tasks:
                for conv in range(conversations):
                    tasks.start_soon(conversation, conv)
            outer.cancel_scope.cancel()
        counts["loop_lag_p99_ms"] = monitor.p99_ms

    anyio.run(main)
    return counts


def run_ours_unpaced(url: str, conversations: int, rounds: int, max_tokens: int) -> dict:
    """The driver with its start pacer off (--max-start-rate 0): rounds that end together start together."""
    return run_ours(url, conversations, rounds, max_tokens, max_start_rate=0.0)


def ours_with(client: str):
    """The driver streaming through another of its clients (--client): `ours_httpx`, `ours_openai`..."""
    def run(url: str, conversations: int, rounds: int, max_tokens: int) -> dict:
        return run_ours(url, conversations, rounds, max_tokens, client=client)

    return run


def ours_on(api: str):
    """The driver speaking another wire API (--api): `ours_messages`, `ours_responses`."""
    def run(url: str, conversations: int, rounds: int, max_tokens: int) -> dict:
        return run_ours(url, conversations, rounds, max_tokens, api=api)

    return run


RUNNERS = {"ours": run_ours, "ours_unpaced": run_ours_unpaced, "aiohttp": run_aiohttp, "raw": run_raw,
           "httpx_floor": run_httpx_floor, "ours_httpx": ours_with("httpx"), "ours_openai": ours_with("openai"),
           "ours_openai_async": ours_with("openai-async"), "ours_messages": ours_on("messages"),
           "ours_responses": ours_on("responses")}


def preload(kind: str) -> None:
    """Import each client's libraries before the clock starts: we compare streaming, not imports."""
    if kind.startswith("ours"):
        import aiohttp  # noqa: F401
        import anyio  # noqa: F401

        import repro.io.runlog  # noqa: F401
        import repro.load.driver  # noqa: F401
        import repro.load.gc_policy  # noqa: F401
        if kind == "ours_httpx":
            import repro.load.clients.httpx_client  # noqa: F401
        elif kind.startswith("ours_openai"):
            import repro.load.clients.openai_client  # noqa: F401
    elif kind == "aiohttp":
        import aiohttp  # noqa: F401
    elif kind == "httpx_floor":
        import anyio  # noqa: F401
        import httpx  # noqa: F401


def main() -> None:
    kind, url, conversations, rounds, max_tokens = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    preload(kind)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = RUNNERS[kind](url, conversations, rounds, max_tokens)
    result.update(
        kind=kind,
        cpu_s=time.process_time() - cpu0,
        wall_s=time.perf_counter() - wall0,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
