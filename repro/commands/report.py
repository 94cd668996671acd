"""`repro report RUN_DIR`: re-judge a recorded run and write report.html beside its log; with
`--since/--until`, a wall-clock range of a rotating log (`repro watch`'s folder of segments); with
several folders (or one holding shard-K folders), the shards of one run merged into one report."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from rich.console import Console

RELATIVE_ARGUMENT = re.compile(r"^-\d[\w.]*$")  # -1h, -30m, and any -9x that parse_moment then refuses in its words


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="re-judge a recorded run; write a self-contained HTML report",
                              description="Re-judge a recorded run offline with the same classifier and write "
                              "RUN_DIR/report.html (a timeline plot, the verdicts, the round table).")
    p.add_argument("run_dir", type=Path, help="a run folder written by `repro run` (holds events.jsonl), or a folder "
                   "of rotating segments written by `repro watch` (events-<UTC start>-<n>.jsonl)")
    p.add_argument("more_runs", nargs="*", type=Path, metavar="RUN_DIR",
                   help="more run folders: the shards of one run (`repro run --shard K/N`), merged by time into one "
                        "report and one judgement (a single folder holding shard-K folders is read so too)")
    p.add_argument("--since", metavar="T", help="with a folder of rotating segments: from this moment on; ISO-8601 "
                   "(2026-12-05T10:00, 2026-12-05T10:00Z; no zone: local time) or before now (-30m, -1h, -2d). "
                   "Default: the oldest segment kept")
    p.add_argument("--until", metavar="T", help="with a folder of rotating segments: up to this moment (same forms). "
                   "Default: the newest event")
    p.add_argument("--html", type=Path, help="where to write the HTML (default RUN_DIR/report.html)")
    p.add_argument("--json", action="store_true", help="print the re-judged verdicts as JSON on stdout")
    # `--since -1h` as typed: argparse takes a word starting with "-" for a flag unless it looks like a
    # negative number; a moment before now is read as one (the parser has no flag that looks like it).
    p._negative_number_matcher = RELATIVE_ARGUMENT
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from repro.commands.options import exit_code
    from repro.core.errors import UsageError
    from repro.core.exits import EXIT_SIDE_UNKNOWN
    from repro.io.rotating_log import is_rotating_folder
    from repro.reporting.merged_runs import merged_log, shard_folders
    from repro.reporting.rejudge import rejudge_log
    from repro.reporting.run_report import ROUNDS_CSV, write_rejudged, write_report
    from repro.reporting.terminal import group_by_cause, rounds_named, tally_line, verdict_tally

    console = Console(stderr=True)
    since, until, read = range_asked(args)  # a time that cannot be read fails first, whatever the folder
    shards = [args.run_dir, *getattr(args, "more_runs", [])]
    if len(shards) == 1:
        shards = shard_folders(args.run_dir) or shards
    if len(shards) > 1:
        if since is not None or until is not None:
            raise UsageError("--since/--until read one watch's rotating log; several run folders are merged whole: "
                             "drop them")
        path, data = write_rejudged(rejudge_log(merged_log(shards)), args.html)
        console.print(f"merged {len(shards)} shards: " + ", ".join(str(f) for f in shards),
                      markup=False, highlight=False, soft_wrap=True)
    elif is_rotating_folder(args.run_dir):
        for line in read:
            console.print(line, markup=False, highlight=False)
        data = judged_range(args.run_dir, since, until, console)
        if isinstance(data, str):  # nothing recorded in the range: nothing can be said, not even "all fine"
            if args.json:
                sys.stdout.write(json.dumps({"verdicts": [], "report": None, "notes": [data]}, indent=2) + "\n")
            return EXIT_SIDE_UNKNOWN
        path, data = write_rejudged(data, args.html)
    elif since is not None or until is not None:
        raise UsageError(f"--since/--until read a folder of rotating segments (events-<UTC start>-<n>.jsonl), and "
                         f"{args.run_dir} holds none: drop them to report on a whole run folder")
    else:
        path, data = write_report(args.run_dir, args.html)  # a RunLogError says which log and why
    for note in data.notes:
        console.print(f"[yellow]note:[/] {note}")
    verdicts = [v.to_dict() for v in data.verdicts]
    tally = {(t["side"], t["where"], t["kind"]): t for t in verdict_tally(verdicts)}
    for group in group_by_cause(data.verdicts):
        v = group[0]
        console.print(f"{tally_line(tally[(v.side, v.where, v.kind)])} ({v.confidence}): {v.summary}; "
                      f"{rounds_named(group)}", highlight=False)
    if args.json:
        sys.stdout.write(json.dumps({"verdicts": verdicts, "report": str(path), "notes": data.notes}, indent=2) + "\n")
    console.print(f"report: {path}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"rounds as CSV: {path.parent / ROUNDS_CSV}", markup=False, highlight=False, soft_wrap=True)
    summary = dict(data.summary or {"rounds_stalled": len(verdicts)})
    summary["verdicts"] = verdicts
    summary["interrupted"] = False
    summary.setdefault("rounds_stalled", 0)
    return exit_code(summary)


def range_asked(args: argparse.Namespace) -> tuple[float | None, float | None, list[str]]:
    """--since and --until as wall-clock epoch seconds (None: not given), and how each was read."""
    import time

    from repro.core.errors import UsageError
    from repro.core.moments import parse_moment

    now = time.time()
    moments: list[float | None] = []
    read: list[str] = []
    for flag, text in (("--since", args.since), ("--until", args.until)):
        if text is None:
            moments.append(None)
            continue
        moment, read_as = parse_moment(text, flag=flag, now=now)
        moments.append(moment)
        read.append(f"{flag} {text}: {read_as}")
    since, until = moments
    if since is not None and until is not None and until <= since:
        raise UsageError(f"--until {args.until} is not after --since {args.since}: the range ends before it starts")
    return since, until, read


def judged_range(folder: Path, since: float | None, until: float | None, console: Console):  # Rejudged | str
    """The range of a rotating log re-judged; or, when nothing was recorded in it, the line saying so (printed)."""
    from repro.reporting.range_report import empty_range_text, range_text, rejudge_range

    data = rejudge_range(folder, since, until)
    if not data.log.in_range:
        line = f"{empty_range_text(data.log, folder)}: no report written"
        console.print(line, style="yellow", markup=False, highlight=False)
        return line
    console.print(f"range: {range_text(data.log)}, {data.log.in_range} events", markup=False, highlight=False)
    return data
