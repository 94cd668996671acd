"""`repro audit`: measure, on a healthy stack, what will make a long conversation hang or fail
later: keep-alive idle timeouts along the chain (and the client's pool), body limits and the
engine's context, projected onto the conversation's growth. Bounded load, printed before it starts."""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import anyio
from rich.console import Console, Group
from rich.markup import escape
from rich.padding import Padding

from repro.commands.options import (
    add_stack_flags,
    add_tls_flags,
    hops_from_args,
    model_of_stack,
    note_on_stderr,
    positive,
    trust_from_args,
)
from repro.core.audit import (
    CHARS_PER_TOKEN,
    CLIENT_POOL_IDLE_S,
    CancelRun,
    Finding,
    Growth,
    HopAudit,
    IdleStreamRun,
    RaceOutcome,
    TimeBound,
    audit_findings,
    cancel_findings,
    idle_stream_findings,
    kib,
)
from repro.core.errors import UsageError
from repro.core.exits import exit_for_sides
from repro.core.hop import Hop
from repro.reporting.fit import Col, fitted_table

# The defaults of `repro run`: 200-character user turns and 32-token replies (about 4 characters a
# token), plus the JSON of two messages ({"role": "user", "content": ""}, ...): a round adds about this.
RUN_PROMPT_CHARS, RUN_MAX_TOKENS, MESSAGE_JSON_BYTES = 200, 32, 40
DEFAULT_GROWTH = RUN_PROMPT_CHARS + RUN_MAX_TOKENS * 4 + 2 * MESSAGE_JSON_BYTES
RACE_PAIRS = 8
REQUEST_TIMEOUT_S = 10.0
CLIENT_RACE_PAST_S = 0.05
CANCEL_EVENTS = 3  # SSE events read before the cancelled stream's connection is closed
CANCEL_POLL_S = 0.25  # how often the gauges are read after the close: the release time's resolution

EXIT_TEXT = """exit status:
  0    no finding
  11   a finding judged server-side (wins over client-side)
  10   a finding judged client-side
  12   a finding with no side, or a hop that could not be measured
  2    usage error (one line on stderr)
  1    the tool itself failed
  130  interrupted"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "audit", help="measure keep-alive timeouts and body/context limits along the stack, before a hang",
        description="On a healthy stack, measure each hop's keep-alive idle timeout (compared along the chain and "
                    "with the client's pool), the largest request body it accepts and the engine's context length, "
                    "and say which of them a long conversation will meet. Bounded load (max_tokens=1 requests), "
                    "printed before it starts.",
        epilog=EXIT_TEXT, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_stack_flags(p, hop_help="a hop of the stack, client side first (repeatable)")
    add_tls_flags(p)
    p.add_argument("--model", help="model for the chat requests (default: the engines' /v1/models)")
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


def growth_from(args: argparse.Namespace, model: str) -> Growth:
    from probes.audit import chat_body

    first = len(chat_body(model, RUN_PROMPT_CHARS + MESSAGE_JSON_BYTES))
    if args.growth_per_round is not None:
        if args.growth_per_round <= 0:
            raise UsageError(f"--growth-per-round must be > 0, got {args.growth_per_round}")
        return Growth(first, args.growth_per_round, f"--growth-per-round {args.growth_per_round}")
    if args.run is not None:
        return growth_of_run(args.run, first)
    if args.prompts is not None:
        return growth_of_prompts(args.prompts, model)
    return Growth(first, DEFAULT_GROWTH, f"repro run's defaults: {RUN_PROMPT_CHARS}-character turns, "
                                         f"{RUN_MAX_TOKENS}-token replies")


def growth_of_prompts(path: Path, model: str) -> Growth:
    """How the fastest-growing conversation of a prompts file (`repro run --prompts`) grows: user turns
    with repro run's default replies between them, or a recorded transcript's own model calls."""
    from probes.audit import chat_body
    from repro.load.prompts import Transcript, load_prompt_file

    source = load_prompt_file(path)
    reply = RUN_MAX_TOKENS * CHARS_PER_TOKEN + MESSAGE_JSON_BYTES
    grown: list[tuple[float, int]] = []  # (bytes a round, first request's bytes), per conversation
    for conv in source.conversations:
        if isinstance(conv, Transcript):
            if len(conv.calls) < 2:
                continue
            # Each model call sends the history so far: its characters and each message's JSON.
            sizes = [conv.chars_before[cut] + cut * MESSAGE_JSON_BYTES for cut in conv.calls]
            tools = len(json.dumps(list(conv.tools))) if conv.tools else 0
            grown.append(((sizes[-1] - sizes[0]) / (len(sizes) - 1), len(chat_body(model, sizes[0])) + tools))
        else:
            per_round = sum(len(turn) for turn in conv) / len(conv) + MESSAGE_JSON_BYTES + reply
            grown.append((per_round, len(chat_body(model, len(conv[0]) + MESSAGE_JSON_BYTES))))
    if not grown:
        raise UsageError(f"--prompts {path}: no conversation with two model calls; give --growth-per-round BYTES")
    per_round, first = max(grown)
    return Growth(first, max(1, round(per_round)),
                  f"--prompts {path.name}: the fastest-growing of {len(grown)} conversation(s), "
                  f"replies of {RUN_MAX_TOKENS} tokens between user turns")


def growth_of_run(run_dir: Path, first: int) -> Growth:
    """The mean growth of a round's prompt, in characters, over the recorded run's conversations."""
    from repro.core import events as ev
    from repro.io.runlog import read_run_log

    log = read_run_log(run_dir / "events.jsonl" if run_dir.is_dir() else run_dir)
    by_conv: dict[int, list[tuple[int, int]]] = {}
    for event in log.events:
        if isinstance(event, ev.RoundStarted):
            by_conv.setdefault(event.conv, []).append((event.round, event.prompt_chars))
    steps = []
    for rounds in by_conv.values():
        rounds.sort()
        if len(rounds) > 1:
            steps.append((rounds[-1][1] - rounds[0][1]) / (rounds[-1][0] - rounds[0][0]))
    if not steps:
        raise UsageError(f"--run {run_dir}: no conversation with two rounds started; give --growth-per-round BYTES")
    per_round = max(1, round(sum(steps) / len(steps)))
    return Growth(first, per_round, f"run {run_dir.name}: {len(steps)} conversation(s), mean prompt growth")


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
    api_key = os.environ.get("OPENAI_API_KEY")
    model = args.model or model_of_stack([h.url for h in sorted(hops, key=lambda h: h.role != "engine")],
                                         api_key=api_key, timeout=args.request_timeout, note=note_on_stderr)
    growth = growth_from(args, model)
    client_idle = args.client_idle if args.client_idle is not None else CLIENT_POOL_IDLE_S[args.client]

    load = planned_load(hops, args)
    print(f"audit load: {len(hops)} hop(s); at most {load.requests} requests ({load.detail}), at most "
          f"{kib(load.upload)} uploaded; {load.time.text()}", file=sys.stderr, flush=True)

    audits, costs, cancels, idles, notes = anyio.run(lambda: measure(hops, model, args, upstream, api_key))
    findings = audit_findings(audits, client=args.client, client_idle_s=client_idle, growth=growth,
                              horizon=args.horizon)
    races_run = {} if args.no_race else anyio.run(lambda: run_races(hops, audits, findings, model, api_key, costs,
                                                                     args.request_timeout))
    findings = audit_findings(audits, client=args.client, client_idle_s=client_idle, growth=growth,
                              horizon=args.horizon, races=races_run)
    findings += cancel_findings(cancels) + idle_stream_findings(idles, args.ttft_budget)
    failed, not_measurable = unmeasured_of(audits, cancels, idles, notes)
    if args.json:
        sys.stdout.write(json.dumps({"hops": [a.to_dict() for a in audits], "unmeasured": failed,
                                     "not_measurable": not_measurable,
                                     "client": args.client,
                                     "client_idle_s": client_idle,
                                     "growth": {"first_bytes": growth.first_bytes,
                                                "per_round_bytes": growth.per_round_bytes, "how": growth.how},
                                     "horizon": args.horizon, "ttft_budget_s": args.ttft_budget,
                                     "time_bound_s": load.time.seconds,
                                     "cancel_runs": [r.to_dict() for r in cancels],
                                     "idle_stream_runs": [r.to_dict() for r in idles], "costs": costs,
                                     "findings": [f.to_dict() for f in findings]}, indent=2) + "\n")
    else:
        console = Console(highlight=False)
        console.print(audit_report(audits, findings, costs, growth, args.horizon, width=min(console.width, 120)))
        for line in failed:
            console.print(f"[bold yellow]not measured:[/] {escape(line)}")
        for line in not_measurable:
            console.print(f"[yellow]not measurable here:[/] {escape(line)}")
    # A hop that could not be measured is no clean bill: exit 12 (trouble with no side), not 0.
    return exit_for_sides([f.side for f in findings], trouble=bool(failed))


@dataclass(frozen=True)
class Load:
    requests: int
    detail: str
    upload: int
    time: TimeBound


def planned_load(hops: list[Hop], args: argparse.Namespace) -> Load:
    """The most the audit sends and how long it can take (printed before it starts), from the
    deadlines of what will run (measure, run_races): each exchange, its connect included, within
    --request-timeout; each hop's body search and context probe within one --request-timeout."""
    from probes.audit import (
        CONTEXT_PROBE_MAX,
        CONTEXT_PROBE_TOKENS,
        IDLE_MARGIN_S,
        RACE_SPREAD_S,
        SCRAPE_TIMEOUT_S,
        body_probe_count,
    )

    n, timeout = len(hops), args.request_timeout
    bodies = n * body_probe_count(args.body_cap, args.body_step)
    engines = sum(hop.role == "engine" for hop in hops)
    context = engines * (3 + CONTEXT_PROBE_MAX)
    races = 0 if args.no_race else n * RACE_PAIRS * 2
    # Each cancel run: the stream, and every hop behind its entry read before, during, then every poll.
    polls = int(args.cancel_deadline / CANCEL_POLL_S) + 3
    cancels = 0 if args.no_cancel else sum(1 + (n - i) * polls for i in range(n))
    idles = 0 if args.no_idle_stream else n + engines
    keepalive = n
    detail = (f"{keepalive} keep-alive, {bodies} body search, {context} context, {cancels} cancel "
              f"(1 stream of max_tokens={args.cancel_max_tokens} per hop, the rest metrics reads), {idles} "
              f"idle-stream, {races} race; chats are max_tokens=1 unless said")
    steps = [("body and context", n * timeout)]
    if not args.no_cancel:
        # a run: the gauges read (at once) before, the stream under way, read while it streams, then
        # polled until the deadline, the last read started before it
        steps.append(("cancel", n * (3 * SCRAPE_TIMEOUT_S + timeout + args.cancel_deadline)))
    if not args.no_idle_stream:
        # at once; whether the engine is the simulated one was asked alongside the keep-alive waits
        steps.append(("idle streams", args.ttft_budget + IDLE_MARGIN_S))
    # a pair: the first exchange, the gap (a measured keep-alive timeout, at most the limit, and the
    # client's margin and spread on it), the second exchange
    race_s = 0.0 if args.no_race else (2 * timeout + args.keepalive_limit + CLIENT_RACE_PAST_S
                                        + (RACE_PAIRS - 1) / 2 * RACE_SPREAD_S)
    time_bound = TimeBound(args.keepalive_limit + timeout, tuple(steps), round(race_s, 2))
    return Load(keepalive + bodies + context + cancels + idles + races, detail, n * args.body_cap * 2
                + engines * int(CHARS_PER_TOKEN) * sum(CONTEXT_PROBE_TOKENS), time_bound)


def unmeasured_of(audits: list[HopAudit], cancels: list[CancelRun], idles: list[IdleStreamRun],
                  notes: list[str]) -> tuple[list[str], list[str]]:
    """Each measurement not taken, as "hop: what: why": those that failed (no answer, no connection, a
    gauge that did not count the stream: exit 12), and those this stack cannot give (a hop with no
    metrics page, an engine that cannot hold a first token back: listed, the exit unchanged)."""
    failed = [f"{a.name}: {what}: {how.removeprefix('not measured: ')}" for a in audits
              for what, how in (("keep-alive", a.keepalive_how), ("body limit", a.body_how))
              if how.startswith("not measured")]
    cannot = list(notes)
    for run in cancels:
        if run.why:
            failed.append(f"{run.entry}: cancel: {run.why}")
        for release in run.releases:
            if not release.measured:
                line = f"{release.hop}: cancel (stream sent to {run.entry}): {release.why}"
                (cannot if not_measurable(release.why) else failed).append(line)
    for idle in idles:
        if idle.why:
            failed.append(f"{idle.entry}: idle stream: {idle.why}")
    return failed, cannot


def not_measurable(why: str) -> bool:
    """A gauge this stack does not give (no metrics page, a page without it; probes.audit.gauge_of's
    words), as opposed to one that failed: listed, the exit unchanged."""
    return why.startswith("no metrics page") or "metrics page has no" in why


async def measure(hops: list[Hop], model: str, args: argparse.Namespace, upstream: dict[str, float],
                  api_key: str | None) -> tuple[list[HopAudit], dict, list[CancelRun], list[IdleStreamRun], list[str]]:
    """Every hop's keep-alive wait in parallel (it dominates); alongside, one thing at a time so that
    none perturbs another's gauges: the body searches and the engines' context, the cancel runs, then
    the idle-stream runs (in parallel with each other)."""
    from probes.audit import (
        BodyLimit,
        Context,
        is_simulated_engine,
        measure_body_limit,
        measure_context,
        measure_keepalive,
    )
    from repro.io.tls import client_context

    tls = client_context()
    timeout = args.request_timeout
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    keepalives, bodies, contexts, costs = {}, {}, {}, {}
    cancels: list[CancelRun] = []
    idles: list[IdleStreamRun] = []
    notes: list[str] = []
    clock = anyio.current_time

    def spent(hop: str, what: str, start: float, requests: int) -> None:
        costs.setdefault(hop, {})[what] = {"seconds": round(clock() - start, 2), "requests": requests}

    async def keepalive(hop: Hop) -> None:
        start = clock()
        keepalives[hop.name] = await measure_keepalive(hop.url, limit=args.keepalive_limit, headers=headers,
                                                       timeout=timeout, tls=tls)
        spent(hop.name, "keepalive", start, keepalives[hop.name].requests)

    async def one_at_a_time() -> None:
        for hop in hops:
            # The hop's body search and context probe share one --request-timeout: the time bound's share.
            with anyio.move_on_after(timeout):
                start = clock()
                bodies[hop.name] = await measure_body_limit(hop.url, model, cap=args.body_cap, step=args.body_step,
                                                            headers=headers, timeout=timeout, tls=tls)
                spent(hop.name, "body", start, bodies[hop.name].requests)
                if hop.role == "engine":
                    start = clock()
                    contexts[hop.name] = await measure_context(hop.url, model, headers=headers, timeout=timeout,
                                                               tls=tls)
                    spent(hop.name, "context", start, contexts[hop.name].requests)
            unfinished = f"not measured: unfinished when its {timeout:g} s (--request-timeout) ran out"
            bodies.setdefault(hop.name, BodyLimit(None, unfinished, 0))
            if hop.role == "engine":
                contexts.setdefault(hop.name, Context(None, unfinished, 0))
        if not args.no_cancel:
            await cancel_runs(hops, model, args, headers, tls, cancels, spent)
        if not args.no_idle_stream:
            await simulated.wait()
            await idle_stream_runs(hops, model, args, headers, tls, idles, notes, spent, is_sim[0])

    # Whether the engine is repro's simulated engine (the idle streams need it), asked alongside the
    # keep-alive waits: one exchange, within their time.
    simulated, is_sim = anyio.Event(), [False]

    async def ask_simulated() -> None:
        if not args.no_idle_stream and hops[-1].role == "engine":
            is_sim[0] = await is_simulated_engine(hops[-1].url, headers=headers, timeout=timeout, tls=tls)
        simulated.set()

    async with anyio.create_task_group() as tg:
        for hop in hops:
            tg.start_soon(keepalive, hop)
        tg.start_soon(ask_simulated)
        tg.start_soon(one_at_a_time)
    first_run = {r.hop: r for r in cancels[0].releases} if cancels and not cancels[0].why else {}
    idle_of = {run.entry: run for run in idles}
    audits = []
    for hop in hops:
        ka, body, ctx = keepalives[hop.name], bodies[hop.name], contexts.get(hop.name)
        release, idle = first_run.get(hop.name), idle_of.get(hop.name)
        audits.append(HopAudit(
            name=hop.name, role=hop.role, keepalive_timeout_s=ka.timeout_s, keepalive_limit_s=args.keepalive_limit,
            keepalive_how=ka.how, max_body_bytes=body.max_bytes, body_cap_bytes=args.body_cap,
            body_step_bytes=args.body_step, body_how=body.how, body_refuses_all=body.refuses_all,
            context_tokens=ctx.tokens if ctx else None, context_how=ctx.how if ctx else "not an engine",
            upstream_keepalive_s=upstream.get(hop.name),
            upstream_how="--upstream-keepalive" if hop.name in upstream else "",
            cancel_release_s=release.released_s if release else None,
            cancel_how=(f"stream sent to {cancels[0].entry}: " + release.text(args.cancel_deadline) if release
                        else "not measured" if args.no_cancel or not cancels else f"not measured: {cancels[0].why}"),
            idle_stream_cut_s=idle.cut_s if idle else None,
            idle_stream_how=idle_text(idle) if idle else "not measured"))
    return audits, costs, cancels, idles, notes


def idle_text(run: IdleStreamRun) -> str:
    if run.why:
        return f"not measured: {run.why}"
    if run.cut_s is not None:
        return f"first token held back {run.delay_s:g} s: cut after {run.cut_s:.1f} s ({run.how})"
    return f"first token held back {run.delay_s:g} s: not cut, its first event came after {run.first_token_s:.1f} s"


async def cancel_runs(hops: list[Hop], model: str, args: argparse.Namespace, headers: dict[str, str], tls,
                      runs: list[CancelRun], spent) -> None:
    """A stream cancelled at each hop in turn, client side first, each watched on its hop and every
    hop behind it; one at a time, so that each reads only its own stream in the gauges."""
    from probes.audit import measure_cancel

    for i, entry in enumerate(hops):
        start = anyio.current_time()
        cost = await measure_cancel(entry, hops[i:], model, max_tokens=args.cancel_max_tokens, events=CANCEL_EVENTS,
                                    deadline=args.cancel_deadline, poll=CANCEL_POLL_S, headers=headers,
                                    timeout=args.request_timeout, tls=tls)
        runs.append(cost.run)
        spent(entry.name, "cancel", start, cost.requests)


async def idle_stream_runs(hops: list[Hop], model: str, args: argparse.Namespace, headers: dict[str, str], tls,
                           runs: list[IdleStreamRun], notes: list[str], spent, simulated: bool) -> None:
    """When the engine is repro's simulated engine, a stream whose first token it holds back
    --ttft-budget seconds sent to each hop at once; else not measurable (said in `notes`)."""
    from probes.audit import measure_idle_stream

    engine = hops[-1]
    if engine.role != "engine":
        notes.append("idle stream: no engine hop given last: the first token can only be held back by repro's "
                     "simulated engine, put behind the same hop configuration")
        return
    if not simulated:
        notes.append(f"idle stream: {engine.name} is not repro's simulated engine, which alone can hold a first "
                     "token back on request: run the same hop configuration in front of `repro sim` to measure it")
        return
    found: dict[str, IdleStreamRun] = {}

    async def one(hop: Hop) -> None:
        start = anyio.current_time()
        found[hop.name] = await measure_idle_stream(hop, model, delay=args.ttft_budget, headers=headers,
                                                    timeout=args.request_timeout, tls=tls)
        spent(hop.name, "idle stream", start, 1)

    async with anyio.create_task_group() as tg:
        for hop in hops:
            tg.start_soon(one, hop)
    runs += [found[hop.name] for hop in hops]


async def run_races(hops: list[Hop], audits: list[HopAudit], findings: list[Finding], model: str,
                    api_key: str | None, costs: dict, timeout: float) -> dict[tuple[str, str], RaceOutcome]:
    """A race probe for each suspected mismatch, in parallel: pairs sent to the side that reuses
    (the first hop for the client's pool), the gap the closing hop's measured timeout."""
    from probes.audit import race_probe
    from repro.io.tls import client_context

    tls = client_context()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    by_name = {hop.name: hop for hop in hops}
    timeouts = {a.name: a.keepalive_timeout_s for a in audits}
    outcomes: dict[tuple[str, str], RaceOutcome] = {}

    async def one(key: tuple[str, str]) -> None:
        front, behind = key
        target = hops[0] if front == "client" else by_name[front]
        gap = timeouts[behind]
        assert gap is not None
        if front == "client":
            # The client's own connection: any reuse past the hop's close fails, so the pairs go just
            # past it, clear of the jitter in when we saw the answer end (it shortens the timeout measured).
            gap += CLIENT_RACE_PAST_S
        start = anyio.current_time()
        race = await race_probe(target.url, model, gap_s=gap, pairs=RACE_PAIRS, headers=headers,
                                timeout=timeout, tls=tls, same_connection=front == "client")
        outcomes[key] = RaceOutcome(target.name, gap, RACE_PAIRS, len(race.failures), race.failures,
                                    same_connection=front == "client")
        costs.setdefault(behind, {})[f"race {front}->{behind}"] = {"seconds": round(anyio.current_time() - start, 2),
                                                                   "requests": race.requests}

    async with anyio.create_task_group() as tg:
        for finding in findings:
            if finding.suspected is not None:
                tg.start_soon(one, finding.suspected)
    return outcomes


def seconds_text(audit: HopAudit) -> str:
    if audit.keepalive_timeout_s is not None:
        return f"{audit.keepalive_timeout_s:.1f} s"
    return f"open at {audit.keepalive_limit_s:g} s" if audit.keepalive_how.startswith("GET") else "not measured"


def body_text(audit: HopAudit) -> str:
    if audit.max_body_bytes is not None:
        return kib(audit.max_body_bytes)
    if audit.body_refuses_all:
        return "refuses all"
    return f"none up to {kib(audit.body_cap_bytes)}" if not audit.body_how.startswith("not") else "not measured"


def cancel_text(audit: HopAudit) -> str:
    """How soon the hop let go of a cancelled stream: "0.2 s", "kept", or "-" (not measured)."""
    if audit.cancel_release_s is not None:
        return f"{audit.cancel_release_s:.1f} s"
    return "kept" if "still" in audit.cancel_how else "-"


def idle_cut_text(audit: HopAudit) -> str:
    if audit.idle_stream_cut_s is not None:
        return f"{audit.idle_stream_cut_s:.1f} s"
    return "none" if "not cut" in audit.idle_stream_how else "-"


def audit_report(audits: list[HopAudit], findings: list[Finding], costs: dict, growth: Growth, horizon: int, *,
                 width: int) -> Group:
    """The table of hops (fitted to `width`), how each measurement was obtained, and the findings."""
    rows = []
    for a in audits:
        spent = costs.get(a.name, {})
        cost = sum(c.get("requests", 0) for c in spent.values())
        rows.append([escape(a.name), a.role, seconds_text(a), body_text(a),
                     str(a.context_tokens) if a.context_tokens else "-", cancel_text(a), idle_cut_text(a), str(cost)])
    columns = [Col("hop", shrink=True), Col("role"), Col("keep-alive", "right"), Col("max body", "right"),
               Col("context", "right"), Col("cancel", "right"), Col("idle cut", "right"), Col("reqs", "right")]
    parts: list = [fitted_table(columns, rows, width=width, title="audit, client side first")]
    for a in audits:
        parts.append(f"[bold]{escape(a.name)}[/]")
        how = [f"keep-alive: {a.keepalive_how}", f"body: {a.body_how}"]
        how += [f"context: {a.context_how}"] if a.role == "engine" else []
        how += [f"cancel: {a.cancel_how}", f"idle stream: {a.idle_stream_how}"]
        parts += [Padding(escape(line), (0, 0, 0, 2)) for line in how]
    parts.append(escape(f"growth: {kib(growth.per_round_bytes)} a round from {kib(growth.first_bytes)} "
                        f"({growth.how}); horizon {horizon} rounds"))
    if not findings:
        parts.append("[bold green]no finding[/]")
    for f in findings:
        color = {"server": "red", "client": "yellow"}.get(f.side, "white")
        parts.append(f"[bold {color}]{f.side.upper()}-SIDE at {escape(f.where)}: {f.kind}[/]")
        parts += [Padding(escape(line), (0, 0, 0, 2)) for line in f.evidence]
    return Group(*parts)
