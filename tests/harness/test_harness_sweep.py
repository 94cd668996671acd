"""`repro harness` as a user runs it, over a few faults, with the openai-SDK harness
(tests/harnesses/openai_chat.py: 3 rounds, each reply printed): each outcome checked against what
the harness itself printed and its exit, which a wrapper keeps per run (tee into a folder of the
test's own, named after the run's working folder), never against repro's own reading alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.harness_process import HARNESS, ROOT

pytestmark = [pytest.mark.network, pytest.mark.timeout(150)]

# The harness's output kept per run: bash's pipefail keeps the harness's own exit code.
KEEP = 'set -o pipefail; "$@" 2>&1 | tee "$KEEP_DIR/$(basename "$PWD").log"'


def repro_harness(faults: str, limit: float, harness_args: list[str], keep: Path) -> tuple[int, dict, str]:
    argv = [sys.executable, "-m", "repro", "harness", "--json", "--faults", faults, "--limit", str(limit), "--",
            "bash", "-c", KEEP, "keep", sys.executable, str(HARNESS), "--client", "async", "--rounds", "3",
            "--think", "0", "--say-reply", "--max-tokens", "40", "--base-url", "{proxy_url}/v1", *harness_args]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=140, cwd=ROOT,
                         env={**os.environ, "KEEP_DIR": str(keep)})
    return out.returncode, json.loads(out.stdout or "{}"), out.stderr


def printed(keep: Path, index: int, fault: str) -> tuple[list[dict], str]:
    """The harness's progress lines and its whole output, for the run of `fault`."""
    text = (keep / f"{index:02d}-{fault}.log").read_text()
    lines = []
    for line in text.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue
    return lines, text


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[dict, Path, str]:
    keep = tmp_path_factory.mktemp("harness-output")
    # --timeout 2 --retries 2: the SDK gives up on a silent round after 2 s and retries (a new
    # connection: httpx closes the timed-out one); a 429 is retried after its Retry-After, twice.
    code, result, stderr = repro_harness("healthy,wedge-reused,429-retry-after,engine-hang", 15,
                                         ["--timeout", "2", "--retries", "2"], keep)
    assert code == 0, stderr[-2000:]
    return result, keep, stderr


def test_the_bound_is_printed_before_the_first_fault(sweep):
    result, _, stderr = sweep
    assert "4 fault(s), one run each; at most" in stderr
    assert result["bound_s"] >= 4 * 15 and [run["fault"] for run in result["runs"]] == [
        "healthy", "wedge-reused", "429-retry-after", "engine-hang"]


def test_healthy_finishes_as_the_harness_says(sweep):
    result, keep, _ = sweep
    lines, _ = printed(keep, 0, "healthy")
    run = result["runs"][0]
    assert [line["round"] for line in lines if line["event"] == "done"] == [1, 2, 3]
    assert run["exit_code"] == 0 and run["outcome"] == "finished" and run["requests"] == 3
    assert run["fault_at_s"] is None and run["noticed_after_s"] is None


def test_a_wedged_connection_is_recovered_over_a_new_one_after_the_sdks_timeout(sweep):
    result, keep, _ = sweep
    lines, _ = printed(keep, 1, "wedge-reused")
    run = result["runs"][1]
    done = {line["round"]: line["t"] for line in lines if line["event"] == "done"}
    assert sorted(done) == [1, 2, 3] and run["exit_code"] == 0  # it did finish, despite the fault
    assert run["outcome"] == "recovered" and run["went_on"] == "new connection"
    # round 3 was held until the SDK's 2 s timeout: the harness noticed then, not before
    assert done[3] - done[2] >= 2.0
    assert 1.8 <= run["noticed_after_s"] <= 4.0


def test_a_persistent_429_fails_clearly_with_the_sdks_error(sweep):
    result, keep, _ = sweep
    lines, text = printed(keep, 2, "429-retry-after")
    run = result["runs"][2]
    assert [line["round"] for line in lines if line["event"] == "done"] == [1, 2]
    assert "RateLimitError" in text.splitlines()[-1]
    assert run["outcome"] == "failed clearly" and run["exit_code"] == 1
    assert "RateLimitError" in run["last_line"]
    assert run["requests_after_fault"] == 2  # its two retries, each after Retry-After: 2
    assert run["noticed_after_s"] >= 1.9


@pytest.fixture(scope="module")
def patient(tmp_path_factory) -> tuple[dict, Path]:
    # The SDK's default patience (600 s) against a 12 s limit: hung, and judged 6 s in.
    keep = tmp_path_factory.mktemp("patient-output")
    code, result, stderr = repro_harness("engine-hang,wedge-reused", 12, ["--timeout", "600"], keep)
    assert code == 0, stderr[-2000:]
    return result, keep


def verdicts(run: dict) -> list[tuple[str, str, str]]:
    return [(v["side"], v["where"], v["kind"]) for v in run["verdicts"]]


def test_an_engine_hang_with_a_long_timeout_is_hung_and_judged_server_side(patient):
    result, keep = patient
    lines, _ = printed(keep, 0, "engine-hang")
    run = result["runs"][0]
    started = {line["round"] for line in lines if line["event"] == "start"}
    done = {line["round"] for line in lines if line["event"] == "done"}
    assert started == {1, 2, 3} and done == {1, 2}  # round 3 started, never finished, no error printed
    assert run["outcome"] == "hung" and run["exit_code"] is None
    assert run["fault_at_s"] is not None and run["noticed_after_s"] is None
    assert verdicts(run) == [("server", "engine-0", "engine-hung")], run
    assert run["judging_error"] is None and 5.0 <= run["judged_at_s"] < 12
    assert run["requests"] == 3  # the judgement's canary through the proxy is not counted as the harness's


def test_a_wedged_connection_outwaiting_the_limit_is_hung_and_judged_client_side_at_the_proxy(patient):
    result, keep = patient
    lines, _ = printed(keep, 1, "wedge-reused")
    run = result["runs"][1]
    assert [line["round"] for line in lines if line["event"] == "done"] == [1, 2]
    assert run["outcome"] == "hung" and run["exit_code"] is None
    assert verdicts(run) == [("client", "proxy", "connection-wedged")], run
    assert run["requests_after_fault"] == 0 and run["went_on"] is None  # no canary read as its retry


def test_a_harness_ending_while_it_is_judged_is_not_hung_and_keeps_no_verdict(tmp_path):
    # Judged at 5 s (half the 10 s limit) for at least the judgement's 2 s window; it exits at 6 s.
    # The second run sleeps through its limit with no connection: judged idle in its own code.
    script = 'case "$PWD" in *00-healthy) sleep 6; exit 3;; *) exec sleep 30;; esac'
    argv = [sys.executable, "-m", "repro", "harness", "--json", "--faults", "healthy,503", "--limit", "10",
            "--", "sh", "-c", script]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=90, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    ended, slept = json.loads(out.stdout)["runs"]
    assert ended["outcome"] == "failed clearly" and ended["exit_code"] == 3
    assert ended["verdicts"] == [] and ended["judged_at_s"] is None
    assert 6.0 <= ended["took_s"] < 7.0  # its own exit's moment, not the judgement's end (7 s at the earliest)
    assert slept["outcome"] == "hung" and slept["judged_at_s"] is not None and slept["judging_error"] is None
    assert verdicts(slept) == [("client", "harness", "harness-idle")] and slept["requests"] == 0


def test_an_engine_hang_with_a_short_timeout_fails_clearly(sweep):
    result, keep, _ = sweep
    _, text = printed(keep, 3, "engine-hang")
    run = result["runs"][3]
    assert "APITimeoutError" in text.splitlines()[-1]
    assert run["outcome"] == "failed clearly" and "APITimeoutError" in run["last_line"]


def test_a_harness_printing_its_key_has_it_masked(tmp_path):
    page = tmp_path / "harness.html"
    argv = [sys.executable, "-m", "repro", "harness", "--faults", "healthy", "--limit", "10", "--html", str(page),
            "--", "sh", "-c", "echo 'Error: 401 Authorization: Bearer sk-secret0123456789'; exit 3"]
    table = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT)
    as_json = subprocess.run([*argv[:4], "--json", *argv[4:]], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert table.returncode == 0 and as_json.returncode == 0, table.stderr + as_json.stderr
    for text in (table.stdout, as_json.stdout, as_json.stderr, page.read_text()):
        assert "sk-secret0123456789" not in text
    run = json.loads(as_json.stdout)["runs"][0]
    assert run["outcome"] == "failed clearly" and run["exit_code"] == 3
    assert "<td>healthy</td>" in page.read_text() and "<td>failed clearly</td>" in page.read_text()
    assert run["last_line"] == "Error: 401 Authorization: Bearer ***"
    row = next(line for line in table.stdout.splitlines() if line.startswith("healthy"))
    assert "failed clearly" in row and "exit 3: Error: 401" in row
    assert all(len(line) <= 80 for line in table.stdout.splitlines())


@pytest.mark.parametrize("args, fragment", [
    ([], "no harness command given"),
    (["--", "no-such-harness-here"], "harness command 'no-such-harness-here' not found"),
    (["--faults", "nope", "--", "true"], "unknown fault 'nope'"),
    (["--limit", "0", "--", "true"], "--limit 0"),
    (["--config-template", "/no/such.json", "--", "true"], "--config-template /no/such.json: no such file"),
])
def test_bad_input_is_one_line_and_exit_2(args, fragment):
    out = subprocess.run([sys.executable, "-m", "repro", "harness", *args], capture_output=True, text=True,
                         timeout=30, cwd=ROOT)
    assert out.returncode == 2 and fragment in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_ctrl_c_stops_the_harness_and_the_sweep(tmp_path):
    marker = "0.0123"  # a --think no other process has: how its leftovers would be found
    argv = [sys.executable, "-m", "repro", "harness", "--faults", "healthy,engine-hang,503", "--limit", "60", "--",
            sys.executable, str(HARNESS), "--client", "async", "--rounds", "3", "--think", marker, "--say-reply",
            "--max-tokens", "40", "--base-url", "{proxy_url}/v1"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        shown = []
        for line in process.stdout:  # the healthy row is printed once its run ended; engine-hang runs next
            shown.append(line)
            if line.startswith("healthy"):
                break
        time.sleep(4)  # the hang's harness is started and waiting on round 3
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    rows = [line.split()[0] for line in [*shown, *rest.splitlines()] if line.strip()]
    assert process.returncode == 130
    assert "healthy" in rows and "engine-hang" in rows and "503" not in rows  # stopped after the run it broke into
    hang_row = next(line for line in rest.splitlines() if line.startswith("engine-hang"))
    assert "interrupted" in hang_row and "stopped by you" in hang_row
    leftovers = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                leftovers.append(entry.name)
        except OSError:
            continue
    assert not leftovers
