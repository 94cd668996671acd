"""`repro audit`: measure, on a healthy stack, what will make a long conversation hang or fail
later: keep-alive idle timeouts along the chain (and the client's pool), body limits and the
engine's context, projected onto the conversation's growth. Bounded load, printed before it starts."""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
from pathlib import Path
from urllib.parse import urlsplit

from rich.console import Console

from repro.commands.options import (
    add_stack_flags,
    add_tls_flags,
    api_key_for,
    hops_from_args,
    model_of_stack,
    positive,
    trust_from_args,
)
from repro.core.audit_measurements import CLIENT_POOL_IDLE_S
from repro.core.errors import UsageError
from repro.core.exits import exit_for_sides
from repro.core.hop import Hop
from repro.core.wire_api import APIS
from repro.reporting.audit_report import audit_report, load_lines, wrapped
from repro.session.audit_growth import DEFAULT_GROWTH, growth_from
from repro.session.stack_audit import CANCEL_EVENTS, REQUEST_TIMEOUT_S, AuditSettings, audit_stack, planned_load

EXIT_TABLE = """exit status:
  0    no finding
  11   a finding judged server-side (wins over client-side)
  10   a finding judged client-side
  12   a finding with no side, or a hop that could not be measured
  2    usage error (one line on stderr)
  1    the tool itself failed
  130  interrupted"""
EXIT_TEXT = EXIT_TABLE + """

A finding is measured, and says what to change, on which hop, to what value (its next action: "next"
and "confirm" printed, next_action in --json). A mismatch resting on an assumed value (a hop's
upstream pool nobody read, taken as the client's) that the race probe did not reproduce is a note
to check (`notes` in --json, "to check" printed): it names the setting to read and never sets the
exit status."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "audit", help="measure keep-alive timeouts and body/context limits along the stack, before a hang",
        description="On a healthy stack, measure each hop's keep-alive idle timeout (compared along the chain and "
                    "with the client's pool), the largest request body it accepts and the engine's context length, "
                    "and say which of them a long conversation will meet. Bounded load (max_tokens=1 requests), "
                    "printed before it starts.",
        epilog=EXIT_TEXT,
    )
    add_stack_flags(p, hop_help="a hop of the stack, client side first (repeatable)")
    add_tls_flags(p)
    p.add_argument("--model", help="model for the requests (default: the engines' /v1/models)")
    p.add_argument("--api", choices=APIS, default="chat",
                   help="the wire API every measuring request speaks, as the harness does: chat "
                        "(/v1/chat/completions, default), responses (/v1/responses), messages (/v1/messages, "
                        "Anthropic's; the key from ANTHROPIC_API_KEY, sent as x-api-key)")
    p.add_argument("--client", choices=sorted(CLIENT_POOL_IDLE_S), default="aiohttp",
                   help="the client whose pool idle time the first hop's keep-alive is compared with "
                        "(aiohttp 15 s, httpx and the openai SDK 5 s)")
    p.add_argument("--client-idle", type=float, metavar="SECONDS",
                   help="your client's own pool idle time, if not its library's default")
    p.add_argument("--upstream-keepalive", action="append", default=[], metavar="HOP=SECONDS",
                   help="how long HOP keeps idle connections to the hop behind it, when known from its config (e.g. "
                        "nginx=60 for nginx's upstream keepalive_timeout default; smg=50); else the client's is assumed")
    p.add_argument("--keepalive-limit", type=float, default=75.0,
                   help="seconds to hold an idle connection waiting for the hop to close it (default 75)")
    p.add_argument("--request-timeout", type=float, default=REQUEST_TIMEOUT_S, metavar="SECONDS",
                   help="each request's deadline, its connect included; each hop's body search and context probe "
                        f"get this much together; the audit's time bound is built from it (default {REQUEST_TIMEOUT_S:g})")
    p.add_argument("--body-cap", type=int, default=4 * 1048576, metavar="BYTES",
                   help="largest request body tried (default 4 MiB)")
    p.add_argument("--body-step", type=int, default=4096, metavar="BYTES",
                   help="the body search's resolution (default 4 KiB)")
    p.add_argument("--growth-per-round", type=int, metavar="BYTES",
                   help=f"how much a conversation's request grows a round (default {DEFAULT_GROWTH}: repro run's "
                        "defaults, 200-character turns and 32-token replies)")
    p.add_argument("--run", type=Path, metavar="RUN_DIR", help="take the growth per round from a recorded run")
    p.add_argument("--prompts", type=Path, metavar="FILE",
                   help="take the growth per round from a prompts file, the JSONL `repro run --prompts` takes")
    p.add_argument("--horizon", type=int, default=200, help="rounds ahead a limit is a finding (default 200)")
    p.add_argument("--no-race", action="store_true", help="do not run the race probe on a suspected mismatch")
    p.add_argument("--cancel-deadline", type=float, default=10.0, metavar="SECONDS",
                   help="a hop still counting a cancelled stream this long after the close is a cancel leak "
                        "(default 10)")
    p.add_argument("--cancel-max-tokens", type=int, default=256,
                   help="max_tokens of the stream that is cancelled: enough to still be decoding when it is "
                        "(default 256)")
    p.add_argument("--no-cancel", action="store_true", help="do not measure cancel propagation")
    p.add_argument("--ttft-budget", type=float, default=60.0, metavar="SECONDS",
                   help="the time to first token a long context may take: a hop cutting a silent stream sooner is "
                        "a finding; measured when the engine is repro's simulated engine (default 60)")
    p.add_argument("--no-idle-stream", action="store_true", help="do not measure idle-stream cuts")
    p.add_argument("--yes", action="store_true", help="audit hops that are not on this machine")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.set_defaults(handler=handle)


def note_fitted(line: str) -> None:
    """options.note_on_stderr's note, wrapped to 80 columns as everything the audit prints."""
    print("\n".join(wrapped(f"note: {line}", 80)), file=sys.stderr, flush=True)


def on_this_machine(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def upstream_settings(flags: list[str], hops: list[Hop]) -> dict[str, float]:
    names = {hop.name for hop in hops}
    found = {}
    for flag in flags:
        name, eq, seconds = flag.partition("=")
        try:
            value = float(seconds)
        except ValueError:
            value = -1.0
        if not eq or value <= 0 or value != value or value == float("inf"):
            raise UsageError(f"--upstream-keepalive {flag!r}: give HOP=SECONDS, e.g. --upstream-keepalive nginx=60")
        if name not in names:
            raise UsageError(f"--upstream-keepalive {flag!r}: no hop named {name!r}; the hops are {', '.join(sorted(names))}")
        found[name] = value
    return found


def handle(args: argparse.Namespace) -> int:
    for flag in ("--keepalive-limit", "--cancel-deadline", "--ttft-budget", "--request-timeout"):
        positive(flag, getattr(args, flag[2:].replace("-", "_")))
    if args.cancel_max_tokens < CANCEL_EVENTS + 2:
        raise UsageError(f"--cancel-max-tokens must be at least {CANCEL_EVENTS + 2} (the stream reads "
                         f"{CANCEL_EVENTS} events before it closes), got {args.cancel_max_tokens}")
    if args.client_idle is not None:
        positive("--client-idle", args.client_idle)
    if args.body_cap < 1024 or args.body_step < 1 or args.body_step >= args.body_cap:
        raise UsageError(f"--body-cap {args.body_cap} and --body-step {args.body_step}: give a cap of at least 1024 "
                         "and a step below it, e.g. --body-cap 4194304 --body-step 4096")
    given = [flag for flag, value in (("--growth-per-round", args.growth_per_round), ("--run", args.run),
                                      ("--prompts", args.prompts)) if value is not None]
    if len(given) > 1:
        raise UsageError(f"{given[0]} and {given[1]} both say how a conversation grows: give one of them")
    if args.horizon < 1:
        raise UsageError(f"--horizon must be at least 1 round, got {args.horizon}")
    hops = hops_from_args(args)
    if not hops:
        raise UsageError("no hops to audit: give --hop name=engine,url=http://127.0.0.1:30000,role=engine "
                         "(repeatable, client side first) or --topology FILE")
    remote = [hop.name for hop in hops if not on_this_machine(hop.url)]
    if remote and not args.yes:
        raise UsageError(f"hop {remote[0]} is not on this machine: audit sends it up to the load printed; add --yes")
    upstream = upstream_settings(args.upstream_keepalive, hops)
    trust_from_args(args)
    api_key = api_key_for(args.api)
    model = args.model or model_of_stack([h.url for h in sorted(hops, key=lambda h: h.role != "engine")],
                                         api_key=api_key, timeout=args.request_timeout, note=note_fitted)
    growth = growth_from(model, per_round=args.growth_per_round, run=args.run, prompts=args.prompts)
    settings = AuditSettings(
        model=model, api_key=api_key, client=args.client,
        client_idle_s=args.client_idle if args.client_idle is not None else CLIENT_POOL_IDLE_S[args.client],
        upstream=upstream, keepalive_limit=args.keepalive_limit, request_timeout=args.request_timeout,
        body_cap=args.body_cap, body_step=args.body_step, horizon=args.horizon, no_race=args.no_race,
        cancel_deadline=args.cancel_deadline, cancel_max_tokens=args.cancel_max_tokens, no_cancel=args.no_cancel,
        ttft_budget=args.ttft_budget, no_idle_stream=args.no_idle_stream, api=args.api)

    load = planned_load(hops, settings)
    print("\n".join(load_lines(len(hops), load.requests, load.detail, load.upload, load.time.text())),
          file=sys.stderr, flush=True)
    outcome = audit_stack(hops, settings, growth)
    if args.json:
        sys.stdout.write(json.dumps(outcome.to_dict(settings, growth, load), indent=2) + "\n")
    else:
        console = Console(highlight=False)
        console.print(audit_report(outcome.audits, outcome.findings, outcome.costs, growth, args.horizon,
                                   width=min(console.width, 120), notes=outcome.notes,
                                   unmeasured=outcome.unmeasured, not_measurable=outcome.not_measurable))
    # A hop that could not be measured is no clean bill: exit 12 (trouble with no side), not 0. The
    # notes (assumed values) never count.
    return exit_for_sides([f.side for f in outcome.findings], trouble=bool(outcome.unmeasured))


