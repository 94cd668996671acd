"""`repro proxy`: run a fault proxy standalone in front of an upstream until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import errno
import signal
import socket
import sys
import textwrap
import threading
from collections.abc import Iterable
from pathlib import Path

from proxies.spec import DEFAULT_HOLD_MAX_S, HTTP_FAULTS, PROXY_FAULTS, RELAY_FAULTS, TCP_FAULTS, Fault
from repro.core.errors import UsageError
from repro.core.exits import EXIT_OK, EXIT_TOOL_FAILED
from repro.core.faultspec import FaultSpecError

METRICS_HOST = "127.0.0.1"  # where the http layer's metrics + admin endpoint listens (proxies.metrics)


def _fault_rows(faults: Iterable[Fault]) -> str:
    return "\n".join(f"{fault.usage}\t{fault.description}" for fault in faults)


EPILOG = f"""HTTP faults (--layer http; after=N counts requests):
{_fault_rows(HTTP_FAULTS)}

TCP faults (--layer tcp; after=N counts connections):
{_fault_rows(TCP_FAULTS)}

At runtime (http layer), on the metrics URL's host and port: POST /fault {{"spec": "SPEC"}} arms a fault,
DELETE /fault disarms it, POST /release lets every held flow go on."""


class _HelpFormatter(argparse.HelpFormatter):
    """Fills a paragraph's prose as argparse does, then lays out its "NAME<tab>TEXT" lines as two columns."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for paragraph in text.split("\n\n"):
            rows = [line.split("\t", 1) for line in paragraph.splitlines() if "\t" in line]
            prose = " ".join(line for line in paragraph.splitlines() if "\t" not in line)  # a heading, or text
            out = [super()._fill_text(prose, width, indent)] if prose else []
            column = max((len(name) for name, _ in rows), default=0) + 4
            for name, help_text in rows:
                out.append(textwrap.fill(help_text, width, initial_indent=f"{indent}  {name:<{column - 2}}",
                                         subsequent_indent=indent + " " * column))
            paragraphs.append("\n".join(out))
        return "\n\n".join(paragraphs)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "proxy",
        help="run a fault-injecting proxy in front of a server",
        description="Run a fault proxy in front of --upstream and print its URL and metrics URL; "
        "stops on Ctrl-C or SIGTERM (held flows are released, listeners closed).",
        epilog=EPILOG,
        formatter_class=_HelpFormatter,
    )
    p.add_argument("--upstream", required=True, help="where to forward, e.g. http://127.0.0.1:30000")
    p.add_argument("--fault", metavar="SPEC",
                   help="fault to inject: NAME[=VALUE][,after=N|after=Ts][,per=conn|global][,path=PREFIX], "
                   "NAME from the lists below (per= and path= http layer only; default: pass everything through)")
    p.add_argument("--layer", choices=("http", "tcp"), default="http",
                   help="http: mitmproxy addon, round-aware (default); tcp: byte relay for socket faults")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="listen port (default: a free port)")
    p.add_argument("--metrics-port", type=int, default=0,
                   help=f"metrics + admin port on {METRICS_HOST} (default: a free port; http layer)")
    p.add_argument("--flow-log", type=Path, help="append a JSON Lines flow log here (http layer)")
    p.add_argument("--hold-max", type=float, default=float(DEFAULT_HOLD_MAX_S),
                   help="seconds after which any held flow is released and closed (default %(default)g)")
    p.add_argument("--subprocess", action="store_true", help="run mitmproxy as a mitmdump child process (http layer)")
    p.set_defaults(handler=handle)


def _in_use(host: str, port: int) -> bool:
    """True if something already listens on host:port (bind fails with EADDRINUSE)."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return False  # not ours to judge here: the proxy's own start reports a host it cannot use
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as sock:
            # as the proxy's own listeners do, so a port with connections in TIME_WAIT is not "in use"
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return True
    return False


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
    # Checked before starting: a listener that fails inside mitmproxy surfaces only as a log line.
    ports = [("--port", args.host, args.port)]
    if args.layer == "http":
        ports.append(("--metrics-port", METRICS_HOST, args.metrics_port))
    for flag, host, port in ports:
        if port and _in_use(host, port):
            raise UsageError(f"{flag} {port}: address already in use on {host}; pick another port, or 0 for a free one")


def _start(args: argparse.Namespace):
    """The running proxy's handle, or None if it did not come up (the reason is printed)."""
    if args.layer == "http":
        from proxies.runner import ProxyStartError, start_proxy

        try:
            return start_proxy(args.upstream, args.fault, flow_log=args.flow_log, host=args.host, port=args.port,
                               metrics_port=args.metrics_port, hold_max=args.hold_max,
                               mode="subprocess" if args.subprocess else "inprocess")
        except (ProxyStartError, OSError) as exc:  # OSError: mitmdump could not be run
            failure: Exception = exc
    else:
        from proxies.relay import RelayStartError, start_relay

        try:
            return start_relay(args.upstream, args.fault, host=args.host, port=args.port)
        except RelayStartError as exc:
            failure = exc
    print(f"repro proxy: {failure}", file=sys.stderr)
    return None


def handle(args: argparse.Namespace) -> int:
    _check(args)
    try:
        proxy = _start(args)
    except FaultSpecError:
        raise  # a ReproError already: one line naming the spec and the fix
    except ValueError as exc:  # the upstream, as start_proxy or start_relay reads it
        raise UsageError(str(exc)) from None
    if proxy is None:
        return EXIT_TOOL_FAILED

    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        # A line each, within 80 columns (two URLs and the fault on one line did not fit).
        print(f"proxy    {proxy.url}  ->  {args.upstream}")
        print(f"metrics  {getattr(proxy, 'metrics_url', '') or 'none (tcp layer)'}")
        print(f"fault    {args.fault or 'none'} ({args.layer} layer)", flush=True)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        proxy.stop()
    return EXIT_OK
