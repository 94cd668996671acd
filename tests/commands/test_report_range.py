"""`repro report FOLDER --since T --until T` on a watch's rotating segments: the verdicts of that
range only, judged as the whole record would judge them; a plain run folder as before."""

from __future__ import annotations

import json

import pytest

from repro.cli import main
from repro.core.moments import FORMS
from repro.io.rotating_log import list_segments
from repro.io.runlog import RunLogWriter
from repro.reporting.range_report import rejudge_range
from tests.support.pages import own_text
from tests.support.watch_logs import WALL0, header, record_watch

# Two hours of watch from 10:00Z: a proxy wedges a reused connection at 10:20, the engine hangs at 11:20.
STALLS = {1200.0: "wedge", 4800.0: "hang"}


@pytest.fixture
def watched(tmp_path):
    folder = tmp_path / "watch"
    record_watch(folder, seconds=7200, stalls=STALLS, segment_bytes=32 * 1024)
    return folder


def report(capsys, *argv):
    """The exit code, the JSON and what stderr said: its words, wherever the terminal width broke
    its lines (a line naming the run folder breaks where that path's length puts it)."""
    code = main(["report", *map(str, argv), "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out else None, " ".join(err.split())


def sides(result):
    return [(v["side"], v["where"], v["kind"]) for v in result["verdicts"]]


def test_a_range_reports_its_own_verdicts_only(watched, capsys):
    code, result, err = report(capsys, watched, "--since", "2026-12-05T10:10Z", "--until", "2026-12-05T10:40Z")
    assert sides(result) == [("client", "proxy", "connection-wedged")] and code == 10
    assert "--since 2026-12-05T10:10Z: 2026-12-05T10:10:00Z" in err
    assert "range: from 2026-12-05T10:10:00Z (t 600 s) to 2026-12-05T10:40:00Z (t 2400 s)" in err
    page = own_text((watched / "report.html").read_text())
    assert "This report covers from 2026-12-05T10:10:00Z (t 600 s) to 2026-12-05T10:40:00Z (t 2400 s)" in page
    assert "engine-hung" not in page and "connection-wedged" in page

    code, result, _ = report(capsys, watched, "--since", "2026-12-05T11:00Z", "--until", "2026-12-05T11:40Z")
    assert sides(result) == [("server", "engine-0", "engine-hung")] and code == 11


def test_the_whole_folder_without_a_range(watched, capsys):
    code, result, err = report(capsys, watched)
    assert sides(result) == [("client", "proxy", "connection-wedged"), ("server", "engine-0", "engine-hung")]
    assert code == 11 and "the oldest segment kept" in err


def test_a_verdict_is_judged_on_what_was_recorded_before_the_range(watched, capsys):
    # Round 1 of conversation 1 started at 10:20:00, stalled at 10:20:01.05 and was judged at
    # 10:20:01.3: a range from 10:20:01.1 holds the verdict but not the stall, nor the samples it
    # was judged on; they are read as context, and the verdict is the whole record's, word for word.
    code, result, _ = report(capsys, watched, "--since", "2026-12-05T10:20:01.1Z", "--until", "2026-12-05T10:21Z")
    assert sides(result) == [("client", "proxy", "connection-wedged")] and code == 10
    _, whole, _ = report(capsys, watched)
    assert result["verdicts"][0] == whole["verdicts"][0]
    # Without the context, the stall is outside what was read: no verdict at all (never a guess).
    assert rejudge_range(watched, WALL0 + 1201.1, WALL0 + 1260, context=0).verdicts == []


def test_a_quiet_range_is_all_well(watched, capsys):
    code, result, _ = report(capsys, watched, "--since", "2026-12-05T10:45Z", "--until", "2026-12-05T10:55Z")
    assert result["verdicts"] == [] and code == 0


def test_a_range_with_nothing_recorded_says_what_the_folder_holds(watched, capsys):
    code, result, err = report(capsys, watched, "--since", "2026-12-05T08:00Z", "--until", "2026-12-05T09:00Z")
    assert code == 12 and result["verdicts"] == [] and result["report"] is None
    assert ("nothing was recorded from 2026-12-05T08:00:00Z" in err
            and "segments started between 2026-12-05T10:00:00Z and 2026-12-05T11:5" in err)
    assert not (watched / "report.html").exists()


@pytest.mark.parametrize(("flags", "said"), [
    (["--since", "yesterday"], "--since 'yesterday' is not a time: give " + FORMS),
    (["--until", "-1w"], "--until '-1w' is not a time"),
    (["--since", "2026-12-05T11:00Z", "--until", "2026-12-05T10:00Z"], "--until 2026-12-05T10:00Z is not after --since 2026-12-05T11:00Z"),
])
def test_bad_range_is_one_line(watched, capsys, flags, said):
    assert main(["report", str(watched), *flags]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err


def test_a_plain_run_folder_works_as_before_and_refuses_a_range(tmp_path, capsys):
    log = RunLogWriter(tmp_path)
    log.write(header())
    log.close()
    assert main(["report", str(tmp_path)]) == 0 and (tmp_path / "report.html").exists()
    capsys.readouterr()
    assert main(["report", str(tmp_path), "--since", "-1h"]) == 2
    err = capsys.readouterr().err
    assert "holds none: drop them to report on a whole run folder" in err and err.count("\n") == 1


def test_one_segment_is_judged_alone(watched, capsys):
    segments = list_segments(watched)
    (holding,) = [s for s, after in zip(segments, segments[1:], strict=False) if s.start <= WALL0 + 1200 < after.start]
    code, result, _ = report(capsys, holding.path)  # the segment's own header copy places it
    assert sides(result) == [("client", "proxy", "connection-wedged")] and code == 10
