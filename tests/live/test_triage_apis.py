"""`repro triage --api LIST`: each wire API canaried on every hop and judged on its own, from the
same window's samples: an engine without one API is a finding on that API alone."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from repro.sim import SimConfig, start_sim_process
from tests.support.claims import unbacked_claims

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]


def triage(*args: str) -> tuple[int, dict, str]:
    out = subprocess.run([sys.executable, "-m", "repro", "triage", "--window", "1", "--json", *args],
                         capture_output=True, text=True, timeout=45)
    return out.returncode, json.loads(out.stdout or "{}"), out.stderr


def test_an_engine_without_the_responses_api_is_a_finding_on_that_api_alone():
    with start_sim_process(SimConfig(quirks=frozenset({"no-responses-api"}))) as sim:
        code, result, err = triage("--api", "chat,responses", "--hop", f"name=engine-0,url={sim.url},role=engine")
    assert code == 10, err[-2000:]
    assert result["by_api"]["chat"]["verdicts"] == []
    verdict = result["by_api"]["responses"]["verdicts"][0]
    assert (verdict["side"], verdict["where"], verdict["kind"]) == ("client", "engine-0", "request-rejected")
    assert not unbacked_claims(verdict)
    # The first API's judgement stays where scripts read it: nothing on chat.
    assert result["verdicts"] == [] and result["hops"][0]["canary"]["ok"]


def test_one_api_is_the_triage_it_always_was():
    with start_sim_process(SimConfig()) as sim:
        code, result, err = triage("--hop", f"name=engine-0,url={sim.url},role=engine")
    assert code == 0 and "by_api" not in result and result["hops"][0]["canary"]["api"] == "chat", err[-2000:]


def test_an_unknown_api_is_one_line_and_exit_2():
    out = subprocess.run([sys.executable, "-m", "repro", "triage", "--api", "chat,grpc", "--hop",
                          "name=e,url=http://127.0.0.1:9,role=engine"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--api 'chat,grpc'" in out.stderr and len(out.stderr.strip().splitlines()) == 1
