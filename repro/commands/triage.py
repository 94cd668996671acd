"""`repro triage`: judge a live hang from the hops' metrics and one canary each, with no load."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import PurePath

import anyio
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

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
from repro.core.exits import EXIT_HELP, exit_for_sides
from repro.core.text import number
from repro.core.wire_api import WIRE_APIS, parse_apis
from repro.reporting.fit import Col, column_widths, first_words, fits, fitted_table, plain, widest_line


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "triage", help="judge a live hang from every hop's metrics and one canary each (no load)",
        description="Sample every hop's metrics over a window, send one fresh-connection canary per hop, and say "
                    "where requests are stuck. Sends no load: at most one canary per hop.",
        epilog=EXIT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_stack_flags(p, hop_help="a hop of the stack, client side first (repeatable)")
    add_tls_flags(p)
    p.add_argument("--model", help="model for the canaries (default: the first hop's /v1/models)")
    p.add_argument("--window", type=float, default=5.0, help="seconds to watch (default 5)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples (default 1)")
    p.add_argument("--canary-timeout", type=float, default=3.0, help="deadline of one canary (default 3 s)")
    p.add_argument("--pid", action="append", type=int, default=[], metavar="PID",
                   help="the stuck harness's process: read its TCP connections from the kernel (state, last byte "
                        "received/sent, bytes acknowledged, queues) and where its threads wait (/proc; Python stacks "
                        "with py-spy when installed), and judge them with the hops (repeatable; Linux; another user's "
                        "process needs that user or root)")
    p.add_argument("--api", default="chat", metavar="LIST",
                   help="the wire APIs to canary on every hop, comma-separated, the harness's first: chat "
                        "(/v1/chat/completions), responses (/v1/responses), messages (/v1/messages, the key from "
                        "ANTHROPIC_API_KEY); each judged on its own, so a path that fails on one API while another "
                        "works through the same hop is a verdict (default chat)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from repro.live.triage import triage
    from repro.reporting.terminal import verdict_panel

    for name in ("window", "interval", "canary_timeout"):
        positive("--" + name.replace("_", "-"), getattr(args, name))
    hops = hops_from_args(args)
    trust_from_args(args)
    try:
        apis = parse_apis(args.api)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.pid and not hops:
        raise UsageError("--pid needs the stack's hops to judge the process's connections against: add --hop "
                         "name=proxy,url=http://127.0.0.1:8080,role=proxy (one per hop, client side first) or --topology FILE")
    if not hops:
        raise UsageError("no hops to triage: give --hop name=engine,url=http://127.0.0.1:30000 (repeatable) or --topology FILE")
    pids = list(dict.fromkeys(args.pid))  # each once, in the order given
    if pids:
        from probes.sockets import connections_of

        for pid in pids:
            connections_of(pid)  # before the window: a pid that cannot be read is a one-line error now
    api_key = os.environ.get("OPENAI_API_KEY") or None
    model = args.model or _discover_model(hops, api_key=api_key, timeout=args.canary_timeout)
    console = Console(stderr=True)
    console.print(f"watching {len(hops)} hop(s) for {args.window:g} s, one canary each ...")
    result = anyio.run(lambda: triage(hops, model=model, window=args.window, interval=args.interval,
                                      canary_timeout=args.canary_timeout, api_key=api_key, pids=pids, apis=apis,
                                      api_keys={api: api_key_for(api) for api in apis}))
    console.print(hop_table(result, width=console.width))
    for read in result.sockets:
        console.print(socket_table(read, width=console.width))
    by_pid = {read.pid: read for read in result.sockets}
    for read in result.threads:
        console.print(thread_table(read, by_pid.get(read.pid), width=console.width))
    if result.by_api:
        console.print(api_table(result, width=console.width))
        for api, judged in result.by_api.items():
            if judged.verdict is not None:
                console.print(f"[bold]{api}[/] ({WIRE_APIS[api].path}):", highlight=False)
                console.print(verdict_panel(judged.verdict))
        if not result.verdicts:
            console.print("[bold green]nothing stuck that triage can see on any API:[/] every fresh path answers "
                          "and no hop holds requests.")
    elif result.verdict is not None:
        console.print(verdict_panel(result.verdict))
    else:
        console.print("[bold green]nothing stuck that triage can see:[/] every fresh path answers and no hop holds "
                      "requests. " + ("The harness's connections and threads are shown above." if result.sockets else
                                      "A harness still stuck: give its --pid to see its connections and threads."))
        for line in result.ruled_out:
            console.print(f"  ruled out: {line}")
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2, default=str) + "\n")
    return exit_for_sides([v.side for v in result.verdicts], trouble=False)


NO_HOP = "(no known hop)"


# An error in a cell is read by its first words; the whole text is in --json.
CELL_ERROR_CHARS = 48
STACK_FRAMES = 6


def load_text(snapshot) -> str:
    """The gauges the hop's page gave, in words ("0 running, 2 queued"); those not read left out."""
    read = [f"{number(value)} {word}" for word, value in (("running", snapshot.running), ("queued", snapshot.queued),
                                                          ("in flight", snapshot.in_flight), ("held", snapshot.held))
            if value is not None]
    return ", ".join(read) or "no gauge read"


def hop_table(result, *, width: int) -> Table:
    """One row a hop, client side first: its metrics page, the load it reported, its canary."""
    rows = []
    for hop in result.hops:
        sample = result.latest.get(hop.name)
        snapshot = sample.snapshot if sample is not None else None
        metrics = ("no metrics page" if not hop.metrics_url else "not read" if snapshot is None
                   else "ok" if snapshot.ok else first_words(f"error: {snapshot.error}", CELL_ERROR_CHARS))
        load = load_text(snapshot) if snapshot is not None and snapshot.ok else "-"
        rows.append([escape(hop.name), hop.role, escape(metrics), load, canary_text(result.canaries.get(hop.name))])
    columns = [Col("hop"), Col("role"), Col("metrics", shrink=True), Col("load", shrink=True),
               Col("fresh canary", shrink=True)]
    return fitted_table(columns, rows, width=width, title="hops, client side first")


def canary_text(canary) -> str:
    if canary is None:
        return "none"
    if canary.outcome.ok:
        return f"{canary.outcome.status} in {canary.outcome.total_s:.2f} s"
    return "[red]FAILED[/]: " + escape(first_words(canary.outcome.error or str(canary.outcome.status),
                                                   CELL_ERROR_CHARS))


def api_table(result, *, width: int) -> Table:
    """Each hop's fresh canary on each wire API: "chat works through litellm, messages does not"."""
    rows = [[escape(hop.name), api, canary_text(judged.canaries.get(hop.name))]
            for hop in result.hops for api, judged in result.by_api.items()]
    return fitted_table([Col("hop"), Col("api"), Col("fresh canary", shrink=True)], rows, width=width,
                        title="fresh canaries by wire API")


def _ago(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}"


def socket_table(read, *, width: int = 80) -> Table | str:
    """One process's TCP connections as the kernel saw them at triage's last read (repro.live.triage.PidSockets)."""
    who = f"pid {read.pid}" + (f" ({escape(read.name)})" if read.name else "")
    if read.error is not None:
        return f"[bold red]{who}: connections not read:[/] {escape(read.error)}"
    rows = []
    for s in (sample.socket for sample in read.connections):
        # Segments unacknowledged only when there are some: a stuck send shows there.
        unacked = f" ({number(s.unacked)} seg)" if s.unacked else ""
        rows.append([s.remote, escape(s.hop or NO_HOP), s.state, f"{_ago(s.last_data_recv_s)} / {_ago(s.last_data_sent_s)}",
                     f"{number(s.bytes_received)} / {number(s.bytes_acked)}",
                     f"{number(s.rqueue)} / {number(s.wqueue)}{unacked}"])
    columns = [Col("remote"), Col("hop", shrink=True), Col("state"), Col("last in / out s ago", "right"),
               Col("bytes in / acked", "right"), Col("queues B", "right", shrink=True)]
    return fitted_table(columns, rows, width=width,
                        title=f"{who}: {len(read.connections)} TCP connection(s), read {read.t:.1f} s into the window",
                        caption="last in / out: seconds since the last byte received / sent; bytes in / acked: "
                                "received / acknowledged by the peer; queues: bytes unread / unacknowledged (and "
                                "segments unacknowledged)")


def short_frame(frame: str) -> str:
    """'wait (/usr/lib/python3.12/threading.py:355)' -> 'wait (threading.py:355)': the file's name
    tells the frame apart; its folder is in --json."""
    function, paren, where = frame.partition(" (")
    return f"{function} ({PurePath(where.rstrip(')')).name})" if paren else frame


def thread_table(read, connections=None, *, width: int = 80) -> Table | Group | str:
    """Where each thread of one process waits (repro.core.thread_state.ProcessThreads), at triage's last read;
    the sockets it waits on named by the connections read with it (PidSockets), else by inode."""
    named = {s.socket.inode: f"{s.socket.remote} ({s.socket.hop or NO_HOP})"
             for s in (connections.connections if connections is not None else ()) if s.socket.inode is not None}
    if read.error is not None:
        return f"[bold red]pid {read.pid}: threads not read:[/] {escape(read.error)}"
    stacks = (f"Python stacks by {read.stacks_by}" if read.stacks_by
              else f"Python stacks not read: {read.stacks_error}" if read.stacks_error
              else "not a Python process: no Python stacks" if read.not_python else "Python stacks not read")
    rows, stacks_of = [], []
    for thread in read.threads:
        call = "not read" if thread.syscall is None else thread.syscall
        waits = call + (f" ({kernel_function(thread.wchan)})" if thread.wchan else "")
        tcp = [named[inode] for inode in thread.sockets if inode in named]  # others: pipes, unix sockets
        sockets = (", ".join(tcp) + (" (watched by its event loop)" if thread.via_epoll else "")) if tcp else "-"
        frames = [short_frame(f) for f in thread.stack[:STACK_FRAMES]]
        frames += ["..."] if len(thread.stack) > STACK_FRAMES else []
        stacks_of.append(frames)
        rows.append([str(thread.tid), escape(thread.name or "-"), thread.state or "-", waits, escape(sockets),
                     escape("\n".join(frames) or "-")])
    columns = [Col("tid", "right"), Col("name"), Col("state"), Col("waits in", shrink=True),
               Col("sockets", shrink=True), Col("Python stack, innermost first", shrink=True)]
    title = f"pid {read.pid}: {len(read.threads)} thread(s), read {read.t:.1f} s into the window"
    caption = escape(f"state: R running, S sleeping, D uninterruptible, T stopped; waits in: its system call and "
                     f"kernel wait channel; sockets: the connections it waits to read. {stacks}")
    widths = column_widths(columns, rows, width)
    if fits(widths, width) and widths[-1] >= max((widest_line(plain(row[-1])) for row in rows), default=0):
        return fitted_table(columns, rows, width=width, title=title, caption=caption)
    # A frame is read on one line (Class.method (file.py:123)): in a narrow terminal each thread's
    # stack goes under the table, a frame a line, rather than into a column that would wrap them.
    table = fitted_table(columns[:-1], [row[:-1] for row in rows], width=width, title=title, caption=caption)
    under = [Text(f"thread {thread.tid} ({thread.name or '-'}), Python stack, innermost first:\n"
                  + "\n".join(f"  {frame}" for frame in frames))
             for thread, frames in zip(read.threads, stacks_of, strict=True) if frames]
    return Group(table, *under)


def kernel_function(wchan: str) -> str:
    """A wait channel without the compiler's clone suffix: 'poll_schedule_timeout.constprop.0' ->
    'poll_schedule_timeout' (the same kernel function)."""
    return wchan.split(".", 1)[0]


def _discover_model(hops, *, api_key, timeout: float) -> str:
    """Ask the engines first: in a hang, the hops in front of them may be the ones stuck. None
    answering is no usage error: a dead engine is what triage is for (its canary says so)."""
    ordered = sorted(hops, key=lambda h: h.role != "engine")
    return model_of_stack([hop.url for hop in ordered], api_key=api_key, timeout=timeout, note=note_on_stderr)
