"""Hops found through Prometheus, from recorded API answers.

The recordings in tests/fixtures/prometheus/ are Debian Prometheus 2.42's own answers, taken while
it scraped a simulated SGLang engine (127.0.0.1:43667), a simulated vLLM engine (:41737), a refused
port (:9), and two pages of smg router metrics (job smg: :36399, and :39153 labelled
repro_api_url="http://127.0.0.1:30080"), every target labelled cluster="eu-1":
`/api/v1/targets?state=active` and the `/api/v1/series` discovery asks for. The pure tests read
them directly; the others serve them from a socket on 127.0.0.1 to discover_hops."""

from __future__ import annotations

import copy
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from probes.discovery import (
    DiscoveryError,
    discover_hops,
    hops_from_series,
    hops_from_targets,
    matching_targets,
    names_by_target,
)
from probes.fleet import FleetError, parse_selector
from repro.core.hop import hops_of_toml
from tests.support.ports import refused_port

pytestmark = pytest.mark.timeout(60)

RECORDED = Path(__file__).parent.parent / "fixtures" / "prometheus"
TARGETS = json.loads((RECORDED / "targets-2.42.json").read_text())
SERIES = json.loads((RECORDED / "series-2.42.json").read_text())
SGLANG, VLLM, DOWN, ROUTER, ROUTER_LABELLED = ("127.0.0.1:43667", "127.0.0.1:41737", "127.0.0.1:9",
                                               "127.0.0.1:36399", "127.0.0.1:39153")


def targets() -> list[dict]:
    return copy.deepcopy(TARGETS["data"]["activeTargets"])


def discovered(selector: str, name_label: str = "instance", active: list[dict] | None = None):
    found = matching_targets(targets() if active is None else active, parse_selector(selector))
    return hops_from_targets(found, names_by_target(SERIES["data"]), name_label)


def test_the_selector_matchers_filter_targets_as_prometheus_would():
    names = lambda selector: [h.name for h in discovered(selector)]  # noqa: E731
    assert names('{job="sglang"}') == [VLLM, SGLANG, DOWN]  # sorted by name
    assert names('{job!="sglang"}') == [ROUTER, ROUTER_LABELLED]
    assert names('{job=~"sg.*", instance!~".*:9"}') == [VLLM, SGLANG]
    assert names('{job=~"sg"}') == []  # a regex matches the whole value, as in PromQL
    assert names('{zone=""}') == names("{}") and len(names("{}")) == 5  # an absent label reads as ""
    assert names('{zone!=""}') == []
    assert names("{job=`smg`, repro_api_url=~'http://.*'}") == [ROUTER_LABELLED]  # raw and single-quoted strings


def test_engines_are_reached_at_their_scrape_origin_and_routers_by_metrics_only():
    hops = {h.name: h for h in discovered('{cluster="eu-1"}')}
    sglang, vllm, down = hops[SGLANG], hops[VLLM], hops[DOWN]
    assert (sglang.url, sglang.metrics_url, sglang.role, sglang.canary) == (
        f"http://{SGLANG}", f"http://{SGLANG}/metrics", "engine", True)
    assert (vllm.role, vllm.canary) == ("engine", True)
    assert (down.role, down.url) == ("engine", f"http://{DOWN}")  # no series to say otherwise: the selector chose it
    router = hops[ROUTER]  # smg: its scrape origin is the metrics port, not its API
    assert (router.role, router.url, router.metrics_url, router.canary) == (
        "router", f"http://{ROUTER}", f"http://{ROUTER}/metrics", False)
    assert router.to_dict()["canary"] is False and "canary" not in sglang.to_dict()
    labelled = hops[ROUTER_LABELLED]  # repro_api_url names its API: canaries go there
    assert (labelled.role, labelled.url, labelled.metrics_url, labelled.canary) == (
        "router", "http://127.0.0.1:30080", f"http://{ROUTER_LABELLED}/metrics", True)


def test_a_discovered_hop_is_the_hop_a_stack_file_gives():
    [hop] = discovered(f'{{instance="{SGLANG}"}}')
    [typed] = hops_of_toml(f'[[hop]]\nname = "{SGLANG}"\nurl = "http://{SGLANG}"\n', "stack.toml")
    assert hop == typed and type(hop) is type(typed)


def test_the_name_label_and_repro_role_labels():
    active = targets()
    for i, target in enumerate(active):
        if target["labels"]["job"] == "sglang" and target["labels"]["instance"] != DOWN:
            target["labels"]["pod"] = f"engine-{i}"
    active[0]["labels"]["repro_role"] = "proxy"
    hops = {h.name: h for h in discovered("{}", name_label="pod", active=active)}
    assert sorted(hops) == sorted(["engine-0", "engine-1", DOWN, ROUTER, ROUTER_LABELLED])  # no pod label: instance
    assert hops["engine-0"].url == f"http://{SGLANG}" and hops["engine-0"].role == "proxy"
    assert not hops["engine-0"].canary  # a proxy found by its scrape port is not sent canaries either
    with pytest.raises(FleetError, match=r"name label 'job': two targets are both named 'sglang'"):
        discovered("{}", name_label="job")
    active[1]["labels"]["repro_role"] = "gateway"
    with pytest.raises(FleetError, match=r"label repro_role='gateway' is not one of proxy\|router\|engine"):
        discovered("{}", active=active)


def test_the_same_target_in_two_jobs_is_one_hop():
    active = targets()
    twin = copy.deepcopy(active[0])
    twin["labels"]["job"] = "sglang-again"
    assert [h.name for h in discovered("{}", active=active + [twin])].count(SGLANG) == 1


def test_series_alone_give_the_same_hops():
    from_series = hops_from_series(SERIES["data"], "instance")
    assert from_series == discovered('{cluster="eu-1"}')
    federated = [{"__name__": "vllm:num_requests_running", "instance": "vllm-0.llm.svc", "job": "federate"},
                 {"__name__": "vllm:num_requests_running", "instance": "vllm-1", "job": "federate",
                  "repro_api_url": "https://vllm-1.example:8443"}]
    [hop] = hops_from_series(federated, "instance")  # an instance that is no host:port needs repro_api_url
    assert (hop.name, hop.url, hop.metrics_url, hop.role) == (
        "vllm-1", "https://vllm-1.example:8443", "https://vllm-1.example:8443/metrics", "engine")


def test_bad_input_is_one_line():
    for selector, words in [('job="sglang"', "is not a label selector"), ('{job~"x"}', "cannot read"),
                            ('{job=~"("}', "is not a regular expression"), ("{job=sglang}", "cannot read")]:
        with pytest.raises(FleetError, match=words) as caught:
            anyio.run(lambda s=selector: discover_hops("http://127.0.0.1:9", s))
        assert "\n" not in str(caught.value)
    with pytest.raises(FleetError, match="not http"):
        anyio.run(lambda: discover_hops("127.0.0.1:9090", "{}"))
    with pytest.raises(FleetError, match="not a Prometheus label name"):
        anyio.run(lambda: discover_hops("http://127.0.0.1:9", "{}", name_label="pod name"))


SELECTOR_PIECES = ["{", "}", ",", " ", "job", "instance", "__name__", "=", "!=", "=~", "!~", '"', "'", "`", "\\",
                   "sglang", ".*", "(", "a{99999999999}", "[", "\\N{x}", "\x00", "é", "\n"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(SELECTOR_PIECES), max_size=16).map("".join))
@example('{job=~"a{99999999999}"}')
@example('{job="\x00"}')
def test_any_selector_is_matchers_or_one_line_fleet_error(text):
    try:
        matchers = parse_selector(text)
    except FleetError as exc:
        assert "\n" not in str(exc)
        return
    matching_targets(targets(), matchers)  # whatever parsed, evaluates


# --- discover_hops against recorded answers served on 127.0.0.1 ---------------------------------------

class RecordedPrometheus:
    """Answers each API path with a recorded (status, body), records the paths asked; a path it has
    no answer for gets Prometheus' own 404 text. `hang` keeps every request unanswered."""

    def __init__(self, answers: dict[str, tuple[int, bytes]], *, hang: bool = False) -> None:
        self.paths: list[str] = []
        self.forms: list[dict[str, list[str]]] = []  # each request's query or form body
        self.release = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                path = urlsplit(self.path).path
                owner.paths.append(path)
                body = self.rfile.read(int(self.headers.get("content-length", 0))).decode()
                owner.forms.append(parse_qs(body or urlsplit(self.path).query))
                if hang:
                    owner.release.wait(10)
                    return
                status, body = answers.get(path, (404, b"404 page not found\n"))
                self.send_response(status)
                self.send_header("content-type", "application/json" if body.startswith(b"{") else "text/plain")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> RecordedPrometheus:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def answer(document: dict) -> tuple[int, bytes]:
    return 200, json.dumps(document).encode()


@pytest.mark.network
def test_discover_hops_reads_the_targets_api_and_the_series_for_roles():
    with RecordedPrometheus({"/api/v1/targets": answer(TARGETS), "/api/v1/series": answer(SERIES)}) as server:
        hops = anyio.run(lambda: discover_hops(server.url, '{job="smg"}'))
    assert [(h.name, h.role, h.canary) for h in hops] == [(ROUTER, "router", False), (ROUTER_LABELLED, "router", True)]
    assert server.paths == ["/api/v1/targets", "/api/v1/series"] and server.forms[0] == {"state": ["active"]}
    [match] = server.forms[1]["match[]"]  # the names that tell a dialect, under the user's matchers
    assert match.startswith('{__name__=~"') and "smg_worker_health" in match and match.endswith(',job="smg"}')
    no_series = {"status": "success", "data": []}
    with RecordedPrometheus({"/api/v1/targets": answer(TARGETS), "/api/v1/series": answer(no_series)}) as server:
        assert anyio.run(lambda: discover_hops(server.url, '{job="none"}')) == []  # nothing matched: no error


@pytest.mark.network
def test_without_a_usable_targets_api_the_series_are_used():
    # Thanos or Mimir: no targets API (404 text, as Prometheus answers an unknown path).
    with RecordedPrometheus({"/api/v1/series": answer(SERIES)}) as server:
        hops = anyio.run(lambda: discover_hops(server.url, '{cluster="eu-1"}'))
        by_name = anyio.run(lambda: discover_hops(server.url, '{__name__="up", cluster="eu-1"}'))
    assert [h.name for h in hops] == [ROUTER, ROUTER_LABELLED, VLLM, SGLANG, DOWN]
    assert hops == hops_from_series(SERIES["data"], "instance")
    assert server.paths.count("/api/v1/targets") == 1  # the metric-name selector never asks for targets
    assert by_name == hops
    # Targets that answer but none match (series federated from another Prometheus): the series decide.
    empty = {"status": "success", "data": {"activeTargets": [], "droppedTargets": []}}
    with RecordedPrometheus({"/api/v1/targets": answer(empty), "/api/v1/series": answer(SERIES)}) as server:
        assert anyio.run(lambda: discover_hops(server.url, '{job="sglang"}')) == hops_from_series(SERIES["data"],
                                                                                                  "instance")


@pytest.mark.network
def test_no_prometheus_is_one_line_discovery_error_in_bounded_time():
    with pytest.raises(DiscoveryError, match=r"^prometheus discovery: connect: connection refused") as caught:
        anyio.run(lambda: discover_hops(f"http://127.0.0.1:{refused_port()}", "{}", timeout=2))
    assert "\n" not in str(caught.value)
    with RecordedPrometheus({"/api/v1/series": (200, b"<html>grafana</html>")}) as server:
        with pytest.raises(DiscoveryError, match="not JSON .is this the Prometheus URL"):
            anyio.run(lambda: discover_hops(server.url, "{}", timeout=2))
    with RecordedPrometheus({}, hang=True) as server:
        start = time.monotonic()
        with pytest.raises(DiscoveryError, match=r"no answer .*in 1 s"):
            anyio.run(lambda: discover_hops(server.url, "{}", timeout=1))
        assert time.monotonic() - start < 2.5
