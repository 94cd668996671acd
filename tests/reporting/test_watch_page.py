"""`repro watch`'s status page: what it says (pure), and the page as headless Chromium draws it from a
file with the network cut (and, for its self-update, served from 127.0.0.1)."""

from __future__ import annotations

import html
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from repro.core.watch_status import HopPoint, HopState, WatchStatus
from repro.reporting.watch_page import REFRESH_S, render_watch_page
from tests.support.browser import CHROMIUM, LOOPBACK_ONLY, dump_dom, measure, page_requests
from tests.support.verdict_cases import CASES

pytestmark = pytest.mark.timeout(120)
T0 = 1_764_900_000.0  # 2025-12-05 02:00:00 UTC: a status an hour old at NOW
NOW = T0 + 3600
HOSTILE = '<script>alert("x")</script> & <b>bold</b>'


def status_with_incident(*, cleared: bool = False) -> WatchStatus:
    """Two hops (an engine up with in-flight read, a proxy down whose in-flight was never read), the
    wedge verdict of a real run as the open incident, and an earlier engine hang that cleared."""
    status = WatchStatus(started_at=T0, listen="127.0.0.1:9464", cost={"requests_per_min": 4.0, "completion_tokens_per_min": 512,
                                                                                     "canary_requests_per_min": 120})
    engine = HopState(name="engine-0", url="http://127.0.0.1:30000", role="engine", up=True, canary_s=0.042,
                      in_flight=3, sampled_at=NOW - 2)
    proxy = HopState(name="nginx", url="http://127.0.0.1:8080/v1", role="proxy", up=False,
                     reason="connect: connection refused", canary_s=None, in_flight=None)
    for i in range(0, 3600, 15):
        engine.record(HopPoint(t=T0 + i, up=True, canary_s=0.04, in_flight=3))
        proxy.record(HopPoint(t=T0 + i, up=i < 3000, canary_s=0.05 if i < 3000 else None))
    status.hops = {"engine-0": engine, "nginx": proxy}
    hang = CASES["engine-hung"].to_dict()
    status.verdict(hang, at=T0 + 600, segment="segment-000001.jsonl")
    status.conversation_completed(started_at=T0 + 700, at=T0 + 900)
    wedge = CASES["connection-wedged"].to_dict()
    status.verdict(wedge, at=NOW - 300, segment="segment-000007.jsonl")
    status.verdict(wedge, at=NOW - 60, segment="segment-000008.jsonl")
    if cleared:
        status.conversation_completed(started_at=NOW - 50, at=NOW - 5)
    for outcome, n in (("completed", 118), ("stalled", 2), ("failed", 1)):
        for _ in range(n):
            status.round_ended(outcome, at=NOW - 10)
    status.loop_lag_s = 0.0031
    return status


def text_of(page: str) -> str:
    """The page's visible text, roughly: tags out, entities decoded, spaces collapsed."""
    body = re.sub(r"<(script|style|title)[^>]*>.*?</\1>", " ", page, flags=re.S)
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body))).strip()
    return re.sub(r"\s+([:,.;)\]])", r"\1", text)  # no space left where a tag closed before punctuation


def test_the_open_incident_comes_first_with_its_sentence_action_since_and_segment():
    status = status_with_incident()
    page = render_watch_page(status.to_dict(), now=NOW)
    text = text_of(page)
    wedge = CASES["connection-wedged"]
    assert "<title>repro watch: 1 open incident</title>" in page
    # The incident is the first thing under the heading, before any hop or verdict list.
    assert page.index('id="incidents"') < page.index('id="hops"') < page.index('id="verdicts"')
    incidents = text[text.index("Open"):text.index("Hops")]
    assert "CLIENT-SIDE" in incidents and wedge.kind in incidents and wedge.summary in incidents
    assert "Next: " + wedge.to_dict()["next_action"]["do"] in incidents
    assert "Confirm: " + wedge.to_dict()["next_action"]["confirm"] in incidents
    assert "Open since 02:55:00 UTC (5 min ago); 2 verdicts, the last 02:59:00 UTC (60 s ago)" in incidents
    assert "segment-000008.jsonl" in incidents and "segment-000007.jsonl" not in incidents
    assert "engine-hung" not in incidents  # cleared: listed under Cleared, not as open
    cleared = text[text.index("Cleared"):]
    assert "engine-hung: open 02:10:00 UTC (50 min ago), cleared 02:15:00 UTC (45 min ago)" in cleared


def test_a_cleared_incident_is_not_shown_as_open():
    page = render_watch_page(status_with_incident(cleared=True).to_dict(), now=NOW)
    text = text_of(page)
    assert "<title>repro watch: no open incident</title>" in page and 'class="verdict incident' not in page
    assert "No open incident. The last canary round ended 02:59:50 UTC (10 s ago)." in text
    assert "connection-wedged: open 02:55:00 UTC (5 min ago), cleared 02:59:55 UTC (5 s ago)" in text
    # The verdicts that opened it stay in the history, newest first.
    verdicts = text[text.index("Last verdicts"):text.index("Cleared")]
    assert verdicts.index("02:59:00 UTC") < verdicts.index("02:55:00 UTC") < verdicts.index("02:10:00 UTC")
    # The two wedge verdicts in a row are one line: the newest in full, then how many more since when.
    assert verdicts.count(CASES["connection-wedged"].summary) == 1
    assert "and 1 more like it since 02:55:00 UTC (5 min ago)" in verdicts


def test_each_hop_now_and_over_the_hour_and_not_read_is_never_idle():
    page = render_watch_page(status_with_incident().to_dict(), now=NOW)
    rows = dict(re.findall(r'<tr class="hop" data-hop="([^"]+)">(.*?)</tr>', page, re.S))
    engine, proxy = text_of(rows["engine-0"]), text_of(rows["nginx"])
    assert "up metrics checked 2 s ago 42 ms 3" in engine and "up in 240 of 240 checks" in engine
    assert "down: connect: connection refused metrics not read none answered not read" in proxy
    assert "up in 200 of 240 checks; last down 02:59:45 UTC" in proxy
    assert "idle" not in engine + proxy
    # The strip: 120 cells, the proxy's last ten minutes red, what was never checked blank.
    fills = re.findall(r'<rect [^>]*fill="([^"]+)"', rows["nginx"])
    assert len(fills) == 120 and fills[-20:] == ["#e53935"] * 20 and fills[0] == "#43a047"
    empty = HopState(name="new", url="http://127.0.0.1:1")
    page = render_watch_page({**status_with_incident().to_dict(), "hops": [empty.to_dict()]}, now=NOW)
    assert "new 127.0.0.1:1 not checked yet metrics not read none yet not read nothing checked in the last hour" in text_of(page)
    assert set(re.findall(r'<rect [^>]*fill="([^"]+)"', page)) == {"#f5f5f5"}
    read_only = HopState(name="smg", url="http://127.0.0.1:29000", role="router", takes_canary=False)
    read_only.sampled(in_flight=None, at=NOW - 3, answered=False, reason="connect: connection refused")
    page = render_watch_page({**status_with_incident().to_dict(), "hops": [read_only.to_dict()]}, now=NOW)
    assert ("smg (router) 127.0.0.1:29000 down: connect: connection refused metrics checked 3 s ago "
            "none sent (read by its metrics) not read") in text_of(page)


def test_rounds_and_the_watcher():
    text = text_of(render_watch_page(status_with_incident().to_dict(), now=NOW))
    assert "completed 118, failed 1, stalled 2. The last ended 02:59:50 UTC (10 s ago)." in text
    assert ("Loop lag 3.1 ms; cost 4 requests/min, 512 completion tokens/min, 120 canary requests/min; "
            "serving on 127.0.0.1:9464.") in text


def test_everything_from_the_status_is_escaped():
    status = status_with_incident()
    status.hops["nginx"].reason = HOSTILE
    status.hops[HOSTILE] = HopState(name=HOSTILE, url='http://127.0.0.1:1/"><script>x</script>', up=True)
    evil = {**CASES["engine-hung"].to_dict(), "where": HOSTILE, "summary": HOSTILE,
            "next_action": {"do": HOSTILE, "confirm": HOSTILE}}
    status.verdict(evil, at=NOW - 1, segment=HOSTILE)
    page = render_watch_page(status.to_dict(), now=NOW)
    assert page.count("<script") == 1  # the page's own, once
    assert "<b>bold</b>" not in page and HOSTILE not in page
    assert html.escape(HOSTILE, quote=True) in page
    assert text_of(page).count(HOSTILE) >= 5  # hop name, reason, where, summary, action: shown as text


def test_the_page_works_without_scripts_and_a_saved_copy_stays_put():
    page = render_watch_page(status_with_incident().to_dict(), now=NOW)
    assert f'<noscript><meta http-equiv="refresh" content="{REFRESH_S * 2}"></noscript>' in page
    assert "location.protocol==='file:'" in page  # a copy in a ticket does not poll
    for needle in ("<link", "<img", "<iframe", " src=", "@import", "url(", "http-equiv=\"refresh\" content=\"0"):
        assert needle not in page, needle


# --- in headless Chromium -------------------------------------------------------------------------

browser = pytest.mark.skipif(not CHROMIUM, reason="Debian chromium not installed")


@browser
@pytest.mark.network  # starts chromium
def test_chromium_shows_the_incident_and_each_hop_with_no_error_no_request_no_sideways_scroll(tmp_path):
    page = tmp_path / "status.html"
    page.write_text(render_watch_page(status_with_incident().to_dict(), now=NOW), encoding="utf-8")
    wedge = CASES["connection-wedged"]
    for width in (1200, 500):  # a laptop, and a phone at 3 a.m. (500 px: headless chromium's narrowest window)
        found = measure(page, tmp_path, width)
        assert found["errors"] == [] and found["scrollWidth"] <= found["innerWidth"] == width, found
        dom = text_of(found["dom"])
        assert wedge.summary in dom and "CLIENT-SIDE" in dom
        assert "down: connect: connection refused" in dom and "up metrics checked 2 s ago" in dom
        hops = dom[dom.index("Hops"):dom.index("Last verdicts")]
        assert "not read" in hops and "idle" not in hops
    assert page_requests(page, tmp_path) == []  # nothing beyond the page itself
    fetching = tmp_path / "fetching.html"  # the check sees a request when a page makes one
    fetching.write_text('<!doctype html><img src="http://cdn.example/x.png"><script>fetch("http://127.0.0.1:9/s.json")'
                        ".catch(function(){})</script>")
    assert page_requests(fetching, tmp_path) == ["http://cdn.example/x.png", "http://127.0.0.1:9/s.json"]
    # Scripts off: this chromium draws nothing headless with scripts disabled (--blink-settings=
    # scriptEnabled=false), so the page is drawn without its script: everything is still there.
    bare = tmp_path / "no-script.html"
    bare.write_text(re.sub(r"<script>.*?</script>", "", page.read_text(), flags=re.S), encoding="utf-8")
    assert "<script" not in bare.read_text()
    off = text_of(dump_dom(bare.as_uri(), tmp_path))
    assert wedge.summary in off and "down: connect: connection refused" in off and "up in 240 of 240 checks" in off


class ChangingWatcher:
    """The watcher's `/` on 127.0.0.1: the page of `pages[i]` on the i-th request (the last one from
    then on), or HTTP 503 where `pages[i]` is None: a page that updates, then a watcher that stops."""

    def __init__(self, pages: list[str | None]) -> None:
        self.served = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                page = pages[min(owner.served, len(pages) - 1)]
                owner.served += 1
                body = (page or "watcher gone").encode()
                self.send_response(200 if page else 503)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@browser
@pytest.mark.network
def test_served_the_page_updates_itself_and_says_when_the_watcher_stopped_answering(tmp_path):
    before = render_watch_page(status_with_incident().to_dict(), now=NOW)
    after = render_watch_page(status_with_incident(cleared=True).to_dict(), now=NOW + 5)
    watcher = ChangingWatcher([before, after])
    try:
        dom = dump_dom(watcher.url, tmp_path, network=LOOPBACK_ONLY, budget_ms=REFRESH_S * 1000 + 2000)
    finally:
        watcher.close()
    assert watcher.served >= 2, "the page never fetched itself again"
    text = text_of(dom)
    assert "No open incident." in text and "repro watch: no open incident" in dom  # <main> and title swapped
    assert 'id="stale" hidden' in dom

    watcher = ChangingWatcher([before, None])
    try:
        dom = dump_dom(watcher.url, tmp_path, network=LOOPBACK_ONLY, budget_ms=REFRESH_S * 1000 + 2000)
    finally:
        watcher.close()
    text = text_of(dom)
    assert re.search(r"The watcher has not answered since \d\d:\d\d:\d\d UTC \(HTTP 503\): what follows is from then",
                     text), text[:400]
    assert CASES["connection-wedged"].summary in text  # the last page read stays, marked stale


def test_the_status_json_shape_the_page_reads_round_trips():
    # /status.json is json.dumps(status.to_dict()): the page renders the same from its parsed copy.
    status = status_with_incident().to_dict()
    assert render_watch_page(json.loads(json.dumps(status)), now=NOW) == render_watch_page(status, now=NOW)
