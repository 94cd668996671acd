"""`repro watch`: canary conversations against a stack until a signal, verdicts as Prometheus
metrics on --listen, a status page beside them. `--rules` and `--dashboard` print the alerting
rules and the Grafana dashboard that read those metrics."""

from __future__ import annotations

import argparse
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from rich.console import Console

from repro.commands.kubernetes_options import add_kubernetes_flags, check_kubernetes_flags
from repro.commands.options import (
    UNLISTED_MODEL,
    ModelsUnanswered,
    add_stack_flags,
    add_tls_flags,
    api_key_for,
    check_client_speaks,
    check_target_url,
    discover_model,
    hops_from_args,
    positive,
    trust_from_args,
)
from repro.core.errors import UsageError
from repro.core.hop import Hop, origin_of
from repro.core.watch_status import DEFAULT_LISTEN, HOPS_WATCHED_MAX
from repro.core.wire_api import APIS, parse_apis
from repro.io.rotating_log import (
    DEFAULT_KEEP_BYTES,
    DEFAULT_KEEP_SECONDS,
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_SEGMENT_SECONDS,
    MIB,
)
from repro.load.clients import CLIENTS, TIMEOUT_MODES, check_client_options
from repro.load.driver import DriverConfig
from repro.load.prompts import PromptSource
from repro.reporting.prose import WIDTH, fitted

DEFAULT_SELECTOR = '{job="sglang"}'
JOB_NAME = re.compile(r"[A-Za-z0-9_.:/-]+")
WATCH_EXITS = """exit status:
  0    stopped by SIGTERM or Ctrl-C (or --duration passed): what it saw is in /metrics and the log, not the status
  2    usage error (one line on stderr)
  1    the tool itself failed"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "watch",
        help="watch a stack until stopped: canary conversations, verdicts as Prometheus metrics, a status page",
        description="Run a few multi-round canary conversations against a serving stack until SIGTERM or Ctrl-C, "
        "judge every stalled or failed round as `repro run` does, and expose what it finds as Prometheus metrics "
        "(/metrics), a status page (/) and JSON (/status.json) on --listen. Hops come from --hop/--topology "
        "(the canaries go through the first), or from Prometheus (--prometheus, --selector: the canaries go to "
        "each discovered engine directly).",
        epilog=WATCH_EXITS, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--target", help="OpenAI-compatible base URL the canaries talk to (default: the first --hop; "
                                    "with discovery and no --target: each discovered engine)")
    p.add_argument("--model", help="model name (default: each target's first model from /v1/models)")
    add_stack_flags(p, hop_help="a hop of your stack, client side first (repeatable); the canary conversations go "
                                "through the first")
    p.add_argument("--prometheus", metavar="URL", help="find the hops in this Prometheus (its targets, or the series "
                                                       "--selector matches), e.g. http://127.0.0.1:9090")
    p.add_argument("--selector", default=DEFAULT_SELECTOR, help="with --prometheus: the label selector of the "
                                                                "hops to watch (default %(default)s)")
    p.add_argument("--name-label", default="instance", help="with --prometheus: the label that names a discovered "
                                                            "hop (default %(default)s)")
    p.add_argument("--discover-every", type=float, default=30.0, metavar="SECONDS",
                   help="with --prometheus: seconds between re-readings of the hops (default %(default)g)")
    p.add_argument("--conversations", type=int, help="canary conversations at once (default 2 through the hops "
                                                     "given; 1 per discovered engine)")
    p.add_argument("--rounds", type=int, default=8, help="rounds per conversation before a fresh one starts, so "
                                                         "history stays bounded (default %(default)s)")
    p.add_argument("--think", type=float, default=3.0, metavar="SECONDS",
                   help="seconds between a reply and the conversation's next round (default %(default)g: below "
                        "--keepalive-expiry, so each round reuses the conversation's connection)")
    p.add_argument("--max-tokens", type=int, default=16, help="max_tokens per round (default %(default)s)")
    p.add_argument("--prompt-chars", type=int, default=60, help="length of each user turn (default %(default)s)")
    p.add_argument("--stall-after", type=float, default=10.0, help="the stall trigger: seconds without a byte "
                                                                   "(default %(default)g)")
    p.add_argument("--connect-timeout", type=float, default=5.0, help="seconds to connect (default %(default)g)")
    p.add_argument("--round-timeout", type=float, default=120.0, help="deadline of one round in seconds "
                                                                      "(default %(default)g)")
    p.add_argument("--keepalive-expiry", type=float, default=4.0,
                   help="seconds an idle connection is kept for reuse (default %(default)g: above --think, so the "
                        "conversations reuse their connections as a harness does, and below the 5 s SGLang and "
                        "vLLM servers keep theirs, so the watch does not race them itself)")
    p.add_argument("--api", default="chat", metavar="LIST",
                   help="the wire APIs, comma-separated, the harness's first: " + ", ".join(APIS) + " (messages: "
                        "Anthropic's, the key from ANTHROPIC_API_KEY). The canary conversations speak the first; "
                        "every hop gets a fresh canary of each, each judged on its own, so a path that fails on one "
                        "API while another works through the same hop is an incident (default chat)")
    p.add_argument("--client", choices=CLIENTS, default="aiohttp", metavar="CLIENT",
                   help="the HTTP client of the canary conversations: " + ", ".join(CLIENTS) + " (default aiohttp)")
    p.add_argument("--client-timeouts", choices=TIMEOUT_MODES, default="repro",
                   help="repro (default): connect deadline only, the stall watchdog judges; native: the library's own")
    add_tls_flags(p)
    p.add_argument("--canary-every", type=float, default=15.0, metavar="SECONDS",
                   help="seconds between fresh-connection canaries to every hop (default %(default)g)")
    p.add_argument("--canary-timeout", type=float, default=3.0, help="deadline of one canary (default %(default)g)")
    p.add_argument("--probe-interval", type=float, default=2.0,
                   help="seconds between metric samples of every hop (default %(default)g; 0 turns probing off)")
    p.add_argument("--listen", metavar="HOST:PORT", help=f"where /metrics, / and /status.json are served (default "
                                                         f"{DEFAULT_LISTEN}; another address only when given)")
    p.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this long (default: until SIGTERM "
                                                                     "or Ctrl-C)")
    p.add_argument("--out", type=Path, help="run folder (default: runs/watch-<timestamp>)")
    p.add_argument("--log-segment-mib", type=float, default=DEFAULT_SEGMENT_BYTES / MIB, metavar="MIB",
                   help="the run log rotates to a new segment at this size (default %(default)g MiB) ...")
    p.add_argument("--log-segment-minutes", type=float, default=DEFAULT_SEGMENT_SECONDS / 60, metavar="MINUTES",
                   help="... or this age (default %(default)g min), so a range of it is read from few segments")
    p.add_argument("--log-keep-days", type=float, default=DEFAULT_KEEP_SECONDS / 86400, metavar="DAYS",
                   help="segments that ended longer ago are deleted (default %(default)g days) ...")
    p.add_argument("--log-keep-mib", type=float, default=DEFAULT_KEEP_BYTES / MIB, metavar="MIB",
                   help="... and the oldest go while all hold more than this (default %(default)g MiB); "
                        "`repro report --since/--until` reads any range of them")
    printed = p.add_mutually_exclusive_group()
    printed.add_argument("--rules", action="store_true", help="print the Prometheus alerting rules (YAML) and exit")
    printed.add_argument("--dashboard", action="store_true", help="print the Grafana dashboard (JSON) and exit")
    printed.add_argument("--alertmanager-config", action="store_true",
                         help="print the Alertmanager route and inhibit rules (YAML) to merge into alertmanager.yml, "
                              "and exit")
    # Not in the group: its usage line would pass 80 columns; printed_text refuses two together.
    p.add_argument("--kubernetes", action="store_true",
                   help="print Kubernetes manifests (YAML) that run this watch with the flags given: a Deployment, "
                        "a Service, a ServiceMonitor and the rules as a PrometheusRule; and exit")
    add_kubernetes_flags(p)
    p.add_argument("--job", default=None, metavar="NAME",
                   help="with --rules, --dashboard or --alertmanager-config: the job_name Prometheus scrapes the "
                        "watchers under, as in your prometheus.yml (default repro-watch); with --kubernetes, the "
                        "name of the objects (the operator names the job after the Service)")
    p.add_argument("--slo", default=None, metavar="OBJECTIVE",  # read by objective(): one line when not a number
                   help="with --rules or --kubernetes: the share of canary rounds that must complete, for the "
                        "SLO's burn-rate alerts (default 0.999)")
    p.set_defaults(handler=handle, command_parser=p)


def model_resolver(api_key: str | None, timeout: float):
    """target URL -> (model, listed), for the session (it runs this in a thread)."""
    def model_of(url: str) -> tuple[str, bool]:
        try:
            return discover_model(url, api_key=api_key, timeout=timeout), True
        except ModelsUnanswered:
            return UNLISTED_MODEL, False
    return model_of


def settings_from_args(args: argparse.Namespace):
    from repro.session.watch import LogBounds, WatchSettings
    from repro.session.watch_server import bind_listen, parse_listen

    for name in ("rounds", "max_tokens", "prompt_chars", "stall_after", "connect_timeout", "round_timeout",
                 "keepalive_expiry", "canary_every", "canary_timeout", "discover_every"):
        positive("--" + name.replace("_", "-"), getattr(args, name))
    for name in ("log_segment_mib", "log_segment_minutes", "log_keep_days", "log_keep_mib"):
        positive("--" + name.replace("_", "-"), getattr(args, name))
    if args.log_keep_mib < args.log_segment_mib:
        raise UsageError(f"--log-keep-mib {args.log_keep_mib:g} is below --log-segment-mib {args.log_segment_mib:g}: "
                         "the log keeps at least one whole segment; give a larger keep or a smaller segment")
    positive("--think", args.think, allow_zero=True)
    positive("--probe-interval", args.probe_interval, allow_zero=True)
    if args.conversations is not None:
        positive("--conversations", args.conversations)
    if args.duration is not None:
        positive("--duration", args.duration)
    check_client_options(args.client, "per-conversation", args.client_timeouts)
    if args.out is not None and (args.out / "events.jsonl").exists():
        raise UsageError(f"--out {args.out} holds a run's plain log (events.jsonl); give a folder of its own "
                         "(a watch's folder of segments can be given again: the watch goes on writing it)")
    if args.prometheus:
        try:
            import probes.discovery  # noqa: F401
        except ImportError:
            raise UsageError("--prometheus needs probes.discovery, not in this build; give the hops with --hop "
                             "or --topology") from None
    hops = hops_from_args(args)
    if args.target:
        check_target_url(args.target)
        if not hops:
            hops = [Hop("target", args.target)]
        elif origin_of(hops[0].url) != origin_of(args.target):  # a front the hops given do not include
            hops = [Hop("target", args.target, metrics_url=None, role="proxy"), *hops]
    if len(hops) > HOPS_WATCHED_MAX:
        raise UsageError(f"{len(hops)} hops given: a watch keeps at most {HOPS_WATCHED_MAX} (docs/watch-memory.md); "
                         "run a watch per part of the stack")
    if not hops and not args.prometheus:
        raise UsageError("nothing to watch: give --hop name=N,url=U (repeatable), --topology FILE, --target URL, "
                         "or --prometheus URL to find the hops")
    if args.think >= args.keepalive_expiry:
        warn(f"warning: --think {args.think:g} is not below --keepalive-expiry {args.keepalive_expiry:g}: each round "
             "opens a new connection, so a hop that wedges kept-alive connections goes unseen")
    trust = trust_from_args(args)
    listen = parse_listen(args.listen or DEFAULT_LISTEN)
    if not listen.loopback:
        warn(f"warning: --listen {listen} is not a loopback address: the metrics and the status page (verdicts, "
             "hop URLs) are open to whoever reaches it")
    try:
        apis = parse_apis(args.api)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    check_client_speaks(args.client, apis[0])
    api_key = api_key_for(apis[0])
    conversations = args.conversations or 2
    driver = DriverConfig(
        base_url="", model=args.model or "", rounds=args.rounds, conversations=conversations,
        think_time=args.think, max_tokens=args.max_tokens, stall_after=args.stall_after,
        connect_timeout=args.connect_timeout, round_timeout=args.round_timeout,
        keepalive_expiry=args.keepalive_expiry, api_key=api_key, client=args.client, api=apis[0],
        client_timeouts=args.client_timeouts, ca_file=trust.ca_file, insecure=trust.insecure,
        ramp_up=0.0, judge_budget=max(10.0, args.canary_timeout * 3),
    )
    sock = bind_listen(listen)  # last: a port in use is said before anything starts, and nothing is left open
    return WatchSettings(
        driver=driver, prompts=PromptSource(prompt_chars=args.prompt_chars), sock=sock, hops=hops,
        model_of=model_resolver(api_key, args.connect_timeout), unlisted_model=UNLISTED_MODEL,
        prometheus=args.prometheus, selector=args.selector, name_label=args.name_label,
        discover_every=args.discover_every, per_engine=args.conversations or 1, canary_every=args.canary_every,
        canary_timeout=args.canary_timeout, probe_interval=args.probe_interval, duration=args.duration, out=args.out,
        log=LogBounds(segment_bytes=round(args.log_segment_mib * MIB), segment_seconds=args.log_segment_minutes * 60,
                      keep_seconds=args.log_keep_days * 86400, keep_bytes=round(args.log_keep_mib * MIB)),
        canary_apis=apis[1:], api_keys={api: api_key_for(api) for api in apis[1:]})


def job_name(value: str | None) -> str:
    """--job, checked: it is written into PromQL strings and alert templates, so only the
    characters a job name needs (a quote, a brace or a space would break them)."""
    from repro.reporting.watch_rules import JOB

    if value is None:
        return JOB
    if not JOB_NAME.fullmatch(value):
        raise UsageError(f"--job {value!r} is not a plain job name: give the job_name of your prometheus.yml's "
                         "scrape config (letters, digits and _ . : / - only)")
    return value


def objective(args: argparse.Namespace) -> float:
    """--slo, checked: strictly between 0 and 1, and only where rules are printed."""
    from repro.reporting.slo_rules import DEFAULT_SLO, check_objective

    if args.slo is None:
        return DEFAULT_SLO
    if not (args.rules or getattr(args, "kubernetes", False)):
        raise UsageError("--slo goes with --rules or --kubernetes (the objective of the canary SLO's burn-rate "
                         "alerts); the watch itself does not need it")
    try:
        value = float(args.slo)
    except ValueError:
        raise UsageError(f"--slo {args.slo!r} is not a number: give the share of canary rounds that must "
                         "complete, e.g. --slo 0.999") from None
    try:
        check_objective(value)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    from repro.reporting.slo_rules import unreachable

    for window in unreachable(value):
        warn(f"warning: --slo {value:g}: the {window.burn_rate:g}x burn alert ({window.long} and {window.short}) "
             f"can never fire: its threshold, {window.burn_rate:g} x the budget, is 100% of rounds failed or more")
    return value


def printed_text(args: argparse.Namespace) -> str | None:
    """What --rules, --dashboard or --alertmanager-config print (None: watch instead); their
    flags checked first."""
    check_kubernetes_flags(args, getattr(args, "kubernetes", False), "--kubernetes")
    if getattr(args, "kubernetes", False) and (args.rules or args.dashboard or args.alertmanager_config):
        raise UsageError("--kubernetes prints its own manifests (the rules among them); give it alone, or "
                         "--rules, --dashboard or --alertmanager-config without it")
    if args.job is not None and not (args.rules or args.dashboard or args.alertmanager_config
                                     or getattr(args, "kubernetes", False)):
        raise UsageError("--job goes with --rules, --dashboard or --alertmanager-config (the job name their "
                         "queries and matchers select); the watch itself does not need it")
    job = job_name(args.job)
    slo = objective(args)
    if args.rules:
        from repro.reporting.watch_rules import rules_yaml

        return rules_yaml(job=job, slo=slo)
    if args.dashboard:
        from repro.reporting.watch_rules import dashboard_json

        return dashboard_json(job=job)
    if args.alertmanager_config:
        from repro.reporting.alertmanager_config import alertmanager_yaml

        return alertmanager_yaml(job=job)
    if getattr(args, "kubernetes", False):
        from repro.commands.watch_kubernetes import kubernetes_text

        return kubernetes_text(args, job, slo)
    return None


def hold_stop_signals(held: list[int]) -> dict[int, Any]:
    """Hold SIGINT and SIGTERM in `held` until the watch's event loop receives them itself (it
    then stops at once): without this, one sent while the modules load and the flags are checked
    would end the process by the default action, with nothing recorded. Returns the handlers to
    put back."""
    if threading.current_thread() is not threading.main_thread():  # signals are the main thread's only
        return {}
    return {sig: signal.signal(sig, lambda signum, _frame: held.append(signum))
            for sig in (signal.SIGINT, signal.SIGTERM)}


def handle(args: argparse.Namespace) -> int:
    text = printed_text(args)
    if text is not None:
        sys.stdout.write(text)
        return 0
    held: list[int] = []
    previous = hold_stop_signals(held)
    try:
        from repro.session.watch import Watch

        settings = settings_from_args(args)
        console = Console(stderr=True)
        # A watch's lines and panels fit 80 columns in a wider terminal too: they are read over
        # ssh, pasted into tickets, kept in a terminal log.
        console.width = min(console.width, WIDTH)
        summary = Watch(settings, console=console, held_signals=held).execute()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    rounds = summary["rounds"]
    for line in fitted(f"watch ended ({summary['reason']}): {rounds.get('completed', 0)} rounds completed, "
                       f"{rounds.get('stalled', 0)} stalled, {rounds.get('failed', 0)} failed; "
                       f"{len(summary['open_incidents'])} incidents open", indent="  ") + \
            fitted(f"log: {summary['run_dir']}", indent="  "):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0


def warn(text: str) -> None:
    """A warning on stderr, wrapped to 80 columns (a number kept with its unit)."""
    print("\n".join(fitted(text, indent="  ")), file=sys.stderr)
