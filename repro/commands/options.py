"""What several commands parse and decide alike: the driver-shape flags of `run` and `bench`, the
checks of a number, a target URL and the flood cap, the stack (--hop and --topology), the TLS
trust (--ca-file, --insecure), a target's model, and the exit status of a run's summary (`run`,
`report`). Each check fails with one line naming the flag and the fix (a UsageError).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

from repro.core.errors import UsageError
from repro.core.exits import EXIT_INTERRUPTED, exit_for_sides
from repro.core.hop import Hop, chat_url
from repro.core.wire_api import APIS
from repro.io.stack_file import hops_from
from repro.io.tls import Trust, check_ca_file, client_context, rejection, use_trust
from repro.load.clients import CLIENTS, TIMEOUT_MODES, check_client_options
from repro.load.connection_policy import CONNECTION_POLICIES, parse_connections
from repro.load.tools import tool_definitions

# A production target deserves protection from a typo: above these, ask for --allow-flood.
SAFE_CONVERSATIONS = 256
SAFE_TOTAL_ROUNDS = 20_000


def add_driver_shape_flags(p: argparse.ArgumentParser) -> None:
    """The flags that shape how the driver talks to the stack, shared by `run` and `bench`: the
    client library, its connections and timeouts, tool rounds, worker processes."""
    p.add_argument("--tools", type=int, default=0, metavar="N",
                   help="send N tool definitions (OpenAI tools format) with every round; a reply that calls tools gets "
                        "synthetic tool results and the next round continues from them, as an agent loop does (default 0)")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="processes to shard the conversations across, each with its own event loop and run-log segment, "
                        "merged at the end (default 1); for many conversations on a client with cores to spare")
    p.add_argument("--api", choices=APIS, default="chat",
                   help="the wire API the conversations speak: chat (/v1/chat/completions, default), responses "
                        "(/v1/responses, as Codex CLI), messages (/v1/messages, Anthropic's, as Claude Code; the "
                        "key from ANTHROPIC_API_KEY, sent as x-api-key)")
    p.add_argument("--client", choices=CLIENTS, default="aiohttp", metavar="CLIENT",
                   help="the HTTP client that streams, with its library's own pool and keep-alive: aiohttp "
                        "(default, the fastest; one keep-alive connection per conversation), httpx, openai (the "
                        "SDK's sync client: a new connection every streamed round), openai-async (reuses one), "
                        "anthropic-async (the anthropic SDK's AsyncAnthropic, with --api messages), anthropic (its "
                        "sync Anthropic, a thread per round); openai and openai-async speak --api responses too")
    p.add_argument("--connections", default="per-conversation", metavar=CONNECTION_POLICIES,
                   help="aiohttp only: one keep-alive connection per conversation (default), one pool of N shared by "
                        "every conversation, or a fresh connection for every round")
    p.add_argument("--client-timeouts", choices=TIMEOUT_MODES, default="repro",
                   help="repro (default): connect deadline only, no retries, the stall watchdog judges; native: keep "
                        "the library's own timeouts and retries, and say in each stall's verdict what the client "
                        "would have done and when")


def driver_shape_from_args(args: argparse.Namespace) -> tuple[dict, list[dict]]:
    """The driver-shape flags checked (one line naming the flag and the fix): the DriverConfig
    fields they give, and the tool definitions for the prompts (`--workers` is read as it is)."""
    check_client_options(args.client, args.connections, args.client_timeouts)
    check_client_speaks(args.client, args.api)
    if args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}")
    policy, pool = parse_connections(args.connections)
    if policy == "pool" and pool < args.workers:
        # Each worker is a process with its own pool: the N connections are shared out among them.
        raise UsageError(f"--connections pool={pool} is shared out among --workers {args.workers}, one pool per "
                         f"worker process: give pool={args.workers} or more, or fewer workers")
    tools = tool_definitions(args.tools)  # a ToolCountError names the allowed range
    return {"client": args.client, "connections": args.connections, "client_timeouts": args.client_timeouts,
            "api": args.api}, tools


def check_client_speaks(client: str, api: str) -> None:
    """An SDK client speaks its own API only (aiohttp and httpx speak every one)."""
    if api == "messages" and client.startswith("openai"):
        raise UsageError(f"--client {client} speaks chat completions and responses; with --api messages use "
                         "--client anthropic, anthropic-async, aiohttp or httpx")
    if api != "messages" and client.startswith("anthropic"):
        raise UsageError(f"--client {client} speaks the Messages API only: add --api messages, or use "
                         "--client aiohttp or httpx")


def api_key_for(api: str) -> str | None:
    """The key a run sends, from the variable its API's harnesses read (never printed)."""
    if api == "messages":
        return os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("OPENAI_API_KEY") or None
    return os.environ.get("OPENAI_API_KEY") or None


def positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    """A flag's number: finite, and above 0 (or at least 0 with `allow_zero`)."""
    if not math.isfinite(value):  # inf, nan: nothing here is unbounded
        raise UsageError(f"{name} must be a finite number, got {value:g}")
    if value < 0 or (value == 0 and not allow_zero):
        raise UsageError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value:g}")


def add_stack_flags(p: argparse.ArgumentParser, *, hop_help: str) -> None:
    """--hop (repeatable) and --topology: the user's stack, read by hops_from_args."""
    p.add_argument("--hop", action="append", default=[], metavar="name=N,url=U[,metrics=M][,role=R]", help=hop_help)
    p.add_argument("--topology", type=Path, help="TOML file of [[hop]] tables (name, url, metrics_url, role)")


def hops_from_args(args: argparse.Namespace) -> list[Hop]:
    """The user's stack from --topology and --hop, client side first, names unique across both."""
    if not args.topology and not args.hop:
        return []
    return hops_from(args.topology, args.hop)


def check_target_url(target: str) -> None:
    """An http(s) URL with a host, and no credentials in it: URLs are logged, keys never are."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(target)
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError as exc:
        raise UsageError(f"--target {target!r} is not a valid URL ({exc}); give e.g. http://127.0.0.1:30000/v1") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--target {target!r} is not an http(s) URL; give e.g. http://127.0.0.1:30000/v1")
    if parts.username or parts.password:
        raise UsageError("--target carries credentials in the URL; pass the key in OPENAI_API_KEY instead "
                         "(URLs are written to the run log, keys never are)")


def add_tls_flags(p: argparse.ArgumentParser) -> None:
    """--ca-file and --insecure: which certificates an https hop may present, for every client of
    the command (the driver's, the probes, the canaries, model discovery, the deployment record)."""
    p.add_argument("--ca-file", metavar="PATH",
                   help="PEM file of CA certificates to trust for https hops, added to the system's (which "
                        "honours SSL_CERT_FILE and SSL_CERT_DIR): e.g. the private CA in front of your engines")
    p.add_argument("--insecure", action="store_true",
                   help="check no certificate and no host name on https hops (every verdict it touched says so)")


def trust_from_args(args: argparse.Namespace) -> Trust:
    """The TLS trust the flags give, checked, and made the process's (repro/io/tls.py). A namespace
    built without the flags (a caller of `handle`, not the parser) trusts the system's CAs."""
    ca_file, insecure = getattr(args, "ca_file", None), getattr(args, "insecure", False)
    if ca_file and insecure:
        raise UsageError("--insecure checks no certificate, so --ca-file would not be used; give one of them")
    if ca_file:
        problem = check_ca_file(ca_file)
        if problem is not None:
            raise UsageError(f"--ca-file {ca_file}: {problem}; give the PEM file of the CA that signed the "
                             "hop's certificate")
    trust = Trust(ca_file=str(Path(ca_file).resolve()) if ca_file else None, insecure=insecure)
    use_trust(trust)
    return trust


class ModelsUnanswered(UsageError):
    """The target did not list its models for a reason that is itself the trouble to judge: nothing
    answered (refused, silent), our client rejected its certificate, or it answered a server error
    (a proxy's 502 in front of a dead engine). For `run` and `triage`, evidence, not a usage error.
    `what` is the trouble alone; the message adds the fix for a command that cannot go on."""

    def __init__(self, url: str, reason: str) -> None:
        self.what = f"could not list models at {url} ({reason})"
        super().__init__(f"{self.what}; pass --model NAME")


# Sent as the model name when the target listed none because it did not answer: a dead engine is
# judged from its canaries, which need no real model to fail.
UNLISTED_MODEL = "unlisted"


def discover_model(target: str, *, api_key: str | None, timeout: float) -> str:
    """The target's first model from /v1/models, bounded, over the process's TLS trust. A
    ModelsUnanswered when nothing answered, else a UsageError when the answer held no model."""
    import httpx

    url = chat_url(target).removesuffix("/chat/completions") + "/models"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        # trust_env=False: no HTTPS_PROXY from the environment (a hop we do not measure); the CA
        # variables are honoured by the shared context itself.
        response = httpx.get(url, headers=headers, timeout=timeout, trust_env=False, verify=client_context())
    except httpx.TransportError as exc:
        tls = rejection(exc)
        reason = (tls.text if tls is not None else f"no answer within {timeout:g} s"
                  if isinstance(exc, httpx.TimeoutException) else str(exc) or type(exc).__name__)
        raise ModelsUnanswered(url, reason) from None
    if response.status_code >= 500:
        raise ModelsUnanswered(url, f"http {response.status_code}")
    try:
        models = response.json().get("data") or []
        return str(models[0]["id"])
    except Exception as exc:  # it answered, but with no model list (a wrong URL, key): the same fix whatever the shape
        reason = f"http {response.status_code}" if response.status_code != 200 else type(exc).__name__
        raise UsageError(f"could not list models at {url} ({reason}); pass --model NAME") from None


def note_on_stderr(line: str) -> None:
    print(f"note: {line}", file=sys.stderr, flush=True)


def model_of_stack(urls: list[str], *, api_key: str | None, timeout: float,
                   note: Callable[[str], None]) -> str:
    """The first model any of `urls` lists, asked in order. When none of them answered at all
    (a dead engine, a certificate our client rejects), UNLISTED_MODEL, said through `note`: the
    run or triage still starts, and its canaries are the evidence. A target that answered
    without a model list is a usage error (a wrong URL or key), as before."""
    unanswered: ModelsUnanswered | None = None
    answered: UsageError | None = None
    for url in urls:
        try:
            return discover_model(url, api_key=api_key, timeout=timeout)
        except ModelsUnanswered as exc:
            unanswered = unanswered or exc
        except UsageError as exc:
            answered = answered or exc
    if answered is not None:
        raise answered
    assert unanswered is not None, "model_of_stack needs at least one URL"
    note(f"{unanswered.what}: starting without it, the canaries will say why "
         f"(model name sent: {UNLISTED_MODEL!r}; --model NAME sets it)")
    return UNLISTED_MODEL


def exit_code(summary: dict) -> int:
    """The exit status of a run's summary (repro.core.exits): interrupted, or which side its verdicts blame."""
    if summary.get("interrupted"):
        return EXIT_INTERRUPTED
    # 0 only when every round completed: a failed or skipped round with no verdict is still trouble.
    incomplete = summary.get("rounds_completed", 0) < summary.get("rounds_total", 0)
    trouble = incomplete or bool(summary.get("rounds_stalled") or summary.get("rounds_failed"))
    return exit_for_sides((v.get("side") for v in summary.get("verdicts", [])), trouble=trouble)
