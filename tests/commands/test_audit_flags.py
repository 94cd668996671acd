"""`repro audit`'s bad input: one line naming the flag and the fix, exit 2, before anything is sent."""

from __future__ import annotations

import pytest

from repro.cli import main

ENGINE = ["--hop", "name=engine,url=http://127.0.0.1:30000,role=engine"]


@pytest.mark.parametrize(("flags", "said"), [
    (["--hop", "name=engine,url=http://10.1.2.3:30000,role=engine"], "hop engine is not on this machine"),
    (["--hop", "name=engine,url=http://example.com:30000,role=engine"], "add --yes"),
    ([*ENGINE, "--upstream-keepalive", "nginx=60"], "no hop named 'nginx'"),
    ([*ENGINE, "--upstream-keepalive", "engine"], "give HOP=SECONDS"),
    ([*ENGINE, "--upstream-keepalive", "engine=inf"], "give HOP=SECONDS"),
    ([*ENGINE, "--body-cap", "100"], "--body-cap 100"),
    ([*ENGINE, "--keepalive-limit", "0"], "--keepalive-limit must be > 0"),
    ([*ENGINE, "--horizon", "0"], "--horizon must be at least 1"),
    ([], "no hops to audit"),
])
def test_bad_input_is_one_line(capsys, flags, said):
    assert main(["audit", *flags]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err
