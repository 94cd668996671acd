"""A long watch's run log as rotating segments: bounded in size and age, each segment judged alone,
nothing lost at a rotation, and any wall-clock range read back as one RunLog."""

from __future__ import annotations

import os

import msgspec
import pytest

from repro.core import events as ev
from repro.io.rotating_log import MIB, RotatingRunLog, list_segments, read_range, segment_file_name
from repro.io.runlog import RunLogError, read_run_log
from tests.support.watch_logs import WALL0, WatchClock, at, header, record_watch


def note(t: float, i: int) -> ev.Note:
    return ev.Note(t=t, level="info", message=f"event {i:05d}")


def test_rotation_by_size_loses_no_event_and_bounds_each_segment(tmp_path):
    clock = WatchClock()
    log = RotatingRunLog(tmp_path, segment_bytes=4096, keep_seconds=3600, keep_bytes=MIB, clock=clock)
    log.write(header())
    for i in range(2000):
        log.write(note(1.0 + i / 1000, i))
    log.close()
    segments = list_segments(tmp_path)
    assert len(segments) == log.rotations + 1 > 20
    assert log.count == 2001 and log.segment == segments[-1].name
    biggest_line = max(len(line) for s in segments for line in s.path.read_bytes().splitlines(keepends=True))
    assert all(s.path.stat().st_size < 4096 + biggest_line for s in segments)
    # Every event exactly once and in order, the header copies dropped.
    everything = read_range(tmp_path, None, None)
    assert [e.message for e in everything.events[1:]] == [f"event {i:05d}" for i in range(2000)]
    assert everything.events[0] == header() and everything.in_range == 2000
    assert not everything.torn_last_line and not everything.skipped and not everything.notes


def test_rotation_by_age_with_an_injected_clock(tmp_path):
    clock = WatchClock()
    log = RotatingRunLog(tmp_path, segment_bytes=MIB, segment_seconds=600, keep_seconds=86400, keep_bytes=8 * MIB,
                         clock=clock)
    log.write(header())
    for minute in range(0, 35):
        clock.wall = WALL0 + minute * 60
        log.write(note(minute * 60.0, minute))
    log.close()
    names = [s.name for s in list_segments(tmp_path)]
    # A new segment at 10:10, 10:20, 10:30, each named by the moment it started.
    assert names == ["events-20261205T100000Z-0001.jsonl", "events-20261205T101000Z-0002.jsonl",
                     "events-20261205T102000Z-0003.jsonl", "events-20261205T103000Z-0004.jsonl"]
    assert names == sorted(names)  # ls lists them in time order
    assert segment_file_name(WALL0 + 0.9, 12345) == "events-20261205T100000Z-12345.jsonl"


def test_every_segment_starts_with_the_header_it_needs_to_be_judged_alone(tmp_path):
    clock = WatchClock()
    record_watch(tmp_path, seconds=1800, deployments={0.5: "v1", 900.0: "v2"}, clock=clock, segment_bytes=32 * 1024)
    segments = list_segments(tmp_path)
    assert len(segments) > 4
    for segment in segments:
        alone = read_run_log(segment.path)  # `repro report SEGMENT` reads one as it reads a run
        first, second = alone.events[:2]
        assert first == header(WALL0)
        assert isinstance(second, ev.DeploymentRecorded)
        # the latest deployment recorded before the segment began
        started_t = segment.start - WALL0
        expected = "v2" if started_t >= 900 else "v1"
        assert second.hops["engine-0"]["settings"]["version"] == expected, segment.name


def test_old_segments_go_by_age_and_the_current_one_stays(tmp_path):
    clock = WatchClock()
    log = RotatingRunLog(tmp_path, segment_bytes=MIB, segment_seconds=60, keep_seconds=300, keep_bytes=8 * MIB,
                         clock=clock)
    log.write(header())
    for second in range(0, 3600, 10):
        clock.wall = WALL0 + second
        log.write(note(float(second), second))
    log.close()
    segments = list_segments(tmp_path)
    # Trimmed at each rotation: kept, those that had ended within 300 s of the last one (a segment
    # ends where the next begins), and the current one; the one before the oldest kept had not.
    horizon = segments[-1].start - 300
    assert all(newer.start + 1 >= horizon for newer in segments[1:])
    assert segments[0].start + 1 < horizon
    assert 5 <= len(segments) <= 7 and segments[-1].name == log.segment
    assert [s.seq for s in segments] == list(range(segments[0].seq, segments[-1].seq + 1))  # the oldest went first


def test_old_segments_go_when_all_of_them_hold_too_much(tmp_path):
    log = RotatingRunLog(tmp_path, segment_bytes=8192, keep_seconds=86400, keep_bytes=5 * 8192, clock=WatchClock())
    log.write(header())
    for i in range(5000):
        log.write(note(1.0 + i, i))
        sizes = [s.path.stat().st_size for s in list_segments(tmp_path)]
        assert sum(sizes) <= 5 * 8192 + 8192, i  # at most the bound plus the segment being filled
    log.close()
    kept = read_range(tmp_path, None, None)
    numbers = [int(e.message.split()[1]) for e in kept.events if isinstance(e, ev.Note)]
    assert numbers == list(range(numbers[0], 5000)) and numbers[0] > 3000  # the newest kept, none missing among them
    assert kept.events[0] == header()  # the header survives its own segment's deletion: every segment has a copy


def test_a_delete_that_fails_is_a_note_not_a_crash(tmp_path):
    clock = WatchClock()
    stuck = tmp_path / segment_file_name(WALL0 - 86400 * 30, 1)  # an expired "segment" that unlink cannot remove
    stuck.mkdir()
    (stuck / "something").write_text("x")
    os.utime(stuck, (WALL0 - 86400 * 30, WALL0 - 86400 * 30))  # last written a month ago
    log = RotatingRunLog(tmp_path, segment_bytes=MIB, segment_seconds=60, keep_seconds=300, keep_bytes=8 * MIB,
                         clock=clock)
    log.write(header())
    clock.wall += 61
    log.write(note(61.0, 1))  # rotates, and tries again
    log.close()
    assert stuck.is_dir()
    notes = [e.message for s in list_segments(tmp_path) if s.path.is_file()
             for e in read_run_log(s.path).events if isinstance(e, ev.Note) and e.level == "warning"]
    assert len(notes) == 2 and all(f"segment {stuck} could not be deleted" in n for n in notes)
    first = read_run_log(list_segments(tmp_path)[1].path)
    assert isinstance(first.events[0], ev.RunStarted)  # the note of the first attempt waited for the header


def test_a_restarted_watch_continues_the_numbering_and_the_reader_takes_the_latest_run(tmp_path):
    clock = WatchClock()
    record_watch(tmp_path, seconds=600, stalls={300.0: "wedge"}, clock=clock, segment_bytes=16 * 1024)
    before = list_segments(tmp_path)
    clock.wall = WALL0 + 900  # restarted 5 minutes after the first run's last event, on a new monotonic origin
    second = RotatingRunLog(tmp_path, segment_bytes=16 * 1024, keep_seconds=86400, keep_bytes=MIB, clock=clock)
    restarted = header(clock.wall, origin=99999.0)
    second.write(restarted)
    clock.wall += 10
    second.write(note(10.0, 1))
    second.close()
    assert list_segments(tmp_path)[-1].seq == before[-1].seq + 1
    both = read_range(tmp_path, None, None)
    assert both.header == restarted and [e.message for e in both.events if isinstance(e, ev.Note)] == ["event 00001"]
    assert any("also covers 1 other run" in n and "2026-12-05T10:00:00Z" in n for n in both.notes)
    first = read_range(tmp_path, None, at("10:12"))  # the first run alone
    assert first.header == header(WALL0) and not first.notes
    assert any(isinstance(e, ev.VerdictReached) for e in first.events)


def test_a_range_spanning_segments_keeps_the_runs_clock(tmp_path):
    record_watch(tmp_path, seconds=3600, deployments={0.5: "v1", 1500.0: "v2"}, segment_bytes=16 * 1024)
    segments = list_segments(tmp_path)
    since, until = at("10:30"), at("10:40")
    log = read_range(tmp_path, since, until)
    assert 1 < len(log.segments) < len(segments)  # the names alone chose them: not every segment was read
    first, deployed, *rest = log.events
    assert first == header(WALL0) and deployed.hops["engine-0"]["settings"]["version"] == "v2"
    assert rest and all(since <= log.wall(e.t) <= until for e in rest)
    assert (min(e.t for e in rest), max(e.t for e in rest)) == pytest.approx((1800, 2400), abs=5)  # t as written
    assert (log.t_since, log.t_until) == (1800.0, 2400.0) and log.in_range == len(rest)
    # Against a read of everything: exactly the same events of that span, in the same order.
    everything = read_range(tmp_path, None, None)
    assert rest == [e for e in everything.events[2:] if since <= everything.wall(e.t) <= until
                    and not isinstance(e, ev.DeploymentRecorded)]


def test_a_margin_reads_context_either_side_and_counts_only_the_range(tmp_path):
    record_watch(tmp_path, seconds=3600, segment_bytes=16 * 1024)
    log = read_range(tmp_path, at("10:30"), at("10:31"), margin=120)
    walls = [log.wall(e.t) for e in log.events[2:]]
    assert min(walls) < at("10:30") - 100 and max(walls) > at("10:31") + 100
    assert log.in_range == sum(1 for w in walls if at("10:30") <= w <= at("10:31")) > 0


def test_a_torn_last_line_is_tolerated(tmp_path):
    record_watch(tmp_path, seconds=1200, segment_bytes=16 * 1024)
    last = list_segments(tmp_path)[-1]
    with open(last.path, "ab") as f:
        f.write(b'{"type":"probe","t":1199.9,"hop":"engi')  # what SIGKILL mid-write leaves
    log = read_range(tmp_path, at("10:15"), None)
    assert log.torn_last_line and log.in_range > 0 and not log.skipped
    assert msgspec.json.encode(log.events[-1]).startswith(b'{"type":"probe"')  # the last whole event is kept


def test_a_range_before_anything_recorded_is_empty_not_an_error(tmp_path):
    record_watch(tmp_path, seconds=600, segment_bytes=16 * 1024)
    log = read_range(tmp_path, at("09:00"), at("09:30"))
    assert log.in_range == 0 and log.segments == [] and log.held[0] == WALL0


def test_bad_settings_and_an_empty_folder_are_one_line_errors(tmp_path):
    with pytest.raises(RunLogError, match="keep_bytes .* is below segment_bytes"):
        RotatingRunLog(tmp_path, segment_bytes=2 * MIB, keep_seconds=60, keep_bytes=MIB)
    with pytest.raises(RunLogError, match="no rotating run-log segments"):
        read_range(tmp_path / "nothing", None, None)
    record_watch(tmp_path / "w", seconds=60, segment_bytes=16 * 1024)
    with pytest.raises(RunLogError, match="--until must be after --since"):
        read_range(tmp_path / "w", at("10:30"), at("10:00"))


def test_one_writer_per_folder(tmp_path):
    first = RotatingRunLog(tmp_path, clock=WatchClock())
    with pytest.raises(RunLogError, match=f"another process writes its run log into {tmp_path}"):
        RotatingRunLog(tmp_path, clock=WatchClock())
    first.close()
    RotatingRunLog(tmp_path, clock=WatchClock()).close()  # free again once the first is closed
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("events-")] == ["events.lock"]
