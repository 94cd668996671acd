"""`repro run`: drive multi-round conversations and report where a stall lives."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from rich.console import Console

from proxies.spec import parse_proxy_fault
from repro.core.errors import UsageError
from repro.core.exits import EXIT_HELP, EXIT_INTERRUPTED, exit_for_sides
from repro.core.hop import Hop, chat_url
from repro.io.stack_file import hops_from
from repro.load.clients import CLIENTS, CONNECTION_POLICIES, TIMEOUT_MODES, check_client_options, parse_connections
from repro.load.conversation import PromptSource, load_prompt_file, tool_definitions
from repro.load.driver import DriverConfig
from repro.session.run import INJECTED_PROXY
from repro.sim.config import parse_sim_fault

# A production target deserves protection from a typo: above these, ask for --allow-flood.
SAFE_CONVERSATIONS = 256
SAFE_TOTAL_ROUNDS = 20_000


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="drive multi-round conversations; judge any stall",
        description="Drive multi-round chat conversations over keep-alive connections and record every event. "
        "With no --target (and no OPENAI_BASE_URL), starts the simulated engine and drives it.",
        epilog=EXIT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--target", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:30000/v1 (default: $OPENAI_BASE_URL, else the embedded simulated engine)")
    p.add_argument("--model", help="model name (default: the target's first model from /v1/models)")
    p.add_argument("--rounds", type=int, default=6, help="rounds per conversation (default 6)")
    p.add_argument("--conversations", type=int, default=4, help="concurrent conversations (default 4)")
    p.add_argument("--think-time", type=float, default=0.0, help="seconds between a reply and the next round")
    p.add_argument("--ramp-up", type=float,
                   help="seconds over which conversations start (default 2 ms per conversation, at most 2 s)")
    p.add_argument("--max-start-rate", type=float, default=3000.0,
                   help="new rounds per second at most, so rounds ending together do not start in one burst "
                        "(default 3000; 0: unpaced)")
    p.add_argument("--max-tokens", type=int, default=32, help="max_tokens per round (default 32)")
    p.add_argument("--prompts", type=Path,
                   help='JSONL file, one conversation per line: {"turns": ["...", ...]} or {"messages": [...]}; a messages '
                        "line with assistant tool_calls and tool results is a recorded agent transcript, replayed one "
                        "round per model call")
    p.add_argument("--prompt-chars", type=int, default=200, help="length of generated user turns (default 200)")
    p.add_argument("--stall-after", type=float, default=10.0, help="the stall trigger: seconds without a byte (default 10)")
    p.add_argument("--connect-timeout", type=float, default=5.0, help="seconds to connect (default 5)")
    p.add_argument("--round-timeout", type=float, default=300.0, help="deadline of one round in seconds, counted from its connection; a wait for a connection (a pool slot) has the same deadline (default 300)")
    p.add_argument("--run-timeout", type=float, default=3600.0, help="deadline of the whole run in seconds (default 3600)")
    p.add_argument("--keepalive-expiry", type=float, default=5.0, help="seconds an idle connection is kept for reuse (default 5, as SGLang and vLLM servers keep theirs)")
    add_driver_shape_flags(p)
    p.add_argument("--on-failure", choices=("continue", "retire"), default="continue",
                   help="after a failed or stalled round, go on with the next round or retire the conversation")
    p.add_argument("--sim-fault", help="arm a fault in the embedded engine, e.g. hang,after=3 (see `repro sim --help`)")
    p.add_argument("--sim-dialect", choices=("sglang", "vllm"), default="sglang", help="metrics dialect of the embedded engine")
    p.add_argument("--inject", metavar="SPEC",
                   help="put a fault proxy in front of the first hop, e.g. wedge-after=3 or hold-response,after=2 "
                        "(see `repro proxy --help`); it becomes hop 'proxy'")
    p.add_argument("--hop", action="append", default=[], metavar="name=N,url=U[,metrics=M][,role=R]",
                   help="a hop of your stack, client side first (repeatable); the first is what the driver talks to")
    p.add_argument("--topology", type=Path, help="TOML file of [[hop]] tables (name, url, metrics_url, role)")
    p.add_argument("--probe-interval", type=float, default=0.5,
                   help="seconds between metric samples of every hop (default 0.5; 0 turns probing off)")
    p.add_argument("--canary-timeout", type=float,
                   help="deadline of one canary request (default: two probe intervals, at least 1 s, so that a "
                        "verdict arrives within the stall trigger plus two probe intervals)")
    p.add_argument("--out", type=Path, help="run folder (default: runs/<timestamp>)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("--allow-flood", action="store_true",
                   help=f"allow more than {SAFE_CONVERSATIONS} conversations or {SAFE_TOTAL_ROUNDS} rounds against a real target")
    p.set_defaults(handler=handle)


def add_driver_shape_flags(p: argparse.ArgumentParser) -> None:
    """The flags that shape how the driver talks to the stack, shared by `run` and `bench`: the
    client library, its connections and timeouts, tool rounds, worker processes."""
    p.add_argument("--tools", type=int, default=0, metavar="N",
                   help="send N tool definitions (OpenAI tools format) with every round; a reply that calls tools gets "
                        "synthetic tool results and the next round continues from them, as an agent loop does (default 0)")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="processes to shard the conversations across, each with its own event loop and run-log segment, "
                        "merged at the end (default 1); for many conversations on a client with cores to spare")
    p.add_argument("--client", choices=CLIENTS, default="aiohttp",
                   help="the HTTP client that streams, with its library's own pool and keep-alive: aiohttp "
                        "(default, the fastest; one keep-alive connection per conversation), httpx, openai (the "
                        "SDK's sync client: a new connection every streamed round), openai-async (reuses one)")
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
    if args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}")
    policy, pool = parse_connections(args.connections)
    if policy == "pool" and pool < args.workers:
        # Each worker is a process with its own pool: the N connections are shared out among them.
        raise UsageError(f"--connections pool={pool} is shared out among --workers {args.workers}, one pool per "
                         f"worker process: give pool={args.workers} or more, or fewer workers")
    tools = tool_definitions(args.tools)  # a ToolCountError names the allowed range
    return {"client": args.client, "connections": args.connections, "client_timeouts": args.client_timeouts}, tools


def _positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    if not math.isfinite(value):  # inf, nan: nothing here is unbounded
        raise UsageError(f"{name} must be a finite number, got {value:g}")
    if value < 0 or (value == 0 and not allow_zero):
        raise UsageError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value:g}")


def settings_from_args(args: argparse.Namespace):
    from repro.session.run import RunSettings

    for name in ("rounds", "conversations", "max_tokens", "stall_after", "connect_timeout", "round_timeout", "run_timeout",
                 "keepalive_expiry", "prompt_chars"):
        _positive("--" + name.replace("_", "-"), getattr(args, name))
    _positive("--think-time", args.think_time, allow_zero=True)
    if args.ramp_up is not None:
        _positive("--ramp-up", args.ramp_up, allow_zero=True)
    _positive("--probe-interval", args.probe_interval, allow_zero=True)
    _positive("--max-start-rate", args.max_start_rate, allow_zero=True)
    shape, tools = driver_shape_from_args(args)
    if args.out is not None and (args.out / "events.jsonl").exists():
        raise UsageError(f"--out {args.out} already holds a run (events.jsonl); give a new folder (nothing is overwritten)")
    if args.canary_timeout is None:
        from repro.session.run import default_canary_timeout

        args.canary_timeout = default_canary_timeout(args.stall_after, args.probe_interval)
    _positive("--canary-timeout", args.canary_timeout)
    hops = hops_from_args(args)
    target = args.target or (hops[0].url if hops else "") or os.environ.get("OPENAI_BASE_URL") or ""
    if target:
        check_target_url(target)
    if target and args.sim_fault:
        raise UsageError("--sim-fault arms the embedded engine, but --target points elsewhere; drop one of them")
    if target and not args.allow_flood and (
        args.conversations > SAFE_CONVERSATIONS or args.conversations * args.rounds > SAFE_TOTAL_ROUNDS
    ):
        raise UsageError(
            f"{args.conversations} conversations x {args.rounds} rounds against {target} exceeds the safety cap "
            f"({SAFE_CONVERSATIONS} conversations, {SAFE_TOTAL_ROUNDS} rounds); add --allow-flood if you mean it"
        )
    if args.sim_fault:
        parse_sim_fault(args.sim_fault)  # a FaultSpecError names the spec and the fix
    if args.inject:
        parse_proxy_fault(args.inject)
        if any(hop.name == INJECTED_PROXY for hop in hops):
            raise UsageError(f"--inject adds a hop named {INJECTED_PROXY!r}, and a --hop already has that name; "
                             "rename that hop")
    prompts = load_prompt_file(args.prompts) if args.prompts else PromptSource(prompt_chars=args.prompt_chars)
    prompts.tools = tools
    model = args.model or ""
    if target and not model:
        model = discover_model(target, api_key=os.environ.get("OPENAI_API_KEY"), timeout=args.connect_timeout)
    driver = DriverConfig(
        base_url=target, model=model, rounds=args.rounds, conversations=args.conversations,
        think_time=args.think_time, ramp_up=args.ramp_up, max_start_rate=args.max_start_rate,
        max_tokens=args.max_tokens, stall_after=args.stall_after,
        connect_timeout=args.connect_timeout, round_timeout=args.round_timeout,
        keepalive_expiry=args.keepalive_expiry, on_failure=args.on_failure,
        api_key=os.environ.get("OPENAI_API_KEY") or None,
        **shape,
    )
    return RunSettings(driver=driver, prompts=prompts, out=args.out, sim_fault=args.sim_fault,
                       sim_dialect=args.sim_dialect, run_timeout=args.run_timeout, hops=hops, inject=args.inject,
                       probe_interval=args.probe_interval, canary_timeout=args.canary_timeout,
                       workers=args.workers)


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


def discover_model(target: str, *, api_key: str | None, timeout: float) -> str:
    """The target's first model from /v1/models; bounded, and a clear error when it is not there."""
    import httpx

    url = chat_url(target).removesuffix("/chat/completions") + "/models"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(url, headers=headers, timeout=timeout, trust_env=False)
        models = response.json().get("data") or []
        return str(models[0]["id"])
    except Exception as exc:  # any failure here has the same fix
        reason = type(exc).__name__ if not isinstance(exc, httpx.HTTPError) else str(exc) or type(exc).__name__
        raise UsageError(f"could not list models at {url} ({reason}); pass --model NAME") from None


def handle(args: argparse.Namespace) -> int:
    from repro.reporting.summary import client_fate_line, summary_table
    from repro.reporting.terminal import tally_line
    from repro.session.run import Run

    settings = settings_from_args(args)
    console = Console(stderr=True)
    result = Run(settings, console=console).execute()
    summary = result.summary
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        console.print(summary_table(summary))
    for entry in summary["verdict_tally"]:
        console.print(tally_line(entry), highlight=False)
    fate = client_fate_line(summary)
    if fate:
        console.print(fate, highlight=False)
    console.print(
        f"[bold]{summary['rounds_completed']}/{summary['rounds_total']} rounds completed[/], "
        f"{summary['rounds_stalled']} stalled, {summary['rounds_failed']} failed, {summary['rounds_skipped']} skipped "
        f"({result.reason}); log: {result.run_dir}/events.jsonl"
    )
    return exit_code(summary)


def exit_code(summary: dict) -> int:
    if summary.get("interrupted"):
        return EXIT_INTERRUPTED
    # 0 only when every round completed: a failed or skipped round with no verdict is still trouble.
    incomplete = summary.get("rounds_completed", 0) < summary.get("rounds_total", 0)
    trouble = incomplete or bool(summary.get("rounds_stalled") or summary.get("rounds_failed"))
    return exit_for_sides((v.get("side") for v in summary.get("verdicts", [])), trouble=trouble)
