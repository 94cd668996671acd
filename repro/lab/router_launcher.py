"""Starting a real SGLang router in front of simulated engines, on 127.0.0.1: the SGLang model
gateway as it ships today (pip `smg`, 1.13: `python -m smg launch`) or the previous package
(pip `sglang-router`, 0.3.2: `python -m sglang_router.launch_router`). Both take the same
flags for what is used here (worker URLs, PD prefill/decode, policies, Prometheus address).

Used by the test suite and by `repro scenarios`. The router looks up a tokenizer by each
worker's model_path; the simulated engine reports a local folder, so nothing leaves the machine.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import httpx

from repro.io.process import stop_child

START_TIMEOUT = 45.0
# kind -> the command that launches it (what `--help` of each shows).
LAUNCHERS = {
    "sglang-router": ("-m", "sglang_router.launch_router"),
    "smg": ("-m", "smg", "launch"),
}
MODULES = {"sglang-router": "sglang_router", "smg": "smg"}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@dataclass
class RouterProcess:
    process: subprocess.Popen
    url: str
    metrics_url: str
    log_path: str
    kind: str = "sglang-router"

    def stop(self, timeout: float = 5.0) -> None:
        stop_child(self.process, timeout)

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> RouterProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def router_available(kind: str) -> bool:
    """Whether that router's package is installed here."""
    return importlib.util.find_spec(MODULES[kind]) is not None


def start_router(workers: list[str] = (), *, prefill: list[str] = (), decode: list[str] = (),
                 policy: str = "cache_aware", timeout: float = START_TIMEOUT,
                 extra_args: list[str] = (), kind: str = "sglang-router") -> RouterProcess:
    """Start the router (`kind`: "sglang-router" or "smg") and wait (bounded) until /readiness
    counts every worker healthy."""
    if kind not in LAUNCHERS:
        raise ValueError(f"unknown router {kind!r}: use one of {', '.join(LAUNCHERS)}")
    port, metrics_port = free_port(), free_port()
    args = [sys.executable, *LAUNCHERS[kind], "--host", "127.0.0.1", "--port", str(port),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port), "--log-level", "warn",
            "--worker-startup-timeout-secs", str(int(timeout)), "--worker-startup-check-interval", "1"]
    if prefill or decode:
        args += ["--pd-disaggregation", "--prefill-policy", "round_robin", "--decode-policy", "round_robin"]
        for url in prefill:
            args += ["--prefill", url]
        for url in decode:
            args += ["--decode", url]
        expected = len(prefill) + len(decode)
    else:
        args += ["--policy", policy, "--worker-urls", *workers]
        expected = len(workers)
    args += list(extra_args)
    log = tempfile.NamedTemporaryFile(prefix="repro-router-", suffix=".log", delete=False)
    # HF_HUB_OFFLINE does not stop the router's tokenizer lookup (the workers' local model_path does);
    # it is set anyway so nothing else it links to tries the network.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_PROXY": "127.0.0.1,localhost"}
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    log.close()
    router = RouterProcess(process, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}/metrics", log.name,
                           kind)
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2, trust_env=False) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            try:
                ready = client.get(router.url + "/readiness").json()
                if ready.get("healthy_workers", 0) >= expected:
                    return router
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.2)
    router.stop()
    raise RuntimeError(f"{kind} did not become ready with {expected} workers in {timeout:g} s: "
                       f"{router.log_tail(8).strip() or 'no output'}")
