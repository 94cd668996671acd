"""`repro report`: a recorded run is re-judged offline with the live classifier and drawn as HTML."""

import csv
import re
import time

import pytest

from repro.core import events as ev
from repro.core.canary_outcome import CanaryOutcome
from repro.core.hop import Hop
from repro.core.snapshot import Snapshot
from repro.io.runlog import RunLogWriter
from repro.reporting.plots import steps
from repro.reporting.rejudge import RoundSpan, rejudge
from repro.reporting.run_report import write_report
from repro.reporting.run_timeline import MAX_BARS, MAX_GAUGE_POINTS, MAX_LANES, bars, timeline_figure
from tests.support.pages import assert_self_contained, own_text

HOPS = [Hop("proxy", "http://127.0.0.1:1", "http://127.0.0.1:3/metrics", "proxy"), Hop("engine-0", "http://127.0.0.1:2")]


def record_wedged_run(run_dir, *, finish=True):
    """A log shaped like a wedge at round 2: the proxy holds it, the engine idles, canaries pass."""
    log = RunLogWriter(run_dir)
    log.write(ev.RunStarted(t=0.0, config={"base_url": "http://127.0.0.1:1", "model": "m", "rounds": 2,
                                           "conversations": 2, "stall_after": 1.0},
                            versions={}, monotonic_origin=0.0, wall_clock_origin=0.0, hops=HOPS))
    for conv in (0, 1):
        log.write(ev.RoundStarted(t=0.1, conv=conv, round=1, prompt_chars=10, messages=1))
        log.write(ev.FirstByte(t=0.15, conv=conv, round=1, status=200))
        log.write(ev.RoundDone(t=0.3, conv=conv, round=1, status=200, reply_chars=5, duration_s=0.2, events=5,
                               max_gap_s=0.01))
    for i in range(12):
        t = 0.25 * i
        log.write(ev.ProbeSample(t=t, hop="engine-0", snapshot=Snapshot(ok=True, running=0, queued=0, itl_count=40)))
        log.write(ev.ProbeSample(t=t, hop="proxy", snapshot=Snapshot(ok=True, in_flight=1 if t > 0.4 else 0,
                                                                     held=1 if t > 0.4 else 0)))
    log.write(ev.RoundStarted(t=0.4, conv=0, round=2, prompt_chars=30, messages=3))
    log.write(ev.RoundStalled(t=1.45, conv=0, round=2, phase="before-first-byte", stalled_for_s=1.05, started_t=0.4,
                              last_progress_t=0.4, local="127.0.0.1:5555", reused=True))
    log.write(ev.CanaryResult(t=1.6, hop="proxy", outcome=CanaryOutcome(hop="proxy", url="http://127.0.0.1:1", ok=True,
                                                                        status=200, total_s=0.05)))
    log.write(ev.CanaryResult(t=1.6, hop="engine-0", outcome=CanaryOutcome(
        hop="engine-0", url="http://127.0.0.1:2", ok=True, status=200, total_s=0.02, health_status=200)))
    log.write(ev.RoundAbandoned(t=1.7, conv=0, round=2, phase="before-first-byte", stalled_for_s=1.3,
                                duration_s=1.3))
    if finish:
        log.write(ev.RunFinished(t=2.9, summary={"rounds_total": 4, "rounds_completed": 2, "rounds_stalled": 1,
                                                 "rounds_failed": 0, "rounds_skipped": 1, "per_round": []},
                                 reason="completed"))
    log.close()


def test_rejudging_a_recorded_wedge(tmp_path):
    record_wedged_run(tmp_path)
    data = rejudge(tmp_path)
    (verdict,) = data.verdicts
    assert (verdict.side, verdict.where, verdict.kind) == ("client", "proxy", "connection-wedged")
    assert [r.status for r in data.rounds] == ["completed", "stalled", "completed"]


def test_a_killed_run_is_still_reported(tmp_path):
    record_wedged_run(tmp_path, finish=False)
    with open(tmp_path / "events.jsonl", "ab") as f:
        f.write(b'{"type":"probe","t":3.0,"hop":"engi')
    path, data = write_report(tmp_path)
    assert data.log.torn_last_line and any("torn" in n for n in data.notes)
    assert len(data.verdicts) == 1
    assert "did not finish" in path.read_text()


def test_html_is_self_contained(tmp_path):
    record_wedged_run(tmp_path)
    path, _ = write_report(tmp_path)
    text = path.read_text()
    assert "connection-wedged" in text and re.search(r'Plotly.newPlot\(\s*"timeline"', text)
    assert_self_contained(text)


def test_the_verdicts_come_before_the_timeline_as_text(tmp_path):
    record_wedged_run(tmp_path)
    text = own_text(write_report(tmp_path)[0].read_text())
    verdicts, timeline = text.index("<h2>Verdicts"), text.index("<h2>Timeline")
    assert verdicts < text.index("connection-wedged") < timeline
    assert "Evidence:<ul><li>" in text[verdicts:timeline]


def test_rounds_csv_holds_every_round_as_the_log_has_it(tmp_path):
    record_wedged_run(tmp_path)
    path, data = write_report(tmp_path)
    assert 'href="rounds.csv"' in path.read_text()
    with open(tmp_path / "rounds.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["conv"]), int(r["round"]), r["status"]) for r in rows] == [(0, 1, "completed"), (0, 2, "stalled"),
                                                                            (1, 1, "completed")]
    first, stalled = rows[0], rows[1]
    assert (float(first["start_s"]), float(first["first_byte_s"]), float(first["end_s"])) == (0.1, 0.15, 0.3)
    assert float(first["ttft_s"]) == pytest.approx(0.05) and float(first["duration_s"]) == pytest.approx(0.2)
    assert stalled["first_byte_s"] == "" and stalled["ttft_s"] == ""  # no first byte: empty, never 0
    assert (float(stalled["last_progress_s"]), float(stalled["stalled_at_s"])) == (0.4, 1.45)


def test_gauges_are_steps_and_a_gauge_never_read_has_no_line(tmp_path):
    record_wedged_run(tmp_path)
    figure = timeline_figure(rejudge(tmp_path))
    lines = {(t.yaxis, t.name): t for t in figure.data if t.type == "scatter" and t.mode == "lines" and t.fill is None}
    # proxy is row 2, engine-0 row 3: the engine reads running and queued, the proxy in-flight and held
    assert set(lines) == {("y2", "in flight"), ("y2", "held"), ("y3", "running"), ("y3", "queued")}
    assert {t.line.shape for t in lines.values()} == {"hv"}
    held = lines[("y2", "held")]
    # 12 samples, 0 until 0.5 s then 1: change points only, and the last sample so the line reaches it
    assert (list(held.x), list(held.y)) == ([0.0, 0.5, 2.75], [0, 1, 1])
    (axis,) = [a for a in figure.select_yaxes(row=2, col=1)]
    assert axis.title.text == "count" and axis.range[0] < 0 < 1 < axis.range[1]


def test_the_timeline_follows_the_window(tmp_path):
    record_wedged_run(tmp_path)
    figure = timeline_figure(rejudge(tmp_path))
    assert figure.layout.width is None and figure.layout.autosize
    assert figure.layout.legend.orientation == "h" and figure.layout.legend.y >= 1  # above the plot, off the lines
    text = write_report(tmp_path)[0].read_text()
    assert '"responsive": true' in text and "width:100%" in text


def _long_run(run_dir, conversations, rounds, samples):
    log = RunLogWriter(run_dir)
    log.write(ev.RunStarted(t=0.0, config={"base_url": "http://127.0.0.1:1", "model": "m", "rounds": rounds,
                                           "conversations": conversations, "stall_after": 1.0},
                            versions={}, monotonic_origin=0.0, wall_clock_origin=0.0, hops=HOPS))
    t = 0.0
    for rnd in range(1, rounds + 1):
        for conv in range(conversations):
            t += 0.001
            log.write(ev.RoundStarted(t=t, conv=conv, round=rnd, prompt_chars=10, messages=1))
            log.write(ev.FirstByte(t=t + 0.01, conv=conv, round=rnd, status=200))
            if (conv, rnd) == (3, rounds // 2):
                log.write(ev.RoundFailed(t=t + 0.02, conv=conv, round=rnd, phase="streaming", error="reset",
                                         duration_s=0.02))
            else:
                log.write(ev.RoundDone(t=t + 0.05, conv=conv, round=rnd, status=200, reply_chars=5, duration_s=0.05,
                                       events=5, max_gap_s=0.01))
    for i in range(samples):
        spike = 40 if i == samples // 3 else i % 3  # one sample of 40: thinning must keep it
        log.write(ev.ProbeSample(t=t * i / samples, hop="engine-0", snapshot=Snapshot(ok=True, running=spike, queued=0)))
    log.write(ev.RunFinished(t=t + 1, summary={"rounds_total": conversations * rounds, "per_round": []},
                             reason="completed"))
    log.close()


@pytest.mark.timeout(120)
def test_a_long_run_is_drawn_in_bounded_time_and_size(tmp_path):
    _long_run(tmp_path, conversations=120, rounds=150, samples=40000)  # 18000 rounds, 40000 samples
    started = time.monotonic()
    path, data = write_report(tmp_path)
    took = time.monotonic() - started
    figure = timeline_figure(data)
    own = len(own_text(path.read_text()))
    assert took < 30 and own < 3_000_000, (took, own)
    bars_drawn = sum(len(t.x) for t in figure.data if t.type == "bar")
    assert bars_drawn <= MAX_BARS + 10
    failed = [t for t in figure.data if t.type == "bar" and t.name == "failed"]
    assert len(failed) == 1 and len(failed[0].x) == 1  # the one problem round keeps its own bar
    (running,) = [t for t in figure.data if t.name == "running"]
    assert len(running.x) <= MAX_GAUGE_POINTS + 2 and max(running.y) == 40
    assert len({t.y[0] for t in figure.data if t.type == "bar"}) <= MAX_LANES
    assert "The first 80 of its 120 conversations have a lane" in path.read_text()
    with open(tmp_path / "rounds.csv", newline="") as f:
        assert sum(1 for _ in csv.DictReader(f)) == 18000  # the CSV is not thinned


def test_steps_keep_change_points_gaps_and_peaks():
    points = [(0, 1), (1, 1), (2, 1), (3, 2), (4, None), (5, 2), (6, 2)]
    assert steps(points, 100) == ([0, 3, 4, 5, 6], [1, 2, None, 2, 2])
    wavy = [(i, i % 5) for i in range(10000)] + [(10000, 99)]
    xs, ys = steps(wavy, 200)
    assert len(xs) <= 202 and 99 in ys and 0 in ys and xs == sorted(xs)


def test_bars_merge_completed_rounds_only_past_the_budget():
    spans = [RoundSpan(0, r, r, r + 0.5, status="completed") for r in range(1, 11)]
    spans[4].status = "stalled"
    assert len(bars(spans, 20.0)) == 10
    merged = bars(spans, 20.0, budget=4)  # 9 completed into 3 bars' room: runs of up to 3, cut at the stall
    assert [(b["status"], b["start"], b["end"]) for b in merged] == [
        ("completed", 1, 3.5), ("completed", 4, 4.5), ("stalled", 5, 5.5), ("completed", 6, 8.5),
        ("completed", 9, 10.5)]
    assert "rounds 6-8: 3 rounds completed" in merged[3]["text"]


def test_a_hop_with_no_gauge_read_says_so_in_its_panel(tmp_path):
    record_wedged_run(tmp_path)
    data = rejudge(tmp_path)
    data.log.events[:] = [e for e in data.log.events if not (isinstance(e, ev.ProbeSample) and e.hop == "proxy")]
    notes = [a.text for a in timeline_figure(data).layout.annotations if a.yref == "y2 domain"]
    assert notes == ["no metrics sample of proxy recorded"]
    for event in data.log.events:
        if isinstance(event, ev.ProbeSample):  # engine-0 answers, but with no gauge in its page
            event.snapshot.running = event.snapshot.queued = None
    notes = [a.text for a in timeline_figure(data).layout.annotations if a.yref == "y3 domain"]
    assert notes == ["no running, queued, in-flight or held count read from engine-0: not drawn, which is not idle"]
