"""`repro report`: a recorded run is re-judged offline with the live classifier and drawn as HTML."""

import pytest

from repro.core import events as ev
from repro.core.canary import CanaryOutcome
from repro.core.hop import Hop
from repro.core.snapshot import Snapshot
from repro.io.runlog import RunLogWriter
from repro.reporting.run_report import rejudge, write_report
from tests.support.browser import CHROMIUM, screenshot

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
    assert "<svg" in text and "connection-wedged" in text
    for needle in ("http://", "https://", "<script", "<link"):
        if needle.startswith("http"):
            # the only URLs allowed are the SVG namespace and the run's own loopback hops
            assert all(u.startswith(("http://www.w3.org", "http://127.0.0.1")) for u in _urls(text))
        else:
            assert needle not in text


def _urls(text):
    import re

    return re.findall(r"https?://[^\s\"'<]+", text)


@pytest.mark.network
@pytest.mark.skipif(not CHROMIUM, reason="Debian chromium not installed (.ci/run installs it)")
@pytest.mark.timeout(90)
def test_headless_browser_shows_the_plot_with_the_stall(tmp_path):
    record_wedged_run(tmp_path)
    path, _ = write_report(tmp_path)
    image = screenshot(path, tmp_path)
    colors = image.getcolors(maxcolors=1 << 20)
    assert colors and len(colors) > 20, "the screenshot is blank"
    stall_red = (0xB7, 0x1C, 0x1C)
    assert any(rgb == stall_red for _, rgb in colors), "the stall span is not drawn"
