"""What the fault proxy costs in pass-through: events/s and latency per SSE event, proxy vs direct.

One run, same machine, same upstream, direct and proxied rounds interleaved so that drift hits both:
- throughput: the upstream writes N events as fast as it can; events/s seen by the client.
- latency: the upstream writes an event every PACE ms carrying its own time.monotonic(); the
  client (same process, same clock) records arrival - sent per event. Added latency = proxied - direct.

    .venv/bin/python benchmarks/bench_proxy.py [--events 2000] [--rounds 5] [--mode subprocess|inprocess]

Prints one JSON object. The proxy runs as a mitmdump subprocess by default so that it does not
share the client's GIL (in-process numbers are worse for that reason, not because of mitmproxy).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxies import start_proxy  # noqa: E402


class PacedSSEServer:
    """Keep-alive HTTP/1.1 SSE server: POST /flood?n=N (as fast as possible), POST /paced?n=N&ms=M."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> PacedSSEServer:
        self.thread.start()
        self.ready.wait(5)
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self.stop_event = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        self.ready.set()
        await self.stop_event.wait()
        server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1].decode()
                params = dict(p.split("=") for p in target.split("?", 1)[1].split("&"))
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                if length:
                    await reader.readexactly(length)
                n, pace = int(params["n"]), float(params.get("ms", 0)) / 1000
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
                for i in range(n):
                    if pace:
                        await asyncio.sleep(pace)
                    event = b'data: {"i":%d,"t":%.6f,"choices":[{"delta":{"content":"tok "}}]}\n\n' % (i, time.monotonic())
                    writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                    if pace or i % 32 == 0:
                        await writer.drain()
                done = b"data: [DONE]\n\n"
                writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(5)


def stream(client: httpx.Client, path: str) -> tuple[int, float, list[float]]:
    """(events, seconds, per-event latencies) of one streamed request."""
    started = time.monotonic()
    latencies: list[float] = []
    count = 0
    with client.stream("POST", path, content=b"{}", timeout=httpx.Timeout(30.0)) as response:
        for line in response.iter_lines():
            if line.startswith('data: {"i"'):
                count += 1
                sent = float(line.split('"t":', 1)[1].split(",", 1)[0])
                latencies.append(time.monotonic() - sent)
    return count, time.monotonic() - started, latencies


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000, help="events per flood round")
    parser.add_argument("--paced-events", type=int, default=200, help="events per paced round")
    parser.add_argument("--pace-ms", type=float, default=5.0, help="gap between paced events")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per path and kind (interleaved)")
    parser.add_argument("--mode", choices=("subprocess", "inprocess"), default="subprocess")
    args = parser.parse_args()

    server = PacedSSEServer().start()
    proxy = start_proxy(server.url, None, mode=args.mode)
    try:
        flood = {"direct": [0, 0.0], "proxy": [0, 0.0]}
        paced: dict[str, list[float]] = {"direct": [], "proxy": []}
        with httpx.Client(base_url=server.url) as direct, httpx.Client(base_url=proxy.url) as proxied:
            clients = {"direct": direct, "proxy": proxied}
            for client in clients.values():  # warm-up: connections, imports, caches
                stream(client, "/flood?n=50")
            for _ in range(args.rounds):
                for name, client in clients.items():
                    events, seconds, _ = stream(client, f"/flood?n={args.events}")
                    flood[name][0] += events
                    flood[name][1] += seconds
                for name, client in clients.items():
                    _, _, latencies = stream(client, f"/paced?n={args.paced_events}&ms={args.pace_ms}")
                    paced[name].extend(latencies)
    finally:
        proxy.stop()
        server.stop()

    rate = {name: events / seconds for name, (events, seconds) in flood.items()}
    lat = {name: {"p50_ms": round(statistics.median(v) * 1000, 3), "p99_ms": round(pct(v, 0.99) * 1000, 3),
                  "mean_ms": round(statistics.fmean(v) * 1000, 3)} for name, v in paced.items()}
    result = {
        "mode": args.mode,
        "events_per_round": args.events,
        "rounds": args.rounds,
        "events_per_s": {"direct": round(rate["direct"]), "proxy": round(rate["proxy"]),
                         "ratio_proxy_to_direct": round(rate["proxy"] / rate["direct"], 3)},
        "latency_per_event": {**lat,
                              "added_p50_ms": round(lat["proxy"]["p50_ms"] - lat["direct"]["p50_ms"], 3),
                              "added_p99_ms": round(lat["proxy"]["p99_ms"] - lat["direct"]["p99_ms"], 3),
                              "ratio_p50_proxy_to_direct": round(lat["proxy"]["p50_ms"] / lat["direct"]["p50_ms"], 2)},
        "paced_events": len(paced["proxy"]),
        "pace_ms": args.pace_ms,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
