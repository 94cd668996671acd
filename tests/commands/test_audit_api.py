"""`repro audit --api`: every measuring request speaks the API the harness speaks, on its path, in
its shape and with its headers; the engine's refusal is read in that API's envelope."""

from __future__ import annotations

import subprocess
import sys

import pytest

from repro.sim import SimConfig, start_sim_process
from tests.support.audits import run_audit

pytestmark = [pytest.mark.network, pytest.mark.timeout(120)]

PROBED = SimConfig(dialect="vllm", context_length=8192, quirks=frozenset({"no-max-model-len"}))


def audit(capsys, url: str, api: str) -> tuple[int, dict]:
    code, result, _ = run_audit(capsys, "--hop", f"name=engine-0,url={url},role=engine", "--api", api,
                                "--no-race", "--no-cancel", "--no-idle-stream", "--keepalive-limit", "1",
                                "--client", "httpx", "--horizon", "10", "--body-cap", "65536")
    return code, result


@pytest.mark.parametrize("api", ["messages", "responses"])
def test_the_context_probe_speaks_the_api_and_reads_its_refusal(capsys, api):
    with start_sim_process(PROBED) as sim:
        _, result = audit(capsys, sim.url, api)
    (hop,) = result["hops"]
    assert result["api"] == api
    assert hop["context_tokens"] == 8192 and "a prompt of about 8192 tokens was refused" in hop["context_how"], hop
    assert hop["max_body_bytes"] is None and not hop["body_refuses_all"], hop  # its bodies were served (or refused for context)


def test_the_path_follows_the_api(capsys):
    """An engine without /v1/messages: the messages audit's probes meet its 404, the chat audit's do not."""
    config = SimConfig(dialect="vllm", context_length=8192, quirks=frozenset({"no-max-model-len", "no-messages-api"}))
    with start_sim_process(config) as sim:
        _, chat = audit(capsys, sim.url, "chat")
        _, messages = audit(capsys, sim.url, "messages")
    assert chat["hops"][0]["context_tokens"] == 8192
    assert messages["hops"][0]["context_tokens"] is None, messages["hops"][0]


def test_an_unknown_api_is_one_line_and_exit_2():
    out = subprocess.run([sys.executable, "-m", "repro", "audit", "--hop", "name=e,url=http://127.0.0.1:9,role=engine",
                          "--api", "grpc"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--api" in out.stderr and "grpc" in out.stderr
