"""`repro watch`'s bad input: one line naming the flag and the fix, exit 2, before anything starts
(no socket bound, no folder written)."""

from __future__ import annotations

import pytest

from repro.cli import main

pytestmark = pytest.mark.timeout(30)

HOP = ("--hop", "name=engine-0,url=http://127.0.0.1:1")


@pytest.mark.parametrize(("args", "says"), [
    ((), "nothing to watch: give --hop"),
    ((*HOP, "--listen", "nonsense"), "--listen 'nonsense' is not HOST:PORT; give e.g. 127.0.0.1:9464"),
    ((*HOP, "--duration", "0"), "--duration must be > 0"),
    ((*HOP, "--think", "-1"), "--think must be >= 0"),
    ((*HOP, "--rounds", "0"), "--rounds must be > 0"),
    ((*HOP, "--canary-every", "nan"), "--canary-every must be a finite number"),
    ((*HOP, "--log-keep-mib", "10"), "--log-keep-mib 10 is below --log-segment-mib 64"),
    ((*HOP, "--target", "ftp://127.0.0.1/v1"), "is not an http(s) URL"),
])
def test_bad_input_is_one_line_and_exit_2(args, says, capsys, tmp_path):
    assert main(["watch", *args, "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("repro watch: error: ") and says in err[0], err
    assert not (tmp_path / "w").exists()


def test_a_think_time_not_below_the_keepalive_expiry_is_warned_about(capsys, tmp_path):
    # Stopped by the bad --listen right after: the warning comes first, from the flags alone.
    assert main(["watch", *HOP, "--think", "5", "--listen", "x", "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert "warning: --think 5 is not below --keepalive-expiry 4: each round opens a new connection" in err
