"""The deployment record (probes/deployment.py), read from real parts on 127.0.0.1: simulated
SGLang and vLLM engines in their own processes, the real routers (smg 1.13, sglang-router 0.3.2),
real nginx and HAProxy; secrets redacted; unreachable hops recorded as such within the deadline."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import anyio
import pytest

from probes.deployment import is_secret_name, record_deployment, redact, redact_text
from repro.core.hop import Hop
from repro.core.text import REDACTED
from repro.lab.router_launcher import router_available, start_router
from repro.sim import SimConfig, serve_in_thread, start_sim_process
from tests.support.stacks import haproxy, nginx, started

pytestmark = pytest.mark.timeout(60)

SECRET = "sk-deploy-secret-4242"


def record(hops, **kwargs):
    return anyio.run(lambda: record_deployment(hops, **kwargs))


@pytest.mark.network
def test_sglang_and_vllm_engines_as_each_exposes_itself_and_the_api_key_never_leaks():
    sglang = start_sim_process(SimConfig(cuda_graph_max_bs=48, api_key=SECRET))
    vllm = start_sim_process(SimConfig(dialect="vllm"))
    try:
        found = record([Hop("engine-0", sglang.url + "/v1"), Hop("engine-1", vllm.url)], api_key="caller-key-77")
    finally:
        sglang.stop()
        vllm.stop()
    text = json.dumps(found)
    assert SECRET not in text and "caller-key-77" not in text
    sg, vl = found["engine-0"], found["engine-1"]
    assert sg["role"] == "engine" and sg["url"] == sglang.url
    # SGLang 0.5.23: /server_info carries every server argument and the version; no /version route.
    assert sg["read"] == {"/server_info": "ok", "/version": "not exposed (http 404)", "/v1/models": "ok"}
    assert sg["settings"]["server_info.cuda_graph_max_bs"] == 48
    assert sg["settings"]["version"] == "0.5.23+repro.sim" and sg["settings"]["models"] == "sim-model"
    # SGLang reports its own key in clear (the field and the launch command): set, never shown.
    assert sg["settings"]["server_info.api_key"] == REDACTED
    assert f"--enable-metrics --api-key {REDACTED}" in sg["settings"]["server_info.launch_command"]
    # Volatile state is not deployment: it would make every two runs differ.
    assert not any(key.startswith("server_info.internal_states") or key.endswith(".created") for key in sg["settings"])
    # vLLM 0.33: /version and /v1/models only; /server_info needs its dev mode, so neither path answers.
    assert vl["read"] == {"/server_info": "not exposed (http 404)", "/get_server_info": "not exposed (http 404)",
                          "/version": "ok", "/v1/models": "ok"}
    assert vl["settings"]["version"] == "0.33.0+repro.sim"
    assert not any(key.startswith("server_info.") for key in vl["settings"])


@pytest.mark.network
@pytest.mark.parametrize("kind", ["smg", "sglang-router"])
def test_a_real_router_records_what_it_serves_and_says_its_version_is_not_exposed(kind):
    if not router_available(kind):
        pytest.skip(f"{kind} not installed")
    with serve_in_thread(SimConfig(cuda_graph_max_bs=64)) as engine, start_router([engine.url], kind=kind) as router:
        found = record([Hop("router", router.url, role="router")])["router"]
    # Neither release serves a version of its own over HTTP (checked against both here): recorded so.
    assert found["read"]["/version"] == "not exposed (http 404)"
    assert "version" not in found["settings"]
    assert found["read"]["/workers"] == "ok" and found["settings"]["workers.count"] == 1
    assert found["settings"]["models"] == "sim-model"
    if kind == "smg":
        # smg forwards /get_server_info to a worker: that answer is the engine's, not kept as the router's.
        assert found["read"]["/get_server_info"].startswith("answered by a worker")
        assert not any(key.startswith(("router_info.", "server_info.")) for key in found["settings"])
    else:
        assert found["read"]["/get_server_info"] == "ok"
        assert found["settings"]["router_info.workers_count"] == 1


@pytest.mark.network
@pytest.mark.parametrize(("launcher", "key", "prefix"), [
    (nginx, "http.server", "nginx/"),  # nginx sets its own Server header; its stub_status has no version
    (haproxy, "haproxy_process_build_info.version", "2."),  # HAProxy sets none, its exporter has the build
])
def test_a_real_proxy_records_its_version_signal(launcher, key, prefix, tmp_path):
    with serve_in_thread(SimConfig()) as engine, started(launcher, engine.url, tmp_path) as proxy:
        found = record([Hop("proxy", proxy.url + "/v1", proxy.metrics_url, "proxy")])["proxy"]
    assert found["role"] == "proxy" and found["read"]["GET /v1/models (headers)"] == "ok"
    assert str(found["settings"][key]).startswith(prefix), found


@pytest.mark.network
def test_unreachable_hops_are_recorded_as_such_within_the_deadline():
    silent = socket.socket()  # accepts connections into its backlog and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        refused_port = probe.getsockname()[1]  # closed again: nothing listens there
    try:
        start = time.monotonic()
        found = record([Hop("silent", f"http://127.0.0.1:{silent.getsockname()[1]}"),
                        Hop("gone", f"http://127.0.0.1:{refused_port}", role="router")], timeout=0.5)
        elapsed = time.monotonic() - start
    finally:
        silent.close()
    assert elapsed < 1.5
    assert found["silent"]["settings"] == {} and set(found["silent"]["read"].values()) == {
        "no answer within the 0.5 s deadline"}
    assert found["gone"]["settings"] == {}
    assert set(found["gone"]["read"].values()) == {"error: connection refused"}


def test_secret_names_are_whole_words_so_settings_stay_readable():
    assert all(is_secret_name(n) for n in ("api_key", "admin_api_key", "hf_token", "ssl_keyfile_password",
                                           "client_secret", "OPENAI_APIKEY", "x-auth"))
    assert not any(is_secret_name(n) for n in ("tokenizer_path", "max_total_num_tokens", "keepalive",
                                               "cuda_graph_max_bs", "skip_tokenizer_init"))
    assert redact({"api_key": None, "admin_api_key": "", "hf_token": "hf_abc", "nested": {"password": 3},
                   "auth": {"user": "u", "scopes": ["a"]}, "tokenizer_path": "/t"}) == {
        "api_key": None, "admin_api_key": "", "hf_token": REDACTED, "nested": {"password": REDACTED},
        "auth": {"user": REDACTED, "scopes": [REDACTED]}, "tokenizer_path": "/t"}


def test_secrets_inside_strings_are_masked():
    line = ("sglang --api-key=abc123 --admin-api-key xyz --model-path m --tokenizer-path t "
            "--url http://user:pw@host:1/v1 Authorization: Bearer tok-9 plain-caller-key")
    masked = redact_text(line, api_key="plain-caller-key")
    for secret in ("abc123", "xyz", "user:pw", "tok-9", "plain-caller-key"):
        assert secret not in masked
    assert "--model-path m --tokenizer-path t" in masked and "host:1/v1" in masked


@pytest.mark.parametrize(("line", "secret"), [
    ("python -m sglang.launch_server --enable-metrics --api-key sk-SECRET1 --port 30000", "sk-SECRET1"),
    ("vllm serve m --disable-log-requests --hf-token hf_SECRET2", "hf_SECRET2"),
    ("python -m sglang.launch_server --enable-metrics --ssl-keyfile-password=pw --port 30000", "=pw"),
    ("python -m sglang.launch_server --enable-metrics --admin-api-key X --port 30000", " X"),
])
def test_a_boolean_flag_before_a_secret_flag_does_not_hide_the_secret(line, secret):
    masked = redact_text(line)
    assert secret not in masked and REDACTED in masked
    assert "--port 30000" in masked or line.endswith("hf_SECRET2")  # the other flags stay readable


@pytest.mark.parametrize(("text", "secrets", "kept"), [
    # A JSON config string (SGLang's kv_transfer_config, hicache_storage_backend_extra_config), and a repr.
    ("""--kv-transfer-config '{"hf_token": "hf_leak", "password": "pw_leak", "role": "kv_both"}' --port 1""",
     ("hf_leak", "pw_leak"), ('"role": "kv_both"', "--port 1")),
    ("{'secret_key': 'sk1', 'region': 'eu'}", ("sk1",), ("'region': 'eu'",)),
    # A presigned URL's query parameters.
    ("--model-path s3://b/m?X-Amz-Signature=SIG1&X-Amz-Credential=CRED1&X-Amz-Date=20261204 --port 1",
     ("SIG1", "CRED1"), ("X-Amz-Date=20261204", "s3://b/m?")),
    # Environment assignments before the command, quoted or not, a value with an `&` in it.
    ("HF_TOKEN=hf_env CUDA_VISIBLE_DEVICES=0 python -m sglang.launch_server", ("hf_env",), ("CUDA_VISIBLE_DEVICES=0",)),
    ("""HF_TOKEN="hf_dq" API_KEY='sk_sq' PASSWORD=ab&cd python""", ("hf_dq", "sk_sq", "ab", "cd"), ("python",)),
    # A JSON field whose value is not a string.
    ('{"password": 12345, "port": 30000, "token": null}', ("12345",), ('"port": 30000', '"token": null')),
])
def test_secrets_in_config_strings_query_strings_and_assignments_are_masked(text, secrets, kept):
    for masked in (redact_text(text), redact({"launch_command": text})["launch_command"]):
        assert not any(secret in masked for secret in secrets), masked
        assert all(k in masked for k in kept), masked


def test_a_name_that_describes_a_secret_is_a_setting_whose_change_shows():
    # A file path or a size about tokens or keys is not the secret: masked, its change would vanish.
    assert not any(is_secret_name(n) for n in ("speculative_token_map", "api_key_file", "token_limit"))
    assert redact({"speculative_token_map": "/m/map.pt"}) == {"speculative_token_map": "/m/map.pt"}
    assert all(is_secret_name(n) for n in ("ssl_keyfile_password", "hf_token", "x_amz_signature"))
    # ... but a map of keys is keys.
    assert redact({"api_key_map": {"alice": "sk-alice"}}) == {"api_key_map": {"alice": REDACTED}}


def test_a_launch_command_given_as_a_list_is_masked_as_argv():
    command = ["python", "-m", "sglang.launch_server", "--enable-metrics", "--api-key", "sk-SECRET3", "--port", "1"]
    masked = redact({"launch_command": command})["launch_command"]
    assert masked == command[:5] + [REDACTED, "--port", "1"]
    assert masked[3] == "--enable-metrics" and redact({"argv": ["--enable-metrics", "--ssl-keyfile-password=pw"]}) == {
        "argv": ["--enable-metrics", f"--ssl-keyfile-password={REDACTED}"]}


@pytest.mark.network
def test_triage_carries_the_record_in_its_json():
    engine = start_sim_process(SimConfig(cuda_graph_max_bs=32, api_key=SECRET))
    try:
        out = subprocess.run([sys.executable, "-m", "repro", "triage", "--hop", f"name=engine-0,url={engine.url}/v1",
                              "--window", "1", "--interval", "0.5", "--json"],
                             capture_output=True, text=True, timeout=30)
    finally:
        engine.stop()
    assert SECRET not in out.stdout + out.stderr
    deployment = json.loads(out.stdout)["deployment"]
    assert deployment["engine-0"]["settings"]["server_info.cuda_graph_max_bs"] == 32
    assert deployment["engine-0"]["read"]["/server_info"] == "ok"
