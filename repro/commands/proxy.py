"""`repro proxy`: run a fault proxy standalone in front of an upstream until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from repro.core.errors import UsageError
from repro.core.exits import EXIT_OK, EXIT_TOOL_FAILED
from repro.core.faultspec import FaultSpecError
from proxies.spec import PROXY_FAULTS, RELAY_FAULTS

HTTP_FAULTS_HELP = ("pass, buffer, hold-request, hold-response, truncate-hold=K, hold-eom, truncate-reset=K, "
                    "drop, wedge-after=N, keepalive-race[=S], delay=MS, slow-drip[=MS], idle-cut=S")
TCP_FAULTS_HELP = "pass, freeze, half-open, reset, slicer[=BYTES], limit-data=BYTES, latency=MS"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "proxy",
        help="run a fault-injecting proxy in front of a server",
        description="Run a fault proxy in front of --upstream and print its URL and metrics URL; "
        "stops on Ctrl-C or SIGTERM (held flows are released, listeners closed). "
        "Fault spec: NAME[=VALUE][,after=N|after=Ts][,per=conn|global].",
        epilog=f"HTTP faults (--layer http): {HTTP_FAULTS_HELP}. TCP faults (--layer tcp): {TCP_FAULTS_HELP}. "
        "At runtime (http layer): POST METRICS_HOST/fault {\"spec\": ...}, DELETE /fault, POST /release.",
    )
    p.add_argument("--upstream", required=True, help="where to forward, e.g. http://127.0.0.1:30000")
    p.add_argument("--fault", metavar="SPEC", help="fault to inject (default: pass everything through)")
    p.add_argument("--layer", choices=("http", "tcp"), default="http",
                   help="http: mitmproxy addon, round-aware (default); tcp: byte relay for socket faults")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="listen port (default: a free port)")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="metrics + admin port on 127.0.0.1 (default: a free port; http layer)")
    p.add_argument("--flow-log", type=Path, help="append a JSON Lines flow log here (http layer)")
    p.add_argument("--hold-max", type=float, default=600.0,
                   help="seconds after which any held flow is released and closed (default 600)")
    p.add_argument("--subprocess", action="store_true", help="run mitmproxy as a mitmdump child process (http layer)")
    p.set_defaults(handler=handle)


def _check(args: argparse.Namespace) -> None:
    if not args.upstream.startswith(("http://", "https://")) and args.layer == "http":
        raise UsageError(f"--upstream {args.upstream!r}: give a URL, e.g. http://127.0.0.1:30000")
    for name, value in (("--port", args.port), ("--metrics-port", args.metrics_port)):
        if not 0 <= value <= 65535:
            raise UsageError(f"{name} {value}: use 0 (a free port) or 1-65535")
    if args.hold_max <= 0:
        raise UsageError(f"--hold-max {args.hold_max}: must be a positive number of seconds")
    if args.fault:
        name = args.fault.split(",")[0].split("=")[0].strip().lower()
        if args.layer == "http" and name not in PROXY_FAULTS and name in RELAY_FAULTS:
            raise UsageError(f"--fault {args.fault!r} is a TCP-level fault: add --layer tcp")
        if args.layer == "tcp" and name not in RELAY_FAULTS and name in PROXY_FAULTS:
            raise UsageError(f"--fault {args.fault!r} is an HTTP-level fault: use --layer http")


def handle(args: argparse.Namespace) -> int:
    _check(args)
    try:
        if args.layer == "http":
            from proxies.runner import ProxyStartError, start_proxy

            try:
                handle = start_proxy(args.upstream, args.fault, flow_log=args.flow_log, host=args.host,
                                     port=args.port, metrics_port=args.metrics_port, hold_max=args.hold_max,
                                     mode="subprocess" if args.subprocess else "inprocess")
            except ProxyStartError as exc:
                if "already in use" in str(exc):
                    raise UsageError(f"--port {args.port} or --metrics-port {args.metrics_port}: address already "
                                     "in use; pick another port or 0 for a free one") from None
                print(f"repro proxy: {exc}", file=sys.stderr)
                return EXIT_TOOL_FAILED
        else:
            from proxies.relay import start_relay

            handle = start_relay(args.upstream, args.fault, host=args.host, port=args.port)
    except FaultSpecError:
        raise  # a ReproError already: one line naming the spec and the fix
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"--port {args.port}: cannot listen ({exc.strerror or exc}); pick another port or 0") from None

    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        print(f"proxy    {handle.url}  ->  {args.upstream}  ({args.layer} layer, fault: {args.fault or 'none'})")
        print(f"metrics  {getattr(handle, 'metrics_url', '') or 'none (tcp layer)'}", flush=True)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        handle.stop()
    return EXIT_OK
