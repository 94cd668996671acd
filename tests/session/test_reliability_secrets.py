"""A planted API key never reaches anything the tool writes: run folder (events.jsonl, the proxy's
flow log), report.html, stdout, stderr; also not through a server's error message that echoes it.

tests/session/test_run_cli.py checks the plain case (env key, silent server, run folder + output). Here
the key also travels through the fault proxy, the canaries of a stall, `repro report`,
`repro triage`, and the error bodies of a 401 that quotes the key back, as OpenAI's own does
("Incorrect API key provided: sk-...").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.hostile import healthy, hostile_server, scripted, silent
from tests.support.pages import without_plotly

pytestmark = [pytest.mark.network, pytest.mark.timeout(90)]

SECRET = "sk-reliability-PLANTED-0123456789abcdef"
# What a leak can look like besides the raw key: the key cut short in an excerpt.
FRAGMENTS = (SECRET, SECRET[:20], SECRET[-16:])


def repro(*args: str, env_extra: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OPENAI_API_KEY": SECRET, **(env_extra or {})}
    env.pop("OPENAI_BASE_URL", None)
    return subprocess.run([sys.executable, "-m", "repro", *args], capture_output=True, env=env, timeout=timeout)


def leaks(blobs: dict[str, bytes]) -> list[str]:
    return [name for name, data in blobs.items() if any(f.encode() in data for f in FRAGMENTS)]


def written(folder: Path) -> dict[str, bytes]:
    return {str(p): without_plotly(p.read_bytes()) for p in folder.rglob("*") if p.is_file()}


def echo_key_401(status: str = "401 Unauthorized"):
    """OpenAI-style 401 that quotes the presented key back in the body and a header."""

    async def behaviour(reader, writer, index) -> bool:
        # the key the client presented is in the request already read by HostileServer;
        # quote the planted one, as a server echoing Authorization would.
        body = json.dumps({"error": {"message": f"Incorrect API key provided: {SECRET}.", "type": "invalid_request_error",
                                     "code": "invalid_api_key"}}).encode()
        writer.write(f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
                     f"www-authenticate: Bearer realm=\"{SECRET}\"\r\n\r\n".encode() + body)
        await writer.drain()
        return True

    return behaviour


def test_key_through_proxy_stall_canary_and_report_never_written(tmp_path):
    """Healthy rounds, then silence: the stall triggers probes and a canary (which sends the key)
    through the injected fault proxy, whose flow log lands in the run folder."""
    run_dir = tmp_path / "run"
    with hostile_server(scripted(healthy, healthy, silent)) as server:
        run = repro("run", "--target", server.url, "--model", "m", "--rounds", "3", "--stall-after", "1",
                    "--round-timeout", "4", "--probe-interval", "0.25", "--inject", "pass",
                    "--out", str(run_dir), "--json")
        heads = b"".join(r["head"] for r in server.requests)
    assert run.returncode in (0, 10, 11, 12), run.stderr.decode()[-2000:]
    assert SECRET.encode() in heads, "the key was sent upstream through the proxy"
    assert (run_dir / "proxy-flows.jsonl").exists(), sorted(os.listdir(run_dir))
    rep = repro("report", str(run_dir), "--json")
    assert rep.returncode in (0, 10, 11, 12), rep.stderr.decode()[-2000:]
    assert (run_dir / "report.html").exists()
    blobs = {**written(run_dir), "run stdout": run.stdout, "run stderr": run.stderr,
             "report stdout": rep.stdout, "report stderr": rep.stderr}
    assert not leaks(blobs)


def test_key_is_not_copied_from_a_401_that_echoes_it(tmp_path):
    run_dir = tmp_path / "run"
    with hostile_server(echo_key_401()) as server:
        run = repro("run", "--target", server.url, "--model", "m", "--rounds", "2", "--conversations", "1",
                    "--stall-after", "1", "--round-timeout", "3", "--out", str(run_dir), "--json")
    assert run.returncode == 10, run.stderr.decode()[-2000:]  # a 401: the request is refused (client side)
    summary = json.loads(run.stdout)
    assert summary["rounds_failed"] == 2
    errors = [e for row in summary["per_round"] for e in row["errors"]]
    assert errors and all("HTTP 401" in e for e in errors), errors
    rep = repro("report", str(run_dir), "--json")
    blobs = {**written(run_dir), "run stdout": run.stdout, "run stderr": run.stderr,
             "report stdout": rep.stdout, "report stderr": rep.stderr}
    assert not leaks(blobs), leaks(blobs)


def test_key_is_not_copied_from_a_401_during_model_discovery():
    with hostile_server(echo_key_401()) as server:
        run = repro("run", "--target", server.url, "--rounds", "1", "--connect-timeout", "2")
    assert run.returncode == 2
    lines = run.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "--model" in lines[0], lines
    assert not leaks({"stdout": run.stdout, "stderr": run.stderr})


def test_triage_canary_of_a_401_that_echoes_the_key_does_not_print_it():
    with hostile_server(echo_key_401()) as server:
        hop = f"name=engine,url={server.url},role=engine"
        tri = repro("triage", "--hop", hop, "--model", "m", "--window", "1", "--interval", "0.5",
                    "--canary-timeout", "1", "--json")
    assert tri.returncode in (0, 10, 11, 12), tri.stderr.decode()[-2000:]
    result = json.loads(tri.stdout)
    canary = result["hops"][0]["canary"]
    assert canary["ok"] is False and "401" in str(canary.get("error") or canary.get("status"))
    assert not leaks({"stdout": tri.stdout, "stderr": tri.stderr}), leaks({"stdout": tri.stdout, "stderr": tri.stderr})


def test_key_in_the_target_url_userinfo_is_not_written(tmp_path):
    """A key given in the URL (http://user:KEY@host) is refused before anything is written: URLs
    are logged, so credentials belong in OPENAI_API_KEY."""
    run_dir = tmp_path / "run"
    with hostile_server(healthy) as server:
        url = server.url.replace("http://", f"http://apikey:{SECRET}@")
        run = repro("run", "--target", url, "--model", "m", "--rounds", "1", "--conversations", "1",
                    "--round-timeout", "3", "--probe-interval", "0", "--out", str(run_dir), "--json",
                    env_extra={"OPENAI_API_KEY": ""})
    assert run.returncode == 2 and b"OPENAI_API_KEY" in run.stderr, run.stderr.decode()[-2000:]
    assert not run_dir.exists()
    assert not leaks({"stdout": run.stdout, "stderr": run.stderr})
