"""`repro audit` reads the engine's context where it is written: /v1/models' max_model_len, else
SGLang's /server_info, else a bounded probe whose first refused prompt states it in the engine's
words. The simulated engine's no-max-model-len quirk leaves it out of /v1/models."""

from __future__ import annotations

import pytest

from repro.sim import SimConfig, start_sim_process
from tests.support.audits import run_audit

pytestmark = [pytest.mark.network, pytest.mark.timeout(120)]


def audit(capsys, url: str) -> tuple[int, dict]:
    code, result, _ = run_audit(capsys, "--hop", f"name=engine-0,url={url},role=engine", "--no-race", "--no-cancel",
                                "--no-idle-stream", "--keepalive-limit", "1", "--client", "httpx", "--horizon", "10")
    return code, result


@pytest.mark.parametrize(("config", "tokens", "how", "requests"), [
    (SimConfig(context_length=8192), 8192, "GET /v1/models max_model_len", 1),
    (SimConfig(context_length=8192, quirks=frozenset({"no-max-model-len"})), 8192,
     "GET /server_info context_length", 2),
    (SimConfig(quirks=frozenset({"no-max-model-len"})), 32768,
     "GET /server_info max_req_input_len 32762 + 6", 2),
    # vLLM has no /server_info (nor /get_server_info): a prompt of 8192 tokens is refused in vLLM's
    # words, "longer than the maximum model length of 8192"
    (SimConfig(dialect="vllm", context_length=8192, quirks=frozenset({"no-max-model-len"})), 8192,
     "bounded probe, 1 max_tokens=1 requests: a prompt of about 8192 tokens was refused", 4),
    # the first prompt served, the second (32768 tokens) refused: "maximum context length is 20000 tokens"
    (SimConfig(dialect="vllm", context_length=20000, quirks=frozenset({"no-max-model-len"})), 20000,
     "a prompt of about 32768 tokens was refused, the engine stating a context of 20000 tokens", 5),
], ids=["v1-models", "server-info-context-length", "server-info-max-req-input-len", "probe-first", "probe-second"])
def test_the_context_is_read_where_it_is_written(capsys, config, tokens, how, requests):
    with start_sim_process(config) as sim:
        _, result = audit(capsys, sim.url)
    (hop,) = result["hops"]
    assert hop["context_tokens"] == tokens, hop
    assert how in hop["context_how"], hop["context_how"]
    assert result["costs"]["engine-0"]["context"]["requests"] == requests


def test_an_engine_serving_every_probe_prompt_has_no_context_to_speak_of(capsys):
    """Without a context limit the sim serves the largest probe prompt (524288 tokens, 2 MiB): not found, said."""
    with start_sim_process(SimConfig(dialect="vllm", quirks=frozenset({"no-max-model-len"}))) as sim:
        code, result = audit(capsys, sim.url)
    (hop,) = result["hops"]
    assert hop["context_tokens"] is None
    assert hop["context_how"] == "not found: a prompt of about 524288 tokens (2 MiB) was served (4 requests)"
    assert result["findings"] == [] and code == 0
