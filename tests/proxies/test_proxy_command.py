"""`repro proxy`: bad input is one line naming the fix; a running proxy stops cleanly on SIGTERM."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from proxies.spec import HTTP_FAULTS, TCP_FAULTS
from repro.commands import proxy as command
from repro.core.errors import ReproError, UsageError
from repro.sim import SimConfig, serve_in_thread

ROOT = Path(__file__).resolve().parents[2]
# the same parser repro.cli builds, without depending on repro.commands.proxy being listed there yet
LAUNCH = ("import argparse, sys; from repro.commands import proxy as command; p = argparse.ArgumentParser(prog='repro'); "
          "command.register(p.add_subparsers(dest='command')); a = p.parse_args(sys.argv[1:]); sys.exit(a.handler(a))")


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="repro")
    command.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["proxy", *argv])


@pytest.mark.parametrize("argv, fragment", [
    (["--upstream", "127.0.0.1:9"], "--upstream '127.0.0.1:9': give a URL"),
    (["--upstream", "http://127.0.0.1:9", "--fault", "wedge"], "unknown proxy fault 'wedge'"),
    (["--upstream", "http://127.0.0.1:9", "--fault", "freeze"], "add --layer tcp"),
    (["--upstream", "http://127.0.0.1:9", "--layer", "tcp", "--fault", "wedge-after=2"], "use --layer http"),
    (["--upstream", "http://127.0.0.1:9", "--port", "70000"], "--port 70000"),
    (["--upstream", "http://127.0.0.1:9", "--fault", "truncate-hold=x"], "must be an integer"),
])
def test_bad_input_is_a_usage_error(argv, fragment):
    args = parse(*argv)
    with pytest.raises(ReproError) as info:
        args.handler(args)
    assert fragment in str(info.value) and "\n" not in str(info.value)


@pytest.mark.network
@pytest.mark.parametrize("layer, flag", [("http", "--port"), ("http", "--metrics-port"), ("tcp", "--port")])
def test_port_in_use_is_a_usage_error_naming_the_flag(layer, flag):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = parse("--upstream", "http://127.0.0.1:9", "--layer", layer, flag, str(port))
        with pytest.raises(UsageError) as info:
            args.handler(args)
    assert str(info.value) == (f"{flag} {port}: address already in use on 127.0.0.1; "
                               "pick another port, or 0 for a free one")


def test_help_lists_every_fault_from_the_tables(capsys):
    with pytest.raises(SystemExit):
        parse("--help")
    text = capsys.readouterr().out
    for fault in (*HTTP_FAULTS, *TCP_FAULTS):
        assert f"  {fault.usage}  " in text, fault.name
    assert "slow-drip[=MS]" in text and "(default 200)" in text and "(default 600)" in text


@pytest.mark.network
@pytest.mark.parametrize("layer, fault", [("http", "wedge-after=1"), ("tcp", "latency=10")])
def test_runs_until_sigterm(layer, fault):
    with serve_in_thread(SimConfig(ttft=0.01, itl=0.005)) as sim:
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        proc = subprocess.Popen([sys.executable, "-c", LAUNCH, "proxy", "--upstream", sim.url, "--layer", layer,
                                 "--fault", fault], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env, cwd=ROOT)
        try:
            first = proc.stdout.readline()
            second = proc.stdout.readline()
            assert first.startswith("proxy    http://127.0.0.1:"), first + second
            url = first.split()[1]
            if layer == "http":
                assert second.startswith("metrics  http://127.0.0.1:") and second.strip().endswith("/metrics")
            response = httpx.post(url + "/v1/chat/completions", timeout=5,
                                  json={"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]})
            assert response.status_code == 200
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(10) == 0 and time.monotonic() - started < 8
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
