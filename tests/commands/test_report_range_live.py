"""A real session (repro.session.run.Run against the embedded simulated engine, hanging after 3
rounds) writing through a RotatingRunLog as `repro watch` will, then `repro report` on its segments:
the whole folder gives the live verdicts, a range only those reached within it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime

import pytest

from repro.core import events as ev
from repro.io.rotating_log import list_segments, read_range
from repro.io.runlog import read_run_log

pytestmark = pytest.mark.network

SESSION = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from repro.io.rotating_log import RotatingRunLog
    from repro.load.driver import DriverConfig
    from repro.load.prompts import PromptSource
    from repro.session.run import Run, RunSettings

    out = Path(sys.argv[1])
    settings = RunSettings(driver=DriverConfig(base_url="", model="", conversations=2, rounds=5, stall_after=1.5),
                           prompts=PromptSource(prompt_chars=200), out=out, sim_fault="hang,after=3",
                           run_timeout=60, progress_every=0)
    run = Run(settings)
    run.log.close()  # the session's plain log, never written: the rotating one replaces it
    (out / "events.jsonl").unlink()
    run.log = RotatingRunLog(out, segment_bytes=8 * 1024)
    result = run.execute()
    print(json.dumps({"tally": result.summary["verdict_tally"], "rotations": run.log.rotations}))
""")


def report(*argv):
    done = subprocess.run([sys.executable, "-m", "repro", "report", *map(str, argv), "--json"],
                          capture_output=True, text=True, timeout=60)
    return done.returncode, json.loads(done.stdout), done.stderr


@pytest.mark.timeout(150)
def test_a_session_on_a_rotating_log_is_reported_whole_and_by_range(tmp_path):
    folder = tmp_path / "watch"
    done = subprocess.run([sys.executable, "-c", SESSION, str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 or done.stdout, done.stderr[-2000:]
    live = json.loads(done.stdout.strip().splitlines()[-1])
    (tally,) = live["tally"]
    assert (tally["side"], tally["where"], tally["kind"]) == ("server", "engine-0", "engine-hung")
    segments = list_segments(folder)
    assert live["rotations"] >= 2 and len(segments) == live["rotations"] + 1
    for segment in segments:  # each judged alone needs its header first
        assert isinstance(read_run_log(segment.path).events[0], ev.RunStarted), segment.name

    code, whole, _ = report(folder)
    assert code == 11 and len(whole["verdicts"]) == tally["rounds"]
    assert {(v["side"], v["where"], v["kind"]) for v in whole["verdicts"]} == {("server", "engine-0", "engine-hung")}

    log = read_range(folder, None, None)
    reached = sorted(log.wall(e.t) for e in log.events if isinstance(e, ev.VerdictReached))
    # Between the first and the second verdict, and the last two: all but the first and the last.
    since, until = (reached[0] + reached[1]) / 2, (reached[-2] + reached[-1]) / 2
    code, ranged, err = report(folder, "--since", datetime.fromtimestamp(since, UTC).isoformat(),
                               "--until", datetime.fromtimestamp(until, UTC).isoformat())
    expected = sum(1 for wall in reached if since <= wall <= until)
    assert code == 11 and len(ranged["verdicts"]) == expected and 0 < expected < len(reached), err
