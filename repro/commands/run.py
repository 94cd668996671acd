"""`repro run`: drive multi-round conversations and report where a stall lives."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console

from proxies.spec import parse_proxy_fault
from repro.commands.kubernetes_options import add_kubernetes_flags, check_kubernetes_flags, flags_given
from repro.commands.options import (
    SAFE_CONVERSATIONS,
    SAFE_TOTAL_ROUNDS,
    add_driver_shape_flags,
    add_stack_flags,
    add_tls_flags,
    api_key_for,
    check_target_url,
    driver_shape_from_args,
    exit_code,
    hops_from_args,
    model_of_stack,
    note_on_stderr,
    positive,
    trust_from_args,
)
from repro.commands.shard_option import parse_shard
from repro.core.errors import UsageError
from repro.core.exits import EXIT_HELP
from repro.live.evidence_wave import default_canary_timeout
from repro.load.driver import DriverConfig
from repro.load.prompts import PromptSource, load_prompt_file
from repro.load.shards import share_of
from repro.reporting.progress import DEFAULT_PERIOD_S
from repro.session.lifecycle import default_run_dir
from repro.session.run import INJECTED_PROXY
from repro.sim.config import parse_sim_fault


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
    p.add_argument("--sim-fault", help="arm a fault in the embedded engine, e.g. hang,after=3: after=N counts the engine's "
                   "requests across all conversations (--inject wedge-after=N counts each connection's); "
                   "see `repro sim --help`")
    p.add_argument("--sim-dialect", choices=("sglang", "vllm"), default="sglang", help="metrics dialect of the embedded engine")
    p.add_argument("--inject", metavar="SPEC",
                   help="put a fault proxy in front of the first hop, e.g. wedge-after=3 (each connection's 4th request "
                        "on is held) or hold-response,after=2 (after=N counts all requests through the proxy); see "
                        "`repro proxy --help`; it becomes hop 'proxy'")
    add_stack_flags(p, hop_help="a hop of your stack, client side first (repeatable); the first is what the driver "
                                "talks to")
    add_tls_flags(p)
    p.add_argument("--probe-interval", type=float, default=0.5,
                   help="seconds between metric samples of every hop (default 0.5; 0 turns probing off)")
    p.add_argument("--canary-timeout", type=float,
                   help="deadline of one canary request (default: two probe intervals, at least 1 s, so that a "
                        "verdict arrives within the stall trigger plus two probe intervals)")
    p.add_argument("--out", type=Path, help="run folder (default: runs/<timestamp>)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("--progress-every", type=float, default=DEFAULT_PERIOD_S, metavar="SECONDS",
                   help="when stderr is not a terminal, a progress line every SECONDS (default %(default)g; on a "
                        "terminal the line is live, refreshed twice a second; 0: no progress line)")
    p.add_argument("--shard", metavar="K/N",
                   help="drive only the Kth of N slices of the conversations (K from 0; the split --workers "
                        "makes), so N runs drive together what one would; env/N reads K from "
                        "$JOB_COMPLETION_INDEX (an Indexed Job's pod). The run folder is OUT/shard-K. "
                        "`repro report` merges the N folders")
    p.add_argument("--kubernetes-job", type=int, metavar="N",
                   help="print an Indexed Job of N pods (YAML) that runs this command with --shard env/N, each "
                        "pod's folder on a shared volume, and exit (docs/kubernetes.md)")
    p.add_argument("--name", default="repro-run", help="with --kubernetes-job: the Job's name (default %(default)s)")
    add_kubernetes_flags(p)
    p.add_argument("--allow-flood", action="store_true",
                   help=f"allow more than {SAFE_CONVERSATIONS} conversations or {SAFE_TOTAL_ROUNDS} rounds against a real target")
    p.set_defaults(handler=handle, command_parser=p)


def settings_from_args(args: argparse.Namespace):
    from repro.session.run import RunSettings

    for name in ("rounds", "conversations", "max_tokens", "stall_after", "connect_timeout", "round_timeout", "run_timeout",
                 "keepalive_expiry", "prompt_chars"):
        positive("--" + name.replace("_", "-"), getattr(args, name))
    positive("--think-time", args.think_time, allow_zero=True)
    if args.ramp_up is not None:
        positive("--ramp-up", args.ramp_up, allow_zero=True)
    positive("--probe-interval", args.probe_interval, allow_zero=True)
    positive("--max-start-rate", args.max_start_rate, allow_zero=True)
    positive("--progress-every", args.progress_every, allow_zero=True)
    shape, tools = driver_shape_from_args(args)
    shard = parse_shard(args.shard) if args.shard is not None else None
    if shard is not None:
        ids = share_of(tuple(range(args.conversations)), shard.index, shard.count)
        if not ids:
            raise UsageError(f"--shard {shard} has no conversation to drive: --conversations {args.conversations} "
                             f"makes {args.conversations} slices at most; give fewer shards or more conversations")
        shape["conversation_ids"] = ids
        args.out = (args.out or default_run_dir()) / shard.folder
    if args.out is not None and (args.out / "events.jsonl").exists():
        raise UsageError(f"--out {args.out} already holds a run (events.jsonl); give a new folder (nothing is overwritten)")
    if args.canary_timeout is None:
        args.canary_timeout = default_canary_timeout(args.stall_after, args.probe_interval)
    positive("--canary-timeout", args.canary_timeout)
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
    trust = trust_from_args(args)
    model = args.model or ""
    if target and not model:
        # A target that does not answer is no reason not to start: the rounds fail, the canaries
        # say why (engine-unreachable, tls-rejected), and that is the verdict on-call needs.
        model = model_of_stack([target], api_key=os.environ.get("OPENAI_API_KEY"), timeout=args.connect_timeout,
                               note=note_on_stderr)
    driver = DriverConfig(
        base_url=target, model=model, rounds=args.rounds, conversations=args.conversations,
        think_time=args.think_time, ramp_up=args.ramp_up, max_start_rate=args.max_start_rate,
        max_tokens=args.max_tokens, stall_after=args.stall_after,
        connect_timeout=args.connect_timeout, round_timeout=args.round_timeout,
        keepalive_expiry=args.keepalive_expiry, on_failure=args.on_failure,
        api_key=api_key_for(args.api), ca_file=trust.ca_file, insecure=trust.insecure,
        **shape,
    )
    return RunSettings(driver=driver, prompts=prompts, out=args.out, sim_fault=args.sim_fault,
                       sim_dialect=args.sim_dialect, run_timeout=args.run_timeout, hops=hops, inject=args.inject,
                       probe_interval=args.probe_interval, canary_timeout=args.canary_timeout,
                       workers=args.workers, progress_every=args.progress_every,
                       shard=str(shard) if shard is not None else None)


def job_text(args: argparse.Namespace) -> str:
    """What --kubernetes-job N prints: the Indexed Job running this command's flags in N pods."""
    from repro.reporting.kubernetes_job import ShardJob, job_manifests
    from repro.reporting.kubernetes_pod import manifests_yaml

    positive("--kubernetes-job", args.kubernetes_job)
    if args.conversations < args.kubernetes_job:
        raise UsageError(f"--kubernetes-job {args.kubernetes_job} needs at least as many conversations: "
                         f"--conversations {args.conversations} leaves pods with nothing to drive")
    for flag, value in (("--shard", args.shard), ("--out", args.out)):
        if value is not None:
            raise UsageError(f"{flag} is set by the Job itself (each pod's slice and folder); drop it")
    if not (args.target or args.hop or os.environ.get("OPENAI_BASE_URL")):
        raise UsageError("--kubernetes-job drives a stack from the cluster: give --target URL or --hop "
                         "(the embedded simulated engine would only test each pod against itself)")
    if not args.allow_flood and (args.conversations > SAFE_CONVERSATIONS
                                 or args.conversations * args.rounds > SAFE_TOTAL_ROUNDS):
        # Said here, not by N pods each exiting 2: the cap is on the whole run, which they share.
        raise UsageError(f"{args.conversations} conversations x {args.rounds} rounds exceeds the safety cap "
                         f"({SAFE_CONVERSATIONS} conversations, {SAFE_TOTAL_ROUNDS} rounds); add --allow-flood if "
                         "you mean it")
    job = ShardJob(name=args.name, namespace=args.namespace, image=args.image, shards=args.kubernetes_job,
                   claim=args.claim, run_timeout_s=args.run_timeout,
                   args=flags_given(args.command_parser, args, {"--kubernetes-job", "--name", "--image",
                                                                "--namespace", "--claim", "--json"}))
    header = (f"# repro run as an Indexed Job of {job.shards} pods, each driving its slice of the\n"
              "# conversations. Each writes its run folder shard-K to\n"
              f"#   {job.out} on the claim {job.claim_name}\n"
              "# merged by `repro report` (docs/kubernetes.md). Generated by repro.\n")
    return manifests_yaml(job_manifests(job), header=header)


def handle(args: argparse.Namespace) -> int:
    from repro.reporting.summary import client_fate_line, driven_lines, summary_table
    from repro.reporting.terminal import tally_line
    from repro.session.run import Run

    check_kubernetes_flags(args, args.kubernetes_job is not None, "--kubernetes-job")
    if args.name != "repro-run" and args.kubernetes_job is None:
        raise UsageError("--name goes with --kubernetes-job (the Job's name); drop it, or add --kubernetes-job")
    if args.kubernetes_job is not None:
        sys.stdout.write(job_text(args))
        return 0
    settings = settings_from_args(args)
    console = Console(stderr=True)
    result = Run(settings, console=console).execute()
    summary = result.summary
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        console.print(summary_table(summary, width=console.width))
    for entry in summary["verdict_tally"]:
        console.print(tally_line(entry), highlight=False)
    fate = client_fate_line(summary)
    if fate:
        console.print(fate, highlight=False)
    console.print(
        f"[bold]{summary['rounds_completed']}/{summary['rounds_total']} rounds completed[/], "
        f"{summary['rounds_stalled']} stalled, {summary['rounds_failed']} failed, {summary['rounds_skipped']} skipped "
        f"({result.reason})", highlight=False)
    for line in driven_lines(summary):
        console.print(line, markup=False, highlight=False)
    console.print(f"log: {result.run_dir}/events.jsonl", markup=False, highlight=False)
    # The command on a line of its own, to copy whole; report.html is written only when asked.
    console.print("report: report.html (timeline, verdicts, rounds) and rounds.csv, made by:",
                  markup=False, highlight=False)
    console.print(f"  repro report {result.run_dir}", markup=False, highlight=False, soft_wrap=True)
    return exit_code(summary)
