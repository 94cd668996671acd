"""`repro wrap -- CMD ARGS...`: run a real harness under repro and judge its stalls the moment they
happen (the watching and judging: repro/session/wrapped_harness.py; docs/wrap.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from repro.commands.options import (
    add_stack_flags,
    add_tls_flags,
    api_key_for,
    hops_from_args,
    model_of_stack,
    note_on_stderr,
    positive,
    trust_from_args,
)
from repro.core.errors import UsageError
from repro.core.wire_api import parse_apis

EXIT_TEXT = """exit status:
  the harness's own code when it ended with no verdict
  10 / 11 / 12  a stall judged client side / server side / no side (as run)
  124  wrap's --max-time ended the harness (no verdict)
  2    usage error (one line on stderr)
  130  interrupted (SIGINT/SIGTERM, passed to the harness first; attached
       by --pid: the watch ends, the harness runs on)"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "wrap", help="run a real harness and judge its stalls live",
        description="Run an agent harness (opencode, Claude Code, an SDK script) as a child, watch its TCP "
                    "connections to the hops every 0.25 s, record its rounds, and judge each stall (a request "
                    "outstanding, no byte for --stall-after) the moment it happens, as triage does.",
        epilog=EXIT_TEXT, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_stack_flags(p, hop_help="a hop of the stack, client side first (repeatable): the harness's "
                                "connections to these are watched")
    add_tls_flags(p)
    p.add_argument("--stall-after", type=float, default=30.0, metavar="S",
                   help="seconds with a request outstanding and no byte before a stall is judged (default 30)")
    p.add_argument("--inject", metavar="FAULT",
                   help="put repro's fault proxy (a `repro proxy --fault` spec, e.g. wedge-after=2) in front of "
                        "the first hop and point the harness at it: OPENAI_BASE_URL, OPENAI_API_BASE, "
                        "ANTHROPIC_BASE_URL set, {proxy_url} in the command replaced")
    p.add_argument("--config-template", type=Path, metavar="FILE",
                   help="with --inject: a config file the harness reads (opencode.json), with {proxy_url} where "
                        "its base URL goes; rendered into --cwd for the harness's life, the original put back")
    p.add_argument("--cwd", type=Path, help="the harness's working folder (default: this one)")
    p.add_argument("--pid", type=int, metavar="PID",
                   help="attach to a running harness instead of starting one (watched, never signalled)")
    p.add_argument("--api", default="chat", metavar="LIST",
                   help="the wire APIs to canary, the harness's first: chat, responses, messages (default chat)")
    p.add_argument("--model", help="model for the canaries (default: the stack's /v1/models)")
    p.add_argument("--window", type=float, default=2.0, help="seconds each judgement watches the hops (default 2)")
    p.add_argument("--canary-timeout", type=float, default=3.0, help="deadline of one canary (default 3 s)")
    p.add_argument("--max-time", type=float, metavar="S",
                   help="stop the harness after this long (exit 124 with no verdict; default: no bound)")
    p.add_argument("--stop-on-verdict", action="store_true",
                   help="stop the harness once a stall has a verdict (CI: no waiting out its own timeout)")
    p.add_argument("--out", type=Path, help="run folder for the log (default runs/<time>-<pid>)")
    p.add_argument("--json", action="store_true",
                   help="print the result as one JSON line on stdout, last, after the harness's own output")
    p.add_argument("harness_command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="the harness command, after --; {proxy_url} in it is the fault proxy's URL")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from repro.session.wrapped_harness import WrappedHarness

    settings = settings_from(args)
    result = WrappedHarness(settings).run()
    if args.json:
        sys.stdout.flush()
        sys.stdout.write(json.dumps(result.to_dict(), default=str) + "\n")
    return result.exit


def settings_from(args: argparse.Namespace):  # -> WrapSettings
    from repro.session.wrapped_harness import WrapSettings

    given = args.harness_command  # not `command`: the subcommand's name is args.command
    command = given[1:] if given[:1] == ["--"] else given
    for name in ("stall_after", "window", "canary_timeout"):
        positive("--" + name.replace("_", "-"), getattr(args, name))
    if args.max_time is not None:
        positive("--max-time", args.max_time)
    hops = hops_from_args(args)  # a --hop given wrong is named before what is missing
    if args.pid is not None and command:
        raise UsageError("give either --pid PID (a running harness) or a command after --, not both")
    if args.pid is None and not command:
        raise UsageError("no harness command: put it after --, e.g. repro wrap --hop ... -- opencode run ...")
    if args.pid is not None and (args.inject or args.config_template):
        raise UsageError("--inject and --config-template point a harness we start; a running one (--pid) "
                         "keeps the URL it has: drop them, or start the harness under wrap")
    if args.config_template is not None and not args.inject:
        raise UsageError("--config-template is rendered with the fault proxy's URL: give --inject FAULT too")
    if not hops:
        raise UsageError("no hops: give --hop name=engine,url=http://127.0.0.1:30000 (repeatable, client side "
                         "first) or --topology FILE; the harness's connections to them are watched")
    trust_from_args(args)
    if args.inject:
        from proxies.spec import parse_proxy_fault

        try:
            parse_proxy_fault(args.inject)
        except ValueError as exc:
            raise UsageError(f"--inject {args.inject!r}: {exc}") from None
        if any(hop.name == "proxy" for hop in hops):
            raise UsageError("--inject adds a hop named 'proxy', and a --hop already has that name; rename it")
    if args.pid is not None and not Path(f"/proc/{args.pid}").exists():
        raise UsageError(f"--pid {args.pid}: no such process; give the running harness's pid")
    try:
        apis = parse_apis(args.api)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    keys = {api: api_key_for(api) for api in apis}
    ordered = sorted(hops, key=lambda h: h.role != "engine")
    model = args.model or model_of_stack([h.url for h in ordered], api_key=keys[apis[0]],
                                         timeout=args.canary_timeout, note=note_on_stderr)
    return WrapSettings(hops=tuple(hops), argv=tuple(command), attach=args.pid, stall_after=args.stall_after,
                        inject=args.inject, config_template=args.config_template, cwd=args.cwd, apis=apis,
                        api_keys=keys, model=model, bound=args.max_time, stop_on_verdict=args.stop_on_verdict,
                        window=args.window, canary_timeout=args.canary_timeout, out=args.out)
