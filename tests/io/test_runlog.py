from repro.core import events as ev
from repro.io.runlog import RunLogWriter, read_run_log


def test_round_trip_and_torn_last_line(tmp_path):
    writer = RunLogWriter(tmp_path)
    header = ev.RunStarted(t=0.0, config={"target": "x"}, versions={"python": "3"}, monotonic_origin=1.0,
                           wall_clock_origin=2.0)
    writer.write(header)
    writer.write(ev.RoundStarted(t=0.1, conv=0, round=1, prompt_chars=10, messages=1))
    writer.write(ev.SSEReceived(t=0.2, conv=0, round=1, seq=1, chars=3))
    writer.close()
    with open(tmp_path / "events.jsonl", "ab") as f:
        f.write(b'{"type": "round_done", "t": 0.3, "conv"')  # what SIGKILL mid-write leaves
    log = read_run_log(tmp_path)
    assert log.header == header
    assert [type(e) for e in log.events] == [ev.RunStarted, ev.RoundStarted, ev.SSEReceived]
    assert log.torn_last_line and not log.skipped


def test_unknown_event_in_the_middle_is_skipped_and_reported(tmp_path):
    (tmp_path / "events.jsonl").write_bytes(
        b'{"type": "from_the_future", "t": 1}\n{"type": "note", "t": 2, "level": "info", "message": "hi"}\n'
    )
    log = read_run_log(tmp_path)
    assert len(log.events) == 1 and len(log.skipped) == 1 and not log.torn_last_line


def test_missing_log_is_a_clear_error(tmp_path):
    import pytest

    from repro.io.runlog import RunLogError

    with pytest.raises(RunLogError, match="no run log"):
        read_run_log(tmp_path / "nope")
