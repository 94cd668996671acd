"""Safe defaults: everything we start listens on 127.0.0.1 unless told otherwise; a real target is
protected from an accidental flood; `repro triage` sends at most one canary per hop.

The listening address is read from the kernel (/proc/net/tcp, tcp6), not from the URL we print:
a server that prints 127.0.0.1 but binds 0.0.0.0 must fail here.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from repro.cli import build_parser
from tests.support.hostile import healthy, hostile_server, silent

pytestmark = pytest.mark.timeout(90)

LISTEN = "0A"


def listeners() -> dict[int, set[str]]:
    """port -> the local addresses it is listened on, over IPv4 and IPv6."""
    found: dict[int, set[str]] = {}
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != LISTEN:
                continue
            addr_hex, port_hex = fields[1].split(":")
            raw = bytes.fromhex(addr_hex)
            if v6:
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                addr = socket.inet_ntop(socket.AF_INET6, raw)
            else:
                addr = socket.inet_ntop(socket.AF_INET, raw[::-1])
            found.setdefault(int(port_hex, 16), set()).add(addr)
    return found


def assert_loopback_only(url: str) -> None:
    port = urlsplit(url).port
    addresses = listeners().get(port)
    assert addresses, f"nothing listens on port {port} ({url})"
    assert addresses <= {"127.0.0.1"}, f"{url} listens on {addresses}"


@pytest.mark.network
def test_the_fault_proxy_and_its_metrics_listen_on_loopback_by_default():
    from proxies import start_proxy

    with hostile_server(healthy) as upstream:
        with start_proxy(f"http://127.0.0.1:{upstream.port}", "pass") as proxy:
            assert_loopback_only(proxy.url)
            assert proxy.metrics_url, "the proxy serves its metrics"
            assert_loopback_only(proxy.metrics_url)


@pytest.mark.network
def test_the_tcp_relay_listens_on_loopback_by_default():
    from proxies import start_relay

    with hostile_server(healthy) as upstream:
        relay = start_relay(f"127.0.0.1:{upstream.port}", "pass")
        try:
            assert_loopback_only(relay.url if hasattr(relay, "url") else f"http://127.0.0.1:{relay.port}")
        finally:
            relay.stop()


@pytest.mark.network
def test_the_simulated_engine_listens_on_loopback_by_default_in_thread_and_process():
    from repro.sim import SimConfig, serve_in_thread, start_sim_process

    assert SimConfig().host == "127.0.0.1"
    with serve_in_thread(SimConfig()) as sim:
        assert_loopback_only(sim.url)
    process = start_sim_process(SimConfig())
    try:
        # the child's sockets are in the same network namespace: /proc/net/tcp shows them too
        assert_loopback_only(process.url)
    finally:
        process.stop()


@pytest.mark.parametrize("argv", [["sim"], ["proxy", "--upstream", "http://127.0.0.1:1"]])
def test_the_command_line_defaults_bind_loopback(argv):
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit:  # a required flag this test does not know about: read the default instead
        pytest.skip(f"`repro {argv[0]}` needs other flags")
    assert args.host == "127.0.0.1"


# --- the flood cap ------------------------------------------------------------------------------

def run_cli(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env_extra or {})}
    env.pop("OPENAI_API_KEY", None)
    if not env_extra or "OPENAI_BASE_URL" not in env_extra:
        env.pop("OPENAI_BASE_URL", None)
    return subprocess.run([sys.executable, "-m", "repro", "run", *args], capture_output=True, env=env, timeout=60)


CLOSED = "http://127.0.0.1:9/v1"


@pytest.mark.network
@pytest.mark.parametrize("args, env", [
    (["--target", CLOSED, "--conversations", "1000"], None),
    (["--target", CLOSED, "--conversations", "100", "--rounds", "201"], None),  # 20 100 rounds in all
    (["--conversations", "1000"], {"OPENAI_BASE_URL": CLOSED}),  # the target from the environment
    (["--hop", f"name=engine,url={CLOSED},role=engine", "--conversations", "1000"], None),  # the target as a hop
])
def test_a_flood_of_a_real_target_is_refused_in_one_line_with_exit_2(args, env, tmp_path):
    proc = run_cli(*args, "--model", "m", "--out", str(tmp_path / "run"), env_extra=env)
    lines = proc.stderr.decode().strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, lines[-3:])
    assert len(lines) == 1 and "--allow-flood" in lines[0] and "safety cap" in lines[0], lines
    assert not (tmp_path / "run").exists(), "nothing was started or written"


def test_allow_flood_lifts_the_cap_without_touching_the_network():
    from repro.commands.run import settings_from_args

    args = build_parser().parse_args(["run", "--target", CLOSED, "--model", "m", "--conversations", "1000",
                                      "--allow-flood"])
    settings = settings_from_args(args)
    assert settings.driver.conversations == 1000


def test_the_cap_sits_just_above_its_limits():
    from repro.commands.options import SAFE_CONVERSATIONS, SAFE_TOTAL_ROUNDS
    from repro.commands.run import settings_from_args
    from repro.core.errors import UsageError

    ok = build_parser().parse_args(["run", "--target", CLOSED, "--model", "m", "--conversations",
                                    str(SAFE_CONVERSATIONS), "--rounds", str(SAFE_TOTAL_ROUNDS // SAFE_CONVERSATIONS)])
    assert settings_from_args(ok).driver.conversations == SAFE_CONVERSATIONS
    over = build_parser().parse_args(["run", "--target", CLOSED, "--model", "m", "--conversations",
                                      str(SAFE_CONVERSATIONS + 1), "--rounds", "1"])
    with pytest.raises(UsageError, match="--allow-flood"):
        settings_from_args(over)


# --- triage sends at most one canary per hop ---------------------------------------------------------

def chat_posts(server) -> int:
    return sum(1 for r in server.requests if r["head"].startswith(b"POST ") and b"/chat/completions" in
               r["head"].split(b"\r\n", 1)[0])


@pytest.mark.network
def test_triage_sends_one_canary_per_hop_to_healthy_and_hostile_hops_alike():
    with hostile_server(healthy) as good, hostile_server(silent) as bad:
        hops = [f"name=front,url={bad.url},role=proxy", f"name=engine,url={good.url},metrics=http://127.0.0.1:{good.port}/metrics,role=engine"]
        proc = subprocess.run(
            [sys.executable, "-m", "repro", "triage", *sum((["--hop", h] for h in hops), []), "--model", "m",
             "--window", "3", "--interval", "0.25", "--canary-timeout", "1", "--json"],
            capture_output=True, timeout=60, env={k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"})
        good_posts, bad_posts = chat_posts(good), chat_posts(bad)
        good_scrapes = sum(1 for r in good.requests if b"/metrics" in r["head"].split(b"\r\n", 1)[0])
    assert proc.returncode in (0, 10, 11, 12), proc.stderr.decode()[-2000:]
    result = json.loads(proc.stdout)
    assert {h["name"] for h in result["hops"]} == {"front", "engine"}
    assert good_posts == 1, good_posts
    assert bad_posts == 1, bad_posts
    assert good_scrapes >= 3, "the window was sampled (the cap is on canaries, not on scrapes)"
