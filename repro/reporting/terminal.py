"""A verdict on one terminal screen: what on-call reads first at 3 a.m.

The panel fits 80 columns and takes more when the terminal has more: headline (the side, and
where the fault sits relative to the engines), the kind and how sure, one sentence of why, the
next action (repro.core.next_actions), then the evidence that decided it, hop by hop, and what was
ruled out without repeating that evidence. Rich wraps each column on word boundaries, so a
continuation line stays under its entry; a value not read is left out, never printed as `?`; a
value too long for a console is shortened (hop names and ports kept) and stays whole in the JSON.
"""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from repro.core.evidence import FRESH_CANARY
from repro.core.next_actions import next_action
from repro.core.verdict import Verdict
from repro.reporting.fit import short_url
from repro.reporting.wrap import Wrapped

SIDE_STYLE = {"server": "bold red", "client": "bold yellow", "unknown": "bold white"}
SIDE_WORDS = {"server": "SERVER-SIDE", "client": "CLIENT-SIDE", "unknown": "SIDE UNKNOWN"}
# The kinds a client change fixes though a hop (even an engine) answered them: where the fault
# sits is what the client sends, not the hop that said no.
REFUSED = {"request-too-large": "what the client sends, refused by {hop}",
           "context-exceeded": "what the client sends, refused by {hop}",
           "request-rejected": "what the client sends, refused by {hop}",
           "rate-limited": "the client's request rate, limited by {hop}",
           "tls-rejected": "the client's trust of {hop}'s certificate"}
# Kinds about the client's connection to a hop, which may be the engine itself (no proxy between).
CONNECTION_KINDS = ("keepalive-race", "connection-reset")
LONGEST_VALUE = 240  # characters of one evidence value on the console; the JSON keeps it whole
LONGEST_WORD = 40  # a token longer than this (a URL, a path) is shortened rather than folded
HOP_WIDTH = 24  # a hop's name in the evidence column; longer ones end in an ellipsis (whole in the JSON)
ACTIVE_S = 1.0  # a harness connection with a byte this recent is in use, not the stuck one


def where_words(verdict: Verdict) -> str:
    """Where the fault sits, said relative to the engines: 'CLIENT-SIDE, in front of the engines:
    nginx', 'CLIENT-SIDE: the harness itself', 'SERVER-SIDE: the engine engine-0'."""
    return side_where_words(verdict.side, verdict.where, verdict.kind)


def side_where_words(side: str, where: str | None, kind: str) -> str:
    """where_words for a verdict's (side, where, kind) alone: an incident of `repro watch` has no more."""
    label = SIDE_WORDS.get(side, side.upper())
    if side == "client":
        if where == "harness":
            return f"{label}: the harness itself"
        if where in (None, "client"):
            return f"{label}: the client itself"
        if kind in REFUSED:
            return f"{label}: " + REFUSED[kind].format(hop=where)
        if kind in CONNECTION_KINDS and where != "connection":
            return f"{label}: the connection to {where}"  # the hop may be an engine the client talks to
        return f"{label}, in front of the engines: {'the connection' if where == 'connection' else where}"
    if side == "server":
        if where is None:
            return f"{label}: no hop named"
        return f"{label}: the engine {where}" if kind.startswith("engine-") else f"{label}: {where}"
    if where == "connection":
        return f"{label}: the connection"
    return f"{label}: " + (f"at {where}" if where not in (None, "client") else "no hop blamed")


def panel_title(verdict: Verdict) -> str:
    """What the panel is: a stalled round, a failed one, or triage's finding (no round of its own)."""
    if verdict.round == 0:
        return "triage finding"
    what = "failed round" if verdict.outcome == "failed" else "stall verdict"
    return f"{what}: conversation {verdict.conversation} round {verdict.round}"


def status_line(verdict: Verdict) -> Table:
    """'engine-hung: high confidence; mid-stream, stalled 2.0 s' (a failed round: how it failed),
    the kind in a column of its own so that a wrapped remainder stays under its start."""
    if verdict.outcome == "failed":
        how = f"HTTP {verdict.status}" if verdict.status is not None else verdict.failure
        state = "failed" + (f" ({how})" if how else "") + (f", {verdict.phase}" if verdict.phase else "")
    else:
        # Unknown is printed as such (triage watched no round): never a window passed off as a stall.
        stalled = ("stalled for an unknown time" if verdict.stalled_for_s is None
                   else f"stalled {verdict.stalled_for_s:.1f} s")
        state = f"{verdict.phase or 'phase unknown'}, {stalled}"
    line = Table.grid(padding=(0, 1))
    line.add_column(no_wrap=True, style="bold cyan")
    line.add_column(ratio=1)
    line.add_row(f"{verdict.kind}:", Wrapped(f"{verdict.confidence} confidence; {state}"))
    return line


def shorten(text: str, limit: int = LONGEST_VALUE) -> str:
    """A value that fits a console: long tokens shortened (a URL keeps its host and port), the
    whole cut on a word boundary. The same at every width, so a wider terminal never reads
    differently, only with fewer line breaks."""
    words = [_short_word(w) for w in text.split()]  # a newline or tab in a value is a space here
    out = " ".join(words)
    if len(out) <= limit:
        return out
    return out[:limit].rsplit(" ", 1)[0].rstrip(",;:") + " ... (whole in the JSON)"


def _short_word(word: str) -> str:
    if len(word) <= LONGEST_WORD:
        return word
    if word.startswith(("http://", "https://")) and len(url := short_url(word)) <= LONGEST_WORD:
        return url  # the tables' own shortening: host, port and the path's last part
    return word[:LONGEST_WORD - 3] + "..."


# The words of harness.py's socket entries: who, local -> remote STATE, last bytes, queues.
# A time the kernel did not report is left out of the entry.
SOCKET_VALUE = re.compile(r"(?P<who>.+?) (?P<local>\S+) -> (?P<remote>\S+) (?P<state>[A-Z_0-9]+): "
                          r"(?:last byte received (?P<recv>[\d.]+) s ago(?:, |; ))?(?:sent (?P<sent>[\d.]+) s ago; )?"
                          r"unread (?P<unread>[\d,]+) B, unacknowledged (?P<unacked>[\d,]+) B$")


def _seconds(text: str | None) -> float | None:
    return None if text is None else float(text)


def socket_line(value: str) -> tuple[str, float | None]:
    """A connection on one line ('pid 42 :51234 -> 127.0.0.1:8080, no byte for 2.1 s'), and how
    long ago its last byte went either way (None: not said). Fields not read are left out."""
    m = SOCKET_VALUE.match(value)
    if m is None:
        return value, None
    local, remote = m["local"], m["remote"]
    host = local.rpartition(":")[0]
    if host and remote.rpartition(":")[0] == host:
        local, remote = ":" + local.rpartition(":")[2], ":" + remote.rpartition(":")[2]
    recv, sent = _seconds(m["recv"]), _seconds(m["sent"])
    parts = [f"{m['who']} {local} -> {remote}" + ("" if m["state"] == "ESTABLISHED" else f" {m['state']}")]
    if recv is not None and recv == sent:
        parts.append(f"no byte for {recv:.1f} s")
    else:
        parts += ([f"last byte in {recv:.1f} s ago"] if recv is not None else []) + \
                 ([f"out {sent:.1f} s ago"] if sent is not None else [])
    parts += [f"{m['unread']} B unread"] if m["unread"] != "0" else []
    parts += [f"{m['unacked']} B unacknowledged"] if m["unacked"] != "0" else []
    known = [t for t in (recv, sent) if t is not None]
    return ", ".join(parts), min(known) if known else None


def entry_text(entry: dict[str, Any]) -> str | None:
    """'signal: value' as read on a console, or None when nothing of it was read (a value not read
    is left out where the verdict is made), and a value that repeats its signal says it once (the
    entry's typed fields say so: a fresh canary's `ok`, `restates`)."""
    signal, text = str(entry.get("signal")), str(entry.get("value", "")).strip()
    if signal == "canary" and "ok" in entry:
        signal, text = FRESH_CANARY, text[len(FRESH_CANARY):].lstrip()
    elif entry.get("restates"):
        text = text[len(signal):].lstrip(": ")
    parts = [p for p in text.split(", ") if p.strip()]
    if not parts:
        return None
    return f"{signal}: {', '.join(parts)}"


def evidence_rows(verdict: Verdict) -> list[tuple[str, str]]:
    """(hop, text) per evidence entry, the verdict's own hop first, each hop's entries together;
    a harness's connections in use during the window counted on one line rather than shown."""
    rows: dict[str, list[str]] = {}
    active: dict[str, int] = {}
    harness_sockets = sum(1 for e in verdict.evidence if e.get("signal") == "socket" and "pid" in e)
    for entry in verdict.evidence:
        hop, signal, value = str(entry.get("hop") or "-"), str(entry.get("signal")), entry.get("value")
        if signal == "socket":
            line, quiet = socket_line(str(value))
            if harness_sockets > 1 and "pid" in entry and quiet is not None and quiet < ACTIVE_S:
                active[hop] = active.get(hop, 0) + 1
                continue
            text: str | None = f"connection: {line}"
        else:
            text = entry_text(entry)
        if text is not None:
            rows.setdefault(hop, []).append(shorten(text))
    for hop, count in active.items():
        rows.setdefault(hop, []).append(f"connections: {count} more carried a byte within {ACTIVE_S:g} s "
                                        "(in use, not shown)")
    order = sorted(rows, key=lambda h: h != verdict.where)  # stable: the rest keep the verdict's order
    return [(hop, text) for hop in order for text in rows[hop]]


def ruled_out_text(verdict: Verdict) -> list[str]:
    """Each hop ruled out, with only what its evidence entries do not already say."""
    shown: dict[str, str] = {}
    for entry in verdict.evidence:
        hop = str(entry.get("hop"))
        shown[hop] = shown.get(hop, "") + f" | {entry.get('signal')} {entry.get('value')} | {entry.get('value')}"
    said = []
    for line in verdict.ruled_out:
        hop, sep, detail = line.partition(": ")
        if not sep:
            said.append(shorten(line))
            continue
        parts = [_without_shown_aside(p, shown.get(hop, "")) for p in _clauses(detail)]
        new = [p for p in parts if p not in shown.get(hop, "")]
        said.append(shorten(hop + (f" ({'; '.join(new)})" if new else "")))
    return said


def _without_shown_aside(clause: str, shown: str) -> str:
    """'in use during the window (pid 7's threads woke 62 time(s) ...)' -> 'in use during the
    window' when the evidence entries already say what the parenthesis does."""
    head, paren, aside = clause.partition(" (")
    return head if paren and aside.endswith(")") and aside[:-1] in shown else clause


def _clauses(detail: str) -> list[str]:
    """'idle, 0 running; fresh canary 200 in 0.1 s' -> its facts; 'X, below Y' stays one fact."""
    facts: list[str] = []
    for part in re.split(r"; |, ", detail):
        if facts and re.match(r"(below|above|under|over|more|less|than) ", part):
            facts[-1] += f", {part}"
        else:
            facts.append(part)
    return [f for f in facts if f]


def verdict_panel(verdict: Verdict) -> Panel:
    action = next_action(verdict)
    why = verdict.summary  # its closing advice (verdict.advice) is printed once, as the next action
    head = Text(where_words(verdict), style=SIDE_STYLE.get(verdict.side, "bold"))
    status = status_line(verdict)
    body = Table.grid(padding=(0, 1))
    body.add_column(style="bold", no_wrap=True)
    body.add_column(ratio=1)
    # Each text Wrapped: at spaces, never between a number and its unit ("2.1 s" on one line).
    body.add_row("why", Wrapped(shorten(why, limit=len(why))))  # whole, its long tokens shortened
    body.add_row("next", Wrapped(action.do))
    body.add_row("confirm", Wrapped(action.confirm))
    body.add_row("attach", Wrapped(action.attach))
    rows = evidence_rows(verdict)
    if rows:
        hops = Table.grid(padding=(0, 1))
        hops.add_column(no_wrap=True, style="cyan", max_width=HOP_WIDTH, overflow="ellipsis")
        hops.add_column(ratio=1)
        last = None
        for hop, text in rows:
            hops.add_row(hop if hop != last else "", Wrapped(text))
            last = hop
        body.add_row("evidence", hops)
    ruled_out = ruled_out_text(verdict)
    if ruled_out:
        body.add_row("ruled out", Wrapped("; ".join(ruled_out)))
    return Panel(Group(head, status, body), title=panel_title(verdict), title_align="left",
                 border_style=SIDE_STYLE.get(verdict.side, "white"))


def verdict_label(side: str, where: str | None, kind: str) -> str:
    return f"{side.upper()}-SIDE{f' at {where}' if where else ''}: {kind}"


FEED_CAUSES_KEPT = 256


class VerdictFeed:
    """Verdicts on the terminal as they land, without burying it.

    A hung engine stalls every round in flight at once, all with the same cause: a thousand
    identical panels would scroll the first one, and anything different, out of sight. So the
    first verdict of each (side, hop, kind) is shown in full, a new cause shows in full when it
    first appears, and repeats are counted: one line when the first repeat lands, the tally at
    the end. Every verdict is still in the run log and the --json summary.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        # (side, hop, kind) -> rounds shown or counted, the most recently seen last; at most
        # FEED_CAUSES_KEPT (a watch whose discovery renames hops meets new causes for ever): a
        # cause forgotten and met again is shown in full again.
        self.counts: dict[tuple[str, str | None, str], int] = {}

    def __call__(self, verdict: Verdict) -> None:
        key = (verdict.side, verdict.where, verdict.kind)
        seen = self.counts.pop(key, 0)
        self.counts[key] = seen + 1
        while len(self.counts) > FEED_CAUSES_KEPT:
            del self.counts[next(iter(self.counts))]
        if seen == 0:
            self.console.print(verdict_panel(verdict))
        elif seen == 1:
            # Short enough for one 80-column line: the tally at the end says how many.
            self.console.print(f"[dim]more rounds judged {verdict_label(*key)}: counted, not shown[/]",
                               highlight=False)


def verdict_tally(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each (side, hop, kind) with how many rounds got it, most first: the run's verdicts at a
    glance. Rounds, not verdicts: a stall that resumed and stalled again is judged twice."""
    rounds: dict[tuple[str, str | None, str], set[tuple[Any, Any]]] = {}
    for v in verdicts:
        key = (v.get("side", "unknown"), v.get("where"), v.get("kind", ""))
        rounds.setdefault(key, set()).add((v.get("conversation"), v.get("round")))
    ranked = sorted(rounds.items(), key=lambda item: -len(item[1]))  # stable: ties keep first-seen order
    return [{"side": side, "where": where, "kind": kind, "rounds": len(judged)}
            for (side, where, kind), judged in ranked]


def tally_line(entry: dict[str, Any]) -> str:
    """'12 rounds judged SERVER-SIDE at engine-0: engine-hung' for one verdict_tally entry."""
    n = entry["rounds"]
    return f"{n} round{'' if n == 1 else 's'} judged {verdict_label(entry['side'], entry['where'], entry['kind'])}"


def group_by_cause(verdicts: list[Verdict]) -> list[list[Verdict]]:
    """Verdicts grouped by (side, hop, kind), groups in the order their first verdict came."""
    groups: dict[tuple[str, str | None, str], list[Verdict]] = {}
    for verdict in verdicts:
        groups.setdefault((verdict.side, verdict.where, verdict.kind), []).append(verdict)
    return list(groups.values())


def rounds_named(verdicts: list[Verdict], limit: int = 12) -> str:
    """'conversation 3 round 2, conversation 4 round 2, ... (40 more)': which rounds, bounded."""
    named = ", ".join(f"conversation {v.conversation} round {v.round}" for v in verdicts[:limit])
    return named + (f", ... ({len(verdicts) - limit} more)" if len(verdicts) > limit else "")
