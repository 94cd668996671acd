"""The Prometheus fleet source: against a real Prometheus server (Debian `prometheus`, started here on
127.0.0.1 scraping simulated engines every second) when installed, and always against recorded
API answers served from a local socket."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import anyio
import pytest

from probes.fleet import FleetError, PrometheusFleet
from repro.sim import SimConfig, serve_in_thread
from tests.support.held_streams import HeldStreams
from tests.support.ports import refused_port
from tests.support.prometheus import prometheus_servers
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(90)


class FakePrometheus:
    """Serves one recorded API answer to every request on 127.0.0.1 and records what was asked."""

    def __init__(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.requests: list[tuple[str, str, str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                owner.requests.append((self.command, self.path, self.rfile.read(length).decode()))
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakePrometheus:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def vector(*series) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": metric, "value": [1700000000.0, str(value)]} for metric, value in series]}}).encode()


RECORDED_INSTANT = vector(
    ({"__name__": "sglang:num_running_reqs", "instance": "10.0.0.1:30000", "job": "sglang", "model_name": "m",
      "tp_rank": "0", "pp_rank": "0", "engine_type": "unified"}, 4),
    ({"__name__": "sglang:num_running_reqs", "instance": "10.0.0.1:30000", "job": "sglang", "model_name": "m",
      "tp_rank": "1", "pp_rank": "0", "engine_type": "unified"}, 4),
    ({"__name__": "sglang:num_queue_reqs", "instance": "10.0.0.1:30000", "job": "sglang", "model_name": "m",
      "tp_rank": "0", "pp_rank": "0", "engine_type": "unified"}, 2),
    ({"__name__": "sglang:inter_token_latency_seconds_count", "instance": "10.0.0.1:30000", "job": "sglang",
      "model_name": "m"}, 900),
    ({"__name__": "up", "instance": "10.0.0.1:30000", "job": "sglang"}, 1),
    ({"__name__": "sglang:num_running_reqs", "instance": "10.0.0.2:30000", "job": "sglang", "model_name": "m",
      "tp_rank": "0", "pp_rank": "0", "engine_type": "unified"}, 0),
    ({"__name__": "up", "instance": "10.0.0.2:30000", "job": "sglang"}, 1),
    ({"__name__": "up", "instance": "10.0.0.3:30000", "job": "sglang"}, 0),
)

RECORDED_RANGE = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
    {"metric": {"__name__": "vllm:num_requests_running", "instance": "a:8000", "job": "sglang", "engine": "0"},
     "values": [[100.0, "2"], [101.0, "2"], [102.0, "2"], [103.0, "2"]]},
    {"metric": {"__name__": "vllm:generation_tokens_total", "instance": "a:8000", "job": "sglang", "engine": "0"},
     "values": [[100.0, "10"], [101.0, "20"], [102.0, "30"], [103.0, "40"]]},
    {"metric": {"__name__": "sglang:num_running_reqs", "instance": "b:30000", "job": "sglang", "tp_rank": "0"},
     "values": [[100.0, "3"], [101.0, "3"], [102.0, "3"], [103.0, "3"]]},
    {"metric": {"__name__": "sglang:inter_token_latency_seconds_count", "instance": "b:30000", "job": "sglang"},
     "values": [[100.0, "7"], [101.0, "7"], [102.0, "7"], [103.0, "7"]]},
]}}).encode()


@pytest.mark.network
def test_recorded_instant_query():
    with FakePrometheus(200, RECORDED_INSTANT) as server:
        fleet = PrometheusFleet(server.url, '{job="sglang"}')
        snapshots = anyio.run(fleet.snapshots)
    method, path, body = server.requests[0]
    assert (method, path) == ("POST", "/api/v1/query")
    query = parse_qs(body)["query"][0]
    assert query.startswith('{__name__=~"') and query.endswith(',job="sglang"}') and "sglang:num_running_reqs" in query
    by_instance = {s.url: s for s in snapshots}
    a, b, c = by_instance["10.0.0.1:30000"], by_instance["10.0.0.2:30000"], by_instance["10.0.0.3:30000"]
    assert (a.ok, a.dialect, a.running, a.queued, a.itl_count) == (True, "sglang", 4, 2, 900)
    assert a.labels["instance"] == "10.0.0.1:30000" and a.hop == "10.0.0.1:30000"
    assert (b.ok, b.running) == (True, 0)
    assert not c.ok and "up=0" in c.error


@pytest.mark.network
def test_recorded_range_query_gives_rates_and_staleness():
    with FakePrometheus(200, RECORDED_RANGE) as server:
        fleet = PrometheusFleet(server.url)
        snapshots = anyio.run(lambda: fleet.snapshots_with_rates(window=3, step=1))
    method, path, body = server.requests[0]
    assert (method, path) == ("POST", "/api/v1/query_range") and parse_qs(body)["step"] == ["1"]
    a, b = snapshots
    assert (a.url, a.dialect, a.running, a.gen_tokens_per_s, a.stale) == ("a:8000", "vllm", 2, 10.0, [])
    assert (b.url, b.dialect, b.itl_per_s, b.stale) == ("b:30000", "sglang", 0.0, ["sglang:num_running_reqs"])


def test_query_text_and_bad_input():
    fleet = PrometheusFleet("http://p:9090", '{job="sglang", cluster=~"eu.*"}')
    query = fleet.query(("sglang:num_running_reqs", "up"))
    assert query == '{__name__=~"sglang:num_running_reqs|up",job="sglang", cluster=~"eu.*"}'
    assert PrometheusFleet("http://p:9090", "{}").query(("up",)) == '{__name__=~"up"}'
    with pytest.raises(FleetError, match="label selector"):
        PrometheusFleet("http://p:9090", 'job="sglang"')
    with pytest.raises(FleetError, match="not http"):
        PrometheusFleet("p:9090")


@pytest.mark.network
def test_errors_are_snapshots_not_exceptions():
    fleet = PrometheusFleet(f"http://127.0.0.1:{refused_port()}", timeout=1)
    [snapshot] = anyio.run(fleet.snapshots)
    assert not snapshot.ok and snapshot.error.startswith("connect: connection refused")
    bad = json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}).encode()
    with FakePrometheus(400, bad) as server:
        [snapshot] = anyio.run(PrometheusFleet(server.url).snapshots)
    assert not snapshot.ok and "bad_data" in snapshot.error
    with FakePrometheus(200, b"<html>grafana</html>", "text/html") as server:
        [snapshot] = anyio.run(PrometheusFleet(server.url).snapshots)
    assert not snapshot.ok and "not JSON" in snapshot.error


# --- a real Prometheus server -----------------------------------------------------------------

@pytest.fixture
def prometheus(tmp_path):
    """Start Prometheus on 127.0.0.1 scraping the targets a test names every second: its URL."""
    with prometheus_servers(tmp_path) as start:
        yield lambda targets: start({"sglang": targets}).url


@pytest.mark.network
def test_real_prometheus_scraping_simulated_engines(prometheus):
    with serve_in_thread(SimConfig(dialect="sglang", max_running=2, itl=0.01)) as a, \
            serve_in_thread(SimConfig(dialect="vllm", itl=0.01)) as b:
        down = f"127.0.0.1:{refused_port()}"
        targets = [a.url.removeprefix("http://"), b.url.removeprefix("http://"), down]
        url = prometheus(targets)
        fleet = PrometheusFleet(url, '{job="sglang"}')
        with HeldStreams(a.url, 5), HeldStreams(b.url, 2):
            def settled():
                snapshots = {s.url: s for s in anyio.run(fleet.snapshots)}
                sa, sb = snapshots.get(targets[0]), snapshots.get(targets[1])
                if sa and sb and (sa.running, sa.queued, sb.running) == (2, 3, 2) and down in snapshots:
                    return snapshots
                return None

            snapshots = wait_for(settled, timeout=30, what="prometheus showing both sims busy")
            time.sleep(3)  # a few more 1 s scrapes so the range query has points to take rates from
            rated = {s.url: s for s in anyio.run(lambda: fleet.snapshots_with_rates(window=4, step=1))}
    sa, sb, sd = snapshots[targets[0]], snapshots[targets[1]], snapshots[down]
    assert sa.ok and sa.dialect == "sglang" and sa.labels["model_name"] == "sim-model"
    assert sb.ok and sb.dialect == "vllm" and sb.gen_tokens_total > 0
    assert not sd.ok and "up=0" in sd.error
    assert rated[targets[1]].gen_tokens_per_s > 0 and rated[targets[1]].itl_per_s > 0  # vLLM counts per step
    assert rated[targets[0]].itl_per_s > 0  # SGLang: the ITL histogram count moves while streams flow


@pytest.mark.network
def test_repro_probe_reads_a_fleet_through_prometheus(prometheus, capsys):
    from repro.cli import main

    with serve_in_thread(SimConfig(dialect="sglang", max_running=1, itl=0.01)) as a:
        target = a.url.removeprefix("http://")
        url = prometheus([target])
        with HeldStreams(a.url, 3):
            def settled():
                capsys.readouterr()
                code = main(["probe", "--prometheus", url, "--selector", '{job="sglang"}', "--json"])
                rows = json.loads(capsys.readouterr().out)
                row = next((r for r in rows if r["url"] == target), None)
                return (code, row) if row and (row["running"], row["queued"]) == (1, 2) else None

            code, row = wait_for(settled, timeout=30, what="prometheus showing the sim busy")
    assert code == 0 and row["ok"] and row["dialect"] == "sglang"
    assert main(["probe", "--prometheus", "127.0.0.1:9090"]) == 2  # not a URL: one-line usage error
