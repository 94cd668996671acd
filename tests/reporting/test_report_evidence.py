"""`repro report` shows the evidence it judged by: where a hop's metrics page did not answer, when
each verdict was reached, and `-` (never `None`) where a value is missing."""

import html
import re

import pytest

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.hop import Hop
from repro.core.snapshot import Snapshot, failed
from repro.core.verdict import Verdict
from repro.io.runlog import RunLogWriter
from repro.reporting.rejudge import find_outages, rejudge, verdict_title
from repro.reporting.run_report import render_html, write_report
from repro.reporting.run_timeline import timeline_figure
from tests.support.browser import CHROMIUM, measure, screenshot
from tests.support.pages import assert_self_contained, own_text

HOPS = [Hop("proxy", "http://127.0.0.1:1", "http://127.0.0.1:3/metrics", "proxy"), Hop("engine-0", "http://127.0.0.1:2")]
REFUSED = "connection refused <errno 111> & \"friends\""  # markup in it: it must come out escaped
DOWN = (1.0, 1.75)  # engine-0's page fails from the sample at 1.0 up to the readable one at 1.75


def live_verdict(conv=0, rnd=2):
    return Verdict(side="client", where="proxy", kind="connection-wedged", confidence="high",
                   phase="before-first-byte", conversation=conv, round=rnd, stalled_for_s=1.05, evidence=[],
                   ruled_out=[], summary="live")


def record_run(run_dir, *, recover=True, verdict_at=1.6, finish=True, per_round=None, config=None):
    """A wedge at round 2 of conversation 0, engine-0's metrics page failing for a span."""
    log = RunLogWriter(run_dir)
    log.write(ev.RunStarted(t=0.0, config=config if config is not None else {
        "base_url": "http://127.0.0.1:1", "model": "m", "rounds": 2, "conversations": 2, "stall_after": 1.0},
        versions={}, monotonic_origin=0.0, wall_clock_origin=0.0, hops=HOPS))
    for conv in (0, 1):
        log.write(ev.RoundStarted(t=0.1, conv=conv, round=1, prompt_chars=10, messages=1))
        log.write(ev.FirstByte(t=0.15, conv=conv, round=1, status=200))
        log.write(ev.RoundDone(t=0.3, conv=conv, round=1, status=200, reply_chars=5, duration_s=0.2, events=5,
                               max_gap_s=0.01))
    log.write(ev.RoundStarted(t=0.4, conv=0, round=2, prompt_chars=30, messages=3))
    for i in range(12):
        t = 0.25 * i
        down = DOWN[0] <= t < DOWN[1] or (not recover and t >= DOWN[0])
        engine = (failed(REFUSED, hop="engine-0", url="http://127.0.0.1:2/metrics") if down
                  else Snapshot(ok=True, running=0, queued=0, itl_count=40))
        log.write(ev.ProbeSample(t=t, hop="engine-0", snapshot=engine))
        log.write(ev.ProbeSample(t=t, hop="proxy", snapshot=Snapshot(ok=True, in_flight=1 if t > 0.4 else 0,
                                                                     held=1 if t > 0.4 else 0)))
        if t == 1.5:
            log.write(ev.RoundStalled(t=1.45, conv=0, round=2, phase="before-first-byte", stalled_for_s=1.05,
                                      started_t=0.4, last_progress_t=0.4, local="127.0.0.1:5555", reused=True))
            log.write(ev.CanaryResult(t=1.55, hop="proxy", outcome=CanaryOutcome(
                hop="proxy", url="http://127.0.0.1:1", ok=True, status=200, total_s=0.05)))
            log.write(ev.CanaryResult(t=1.55, hop="engine-0", outcome=CanaryOutcome(
                hop="engine-0", url="http://127.0.0.1:2", ok=True, status=200, total_s=0.02, health_status=200)))
            if verdict_at is not None:
                log.write(ev.VerdictReached(t=verdict_at, verdict=live_verdict()))
    log.write(ev.RoundAbandoned(t=2.6, conv=0, round=2, phase="before-first-byte", stalled_for_s=2.2,
                                duration_s=2.2))
    if finish:
        log.write(ev.RunFinished(t=2.9, summary={
            "rounds_total": 4, "rounds_completed": 2, "rounds_stalled": 1, "rounds_failed": 0, "rounds_skipped": 1,
            "per_round": per_round if per_round is not None else [
                {"round": 1, "completed": 2, "failed": 0, "stalled": 0, "ttft_p50_ms": 50.0, "ttft_p95_ms": 51.25,
                 "itl_p50_ms": 3.0, "max_gap_ms": 10.0, "errors": []},
                {"round": 2, "completed": 0, "failed": 0, "stalled": 1, "ttft_p50_ms": None, "ttft_p95_ms": None,
                 "itl_p50_ms": None, "max_gap_ms": None, "errors": []}]},
            reason="completed"))
    log.close()


ROWS = {"proxy": "y2", "engine-0": "y3"}  # each hop's panel, under the conversations' lanes


def bands(data, hop):
    """The outage bands drawn in `hop`'s panel: (start, end, hover text)."""
    return [(min(t.x), max(t.x), html.unescape(t.text)) for t in timeline_figure(data).data
            if t.name == "metrics page not answering" and t.yaxis == ROWS[hop]]


def marks(data):
    """The verdict marks: (time, lane, first line of the hover text)."""
    (trace,) = [t for t in timeline_figure(data).data if t.name == "verdict"]
    return [(x, y, html.unescape(text.split("<br>")[0])) for x, y, text in zip(trace.x, trace.y, trace.hovertext,
                                                                               strict=True)]


def test_a_span_the_metrics_page_did_not_answer_is_one_band_with_its_error(tmp_path):
    record_run(tmp_path)
    data = rejudge(tmp_path)
    (outage,) = data.outages
    assert (outage.hop, outage.start, outage.end, outage.recovered, outage.samples) == ("engine-0", 1.0, 1.75, True, 3)
    assert outage.error == REFUSED
    ((start, end, title),) = bands(data, "engine-0")
    assert (start, end) == (1.0, 1.75)
    assert REFUSED in title and "from 1 s to 1.75 s" in title and "3 failed samples" in title
    assert bands(data, "proxy") == []
    path, _ = write_report(tmp_path)
    assert "<errno" not in path.read_text()  # escaped, not markup


def test_a_page_that_never_comes_back_is_banded_to_the_end(tmp_path):
    record_run(tmp_path, recover=False, finish=False)
    data = rejudge(tmp_path)
    (outage,) = data.outages
    assert (outage.start, outage.end, outage.recovered) == (1.0, data.end_t, False)
    ((_, end, title),) = bands(data, "engine-0")
    assert "to the end of the log" in title and end == data.end_t


def test_outages_split_per_hop_and_gather_distinct_errors():
    def sample(t, hop, error=None):
        return ev.ProbeSample(t=t, hop=hop, snapshot=failed(error or "", hop=hop) if error is not None
                              else Snapshot(ok=True))
    events = [sample(0, "a"), sample(1, "a", "timeout"), sample(1, "b", "refused"), sample(2, "a", "reset"),
              sample(2, "b"), sample(3, "a", "timeout"), sample(4, "a"), sample(5, "a", "")]
    spans = [(o.hop, o.start, o.end, o.recovered, o.errors) for o in find_outages(events, 6.0)]
    assert spans == [("a", 1, 4, True, ["timeout", "reset"]), ("b", 1, 2, True, ["refused"]),
                     ("a", 5, 6.0, False, [])]


def test_each_verdict_is_marked_on_its_lane_when_it_was_reached(tmp_path):
    record_run(tmp_path)
    data = rejudge(tmp_path)
    (verdict,) = data.verdicts
    assert data.verdict_times == [1.6]
    assert marks(data) == [(1.6, "conv 0", verdict_title(verdict))]
    assert verdict_title(verdict) == f"{verdict.side} at {verdict.where}: {verdict.kind}"


def test_a_verdict_never_recorded_is_marked_at_its_stall(tmp_path):
    record_run(tmp_path, verdict_at=None, finish=False)
    data = rejudge(tmp_path)
    assert len(data.verdicts) == 1 and data.verdict_times == [1.45]
    assert [(t, lane) for t, lane, _ in marks(data)] == [(1.45, "conv 0")]


def test_a_missing_value_shows_a_dash_and_never_none(tmp_path):
    record_run(tmp_path, config={"stall_after": 1.0})  # no target, model, conversations, rounds
    text = own_text(write_report(tmp_path)[0].read_text())
    assert "None" not in text
    table = text[text.index("<h2>Rounds</h2>"):]
    rows = re.findall(r"<tr>((?:<td>[^<]*</td>)+)</tr>", table)
    cells = [re.findall(r"<td>([^<]*)</td>", row) for row in rows]
    assert cells == [["1", "2", "0", "0", "50", "51.25", "3", "10"], ["2", "0", "0", "1", "-", "-", "-", "-"]]
    assert "model <code>-</code>" in text


def test_a_verdict_without_a_hop_and_evidence_without_values_print_no_none(tmp_path):
    record_run(tmp_path, per_round=[{"round": 1}])
    data = rejudge(tmp_path)
    data.verdicts.append(Verdict(side="unknown", where=None, kind="no-evidence", confidence="low", phase="mid-stream",
                                 conversation=1, round=1, stalled_for_s=2.0,
                                 evidence=[{"hop": None, "signal": "x", "value": None, "at": None}],
                                 ruled_out=[], summary="s"))
    data.verdict_times.append(0.2)
    text = own_text(render_html(data))
    assert "None" not in text
    assert "unknown: no-evidence" in [title for _, _, title in marks(data)]  # no hop: left out, never `?`
    assert "<tr><td>1</td><td>-</td><td>-</td>" in text


def test_the_page_stays_self_contained(tmp_path):
    record_run(tmp_path)
    assert_self_contained(write_report(tmp_path)[0].read_text())


VERDICT_POINT = re.compile(r'<path class="point"[^>]*fill: rgb\(74, 20, 140\)')  # a verdict mark on the plot


def near(rgb, target, tolerance=3):
    return all(abs(a - b) <= tolerance for a, b in zip(rgb, target, strict=True))


@pytest.mark.network
@pytest.mark.skipif(not CHROMIUM, reason="Debian chromium not installed (.ci/run installs it)")
@pytest.mark.timeout(90)
def test_headless_browser_shows_the_outage_band_and_the_verdict_mark(tmp_path):
    record_run(tmp_path)
    path, data = write_report(tmp_path)
    drawn = measure(path, tmp_path, 1400)
    assert drawn["errors"] == [] and drawn["plots"] == 1
    # the verdict's triangle is a point of the plot (the legend's symbol is no "point")
    assert len(VERDICT_POINT.findall(drawn["dom"])) == 1
    image = screenshot(path, tmp_path, height=1800, width=1400)
    counts = image.getcolors(maxcolors=1 << 20)
    band = (246, 206, 206)  # rgba(229, 115, 115, 0.35) over white
    # the legend's swatch is a few hundred pixels: the band over 0.75 s of engine-0's panel is far larger
    assert sum(n for n, rgb in counts if near(rgb, band)) > 3000, "the outage band is not drawn"
