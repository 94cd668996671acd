"""`repro bench`: a closed-loop concurrency sweep; with --target-b, two deployments interleaved (A/B)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

from rich.console import Console

from repro.commands.options import (
    SAFE_CONVERSATIONS,
    add_driver_shape_flags,
    add_tls_flags,
    api_key_for,
    check_target_url,
    discover_model,
    driver_shape_from_args,
    positive,
    trust_from_args,
)
from repro.core.errors import UsageError
from repro.core.exits import EXIT_HELP, EXIT_INTERRUPTED, exit_for_sides
from repro.live.evidence_wave import default_canary_timeout
from repro.load.driver import DriverConfig
from repro.load.prompts import PromptSource, load_prompt_file
from repro.sim.config import parse_sim_fault

# Below this a level's bootstrap draws so many sub-windows that it runs for minutes.
MIN_BIN_S = 0.1


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="closed-loop concurrency sweep; A/B two deployments and say whether a difference is beyond noise",
        description="At each concurrency level, that many multi-turn conversations run rounds back to back for "
        "--duration seconds after --warmup. With --target-b, A and B run interleaved level by level (A B B A B A A B) "
        "and each level's throughput difference gets a 95% CI and a word: significant, flat within noise, or not "
        "judged (one window a side). "
        "The live judge stays on: a stall during a bench is judged and reported. With no --target, benches the "
        "embedded simulated engine.",
        epilog=EXIT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--target", help="deployment A: OpenAI-compatible base URL (default: $OPENAI_BASE_URL, else the "
                   "embedded simulated engine)")
    p.add_argument("--target-b", help="deployment B: run A and B interleaved and compare them")
    p.add_argument("--model", help="model name (default: each target's first model from /v1/models)")
    p.add_argument("--concurrency", default="8,16,32", help="comma-separated levels, e.g. 48,64,80,96 (default 8,16,32)")
    p.add_argument("--duration", type=float, default=30.0, help="measured seconds per window (default 30)")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds before each window is measured (default 5)")
    p.add_argument("--repeat", type=int, default=4,
                   help="windows per level and deployment (default 4: A B B A B A A B). The drift between windows "
                        "is measured from these: with 1 no level is judged, with 2 or 3 the CI is wide")
    p.add_argument("--bin", type=float, default=1.0, dest="bin_s",
                   help=f"sub-window seconds: the throughput samples the bootstrap draws (default 1, at least {MIN_BIN_S:g})")
    p.add_argument("--grace", type=float,
                   help="seconds the rounds in flight get after a window (default: the stall trigger plus a canary "
                        "timeout plus 2, so a stall at the window's end is still judged)")
    p.add_argument("--max-tokens", type=int, default=128, help="max_tokens per round (default 128)")
    p.add_argument("--rounds-per-conversation", type=int, default=16,
                   help="a conversation ends after this many rounds and a fresh one takes its slot, so prompts stay "
                        "bounded (default 16)")
    p.add_argument("--prompts", type=Path, help='JSONL file, one conversation per line: {"turns": ["...", ...]}')
    p.add_argument("--prompt-chars", type=int, default=200, help="length of generated user turns (default 200)")
    p.add_argument("--stall-after", type=float, default=10.0, help="the stall trigger: seconds without a byte (default 10)")
    p.add_argument("--connect-timeout", type=float, default=5.0, help="seconds to connect (default 5)")
    p.add_argument("--round-timeout", type=float, default=300.0, help="deadline of one round in seconds, counted from its connection; a wait for a connection (a pool slot) has the same deadline (default 300)")
    p.add_argument("--run-timeout", type=float, help="deadline of the whole bench (default: twice the planned time plus 60 s)")
    p.add_argument("--keepalive-expiry", type=float, default=5.0, help="seconds an idle connection is kept (default 5)")
    add_driver_shape_flags(p)
    add_tls_flags(p)
    p.add_argument("--sim-fault", help="arm a fault in the embedded engine, e.g. hang,after=40: after=N counts the engine's "
                   "requests across all conversations (--inject wedge-after=N counts each connection's); "
                   "see `repro sim --help`")
    p.add_argument("--probe-interval", type=float, default=0.5,
                   help="seconds between metric samples of each deployment (default 0.5; 0 turns probing off)")
    p.add_argument("--canary-timeout", type=float, help="deadline of one canary request (default as `repro run`)")
    p.add_argument("--noise-band", type=float, default=1.0, metavar="PCT",
                   help="a difference is significant only when its 95%% CI lies wholly beyond +-PCT %% "
                        "(default 1, as Criterion.rs; 0: when the CI excludes 0)")
    p.add_argument("--out", type=Path, help="bench folder (default: runs/<timestamp>)")
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    p.add_argument("--allow-flood", action="store_true",
                   help=f"allow more than {SAFE_CONVERSATIONS} concurrent conversations against a real target")
    p.set_defaults(handler=handle)


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--concurrency {text!r} is not a list of whole numbers; give e.g. 48,64,80,96") from None
    if not levels or any(level < 1 for level in levels):
        raise UsageError(f"--concurrency {text!r} needs levels of at least 1; give e.g. 48,64,80,96")
    if len(set(levels)) != len(levels):
        raise UsageError(f"--concurrency {text!r} repeats a level; use --repeat for more windows per level")
    return levels


def settings_from_args(args: argparse.Namespace):
    from repro.session.bench import BenchSettings, Deployment
    from repro.sim import SimConfig

    levels = parse_levels(args.concurrency)
    for name in ("duration", "bin_s", "max_tokens", "rounds_per_conversation", "prompt_chars", "stall_after",
                 "connect_timeout", "round_timeout", "keepalive_expiry", "repeat"):
        flag = "--bin" if name == "bin_s" else "--" + name.replace("_", "-")
        positive(flag, getattr(args, name))
    positive("--warmup", args.warmup, allow_zero=True)
    positive("--probe-interval", args.probe_interval, allow_zero=True)
    positive("--noise-band", args.noise_band, allow_zero=True)
    shape, tools = driver_shape_from_args(args)
    for name in ("grace", "run_timeout"):
        if getattr(args, name) is not None:
            positive("--" + name.replace("_", "-"), getattr(args, name), allow_zero=name == "grace")
    if args.bin_s < MIN_BIN_S:
        raise UsageError(f"--bin {args.bin_s:g} is below {MIN_BIN_S:g} s: the bootstrap would draw too many "
                         f"sub-windows; use --bin {MIN_BIN_S:g} or more")
    if args.bin_s * 2 > args.duration:
        raise UsageError(f"--bin {args.bin_s:g} leaves fewer than 2 sub-windows in --duration {args.duration:g}; "
                         "use a shorter --bin or a longer --duration")
    if args.out is not None and (args.out / "events.jsonl").exists():
        raise UsageError(f"--out {args.out} already holds a run (events.jsonl); give a new folder (nothing is overwritten)")
    if args.canary_timeout is None:
        args.canary_timeout = default_canary_timeout(args.stall_after, args.probe_interval)
    positive("--canary-timeout", args.canary_timeout)
    target = args.target or os.environ.get("OPENAI_BASE_URL") or ""
    if args.target_b and not target:
        raise UsageError("--target-b needs --target: an A/B bench compares two deployments you name "
                         "(start a second engine with `repro sim` to try it)")
    api_key = api_key_for(args.api)
    trust = trust_from_args(args)
    deployments = []
    for name, url, flag in (("A", target, "--target"), ("B", args.target_b or "", "--target-b")):
        if name == "B" and not url:
            continue
        if url:
            try:
                check_target_url(url)
            except UsageError as exc:
                raise UsageError(str(exc).replace("--target", flag, 1)) from None
            if not args.allow_flood and max(levels) > SAFE_CONVERSATIONS:
                raise UsageError(f"concurrency {max(levels)} against {url} exceeds the safety cap of "
                                 f"{SAFE_CONVERSATIONS} conversations; add --allow-flood if you mean it")
            model = args.model or discover_model(url, api_key=api_key, timeout=args.connect_timeout)
            deployments.append(Deployment(name, url, model))
        else:
            deployments.append(Deployment(name, "", args.model or "", sim=SimConfig(fault=args.sim_fault)))
    if target and args.sim_fault:
        raise UsageError("--sim-fault arms the embedded engine, but --target points elsewhere; drop one of them")
    if args.sim_fault:
        parse_sim_fault(args.sim_fault)
    prompts = load_prompt_file(args.prompts) if args.prompts else PromptSource(prompt_chars=args.prompt_chars)
    # The file's digest too: the same name may hold other prompts in another run.
    digest = hashlib.sha256(args.prompts.read_bytes()).hexdigest() if args.prompts else None
    prompts.tools = tools
    driver = DriverConfig(
        base_url="", model="", rounds=args.rounds_per_conversation, conversations=1, max_tokens=args.max_tokens,
        stall_after=args.stall_after, connect_timeout=args.connect_timeout, round_timeout=args.round_timeout,
        keepalive_expiry=args.keepalive_expiry, api_key=api_key, ca_file=trust.ca_file, insecure=trust.insecure,
        **shape,
    )
    return BenchSettings(levels=levels, duration=args.duration, warmup=args.warmup, repeat=args.repeat,
                         deployments=deployments, driver=driver, prompts=prompts, bin_s=args.bin_s, grace=args.grace,
                         out=args.out, probe_interval=args.probe_interval, canary_timeout=args.canary_timeout,
                         run_timeout=args.run_timeout, noise_pct=args.noise_band, workers=args.workers,
                         prompts_file=str(args.prompts) if args.prompts else None, prompts_sha256=digest)


def handle(args: argparse.Namespace) -> int:
    from repro.reporting.bench_html import comparison_table, deployment_lines, level_table
    from repro.reporting.bench_results import warnings_of
    from repro.reporting.terminal import tally_line
    from repro.session.bench import Bench

    settings = settings_from_args(args)
    console = Console(stderr=True)
    result = Bench(settings, console=console).execute()
    data = result.data
    if args.json:
        sys.stdout.write(json.dumps(public_json(data), indent=2) + "\n")
    console.print(level_table(data["per_level"]))
    if data["levels"]:
        console.print(comparison_table(data["levels"]))
    for line in warnings_of(data):
        console.print(f"[yellow]warning:[/] {line}", highlight=False)
    for line in deployment_lines(data["deployments"]):
        console.print(line, highlight=False, markup=False)
    for entry in data["verdict_tally"]:
        console.print(tally_line(entry), highlight=False)
    summary = data["summary"]
    invalid = summary.get("windows_invalid") or 0
    console.print(f"[bold]{len(data['windows'])} windows[/]{f' ({invalid} invalid)' if invalid else ''}, "
                  f"{summary['rounds_completed']} rounds completed, "
                  f"{summary['rounds_stalled']} stalled, {summary['rounds_failed']} failed ({result.reason}); "
                  f"results: {result.run_dir}/bench.json, {result.run_dir}/bench.html")
    return exit_code(data)


def public_json(data: dict) -> dict:
    """What --json prints: the comparison rows, per-level figures, warnings and verdicts (bench.json has the windows too)."""
    from repro.reporting.bench_results import warnings_of

    return {"levels": data["levels"], "per_level": data["per_level"], "warnings": warnings_of(data),
            "verdicts": data["verdicts"], "summary": data["summary"], "deployments": data["deployments"],
            "settings": data["settings"]}


def exit_code(data: dict) -> int:
    summary = data["summary"]
    if summary.get("interrupted"):
        return EXIT_INTERRUPTED
    trouble = (bool(summary.get("rounds_stalled") or summary.get("rounds_failed") or summary.get("windows_invalid"))
               or summary.get("reason") != "completed")
    return exit_for_sides((v.get("side") for v in data.get("verdicts", [])), trouble=trouble)
