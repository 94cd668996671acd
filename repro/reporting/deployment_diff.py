"""What changed between two runs' deployments, beside each run's verdicts, and which of those
changes a verdict can implicate: so that nobody reverts a healthy setting blind.

The comparison (`compare`) is pure: two runs' deployment records (probes/deployment.py) and
verdicts in, deltas out. Whether a verdict can implicate a delta is read from that verdict's own
evidence entries, never guessed:

- the verdict points at the delta's hop: the change may explain it;
- an engine's setting and a verdict judged client-side whose evidence shows that engine idle at
  the stall (its gauges read after the round stopped: 0 running, 0 queued): the change cannot
  explain it, in those words;
- anything else (the engine's gauges not read since the stall, only read before it, busy, or a
  hop of another role): not ruled out, with the reason.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probes.deployment import ANSWERED, NOT_EXPOSED, OK
from repro.core import events as ev
from repro.core.errors import ReproError
from repro.io.runlog import read_run_log

IDLE_GAUGES = "0 running, 0 queued"


class DiffError(ReproError):
    """A run folder `repro diff` cannot compare; one line naming the folder and the fix."""


@dataclass
class RunRecord:
    """What `repro diff` needs of one run: where it is, its deployment record, its verdicts."""

    label: str  # "A" or "B"
    folder: str
    deployment: dict[str, dict[str, Any]]
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    rounds: str | None = None  # "4/6 rounds completed", when the run finished


def load_run(folder: Path, label: str) -> RunRecord:
    log = read_run_log(folder)  # a RunLogError names the folder and the fix
    recorded = next(log.of(ev.DeploymentRecorded), None)
    if recorded is None:
        raise DiffError(f"{folder}: its run log holds no deployment record (written before repro recorded one); "
                        "run it again with this repro to record each hop's deployment")
    verdicts = [e.verdict.to_dict() for e in log.of(ev.VerdictReached)]
    finished = next(log.of(ev.RunFinished), None)
    summary = finished.summary if finished is not None else {}
    total = summary.get("rounds_total")
    rounds = None if total is None else f"{summary.get('rounds_completed', 0)}/{total} rounds completed"
    return RunRecord(label, str(folder), recorded.hops, verdicts, rounds)


# --- deltas ---------------------------------------------------------------------------------------

# Which endpoint a setting is read from: a setting missing from one run is "not read" there when
# that endpoint did not answer, "removed" only when it answered without it.
_SOURCES = (("server_info.", ("/server_info", "/get_server_info")), ("router_info.", ("/get_server_info",)),
            ("workers.", ("/workers",)), ("model.", ("/v1/models",)), ("models", ("/v1/models",)),
            ("version", ("/version", "/server_info", "/get_server_info")),
            ("http.", ("/server_info", "/get_server_info", "/version", "/v1/models", "GET /v1/models (headers)")))


def _sources(key: str) -> tuple[str, ...]:
    for prefix, sources in _SOURCES:
        if key.startswith(prefix):
            return sources
    return ("stats page",) if "build_info" in key else ()


def _unread(record: dict[str, Any], key: str) -> tuple[str, str] | None:
    """(endpoint, what it answered) when `key` could not be read from this hop, or None when its
    endpoint answered."""
    read = record.get("read") or {}
    outcomes = [(path, read[path]) for path in _sources(key) if path in read]
    if not outcomes or any(outcome == OK for _, outcome in outcomes):
        return None
    failed = [(path, outcome) for path, outcome in outcomes if outcome != NOT_EXPOSED]
    return failed[0] if failed else None


# Keys of SGLang's /server_info that are not server arguments (scheduler info, the command line).
NOT_ARGS = frozenset({"launch_command", "version", "max_total_num_tokens", "max_req_input_len", "kv_events"})
SHOWN_OF_NEW_HOP = 6


def setting_name(key: str) -> str:
    """How people write a setting: SGLang's server arguments as their flags (--cuda-graph-max-bs)."""
    name = key.removeprefix("server_info.")
    if name != key and "." not in name and name not in NOT_ARGS:
        return "--" + name.replace("_", "-")
    return key


def _whole_hop(hop: str, record: dict[str, Any], only_in: str) -> dict[str, Any]:
    """A hop in one run only is one delta: listing each of its settings as added says nothing more."""
    settings = record.get("settings") or {}
    items = [f"{setting_name(k)}={show(v)}" for k, v in settings.items()]
    text = ", ".join(items[:SHOWN_OF_NEW_HOP]) + (f", and {len(items) - SHOWN_OF_NEW_HOP} more"
                                                 if len(items) > SHOWN_OF_NEW_HOP else "")
    return {"hop": hop, "role": record.get("role"), "key": None, "setting": "(the whole hop)",
            "change": f"hop only in run {only_in}", "a": None if only_in == "B" else text,
            "b": text if only_in == "B" else None, "note": None, "settings": settings}


def deltas(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every setting that differs, per hop (in run B's hop order, then hops only in A): added,
    removed, changed, or not read in one of the runs."""
    found = []
    for hop in [*b, *(h for h in a if h not in b)]:
        record_a, record_b = a.get(hop), b.get(hop)
        if record_a is None or record_b is None:
            found.append(_whole_hop(hop, record_b or record_a, "B" if record_a is None else "A"))
            continue
        role = record_b.get("role")
        settings_a = record_a.get("settings") or {}
        settings_b = record_b.get("settings") or {}
        noted: set[str] = set()  # the endpoints a "not read" delta of this hop already names
        for key in sorted(set(settings_a) | set(settings_b)):
            before, after = settings_a.get(key), settings_b.get(key)
            unread = None
            if key in settings_a and key in settings_b:
                if before == after:
                    continue
                change = "changed"
            elif key in settings_b:
                unread = _unread(record_a, key)
                change = "not read in run A" if unread else "added"
            else:
                unread = _unread(record_b, key)
                change = "not read in run B" if unread else "removed"
            if unread is not None:
                noted.add(unread[0])
            found.append({"hop": hop, "role": role, "key": key, "setting": setting_name(key), "change": change,
                          "a": before, "b": after, "note": f"{unread[0]}: {unread[1]}" if unread else None})
        found += _not_compared(hop, role, record_a, record_b, noted)
    return [d for d in found if not _launch_command_said_by_its_flags(d, found)]


def _failed(outcome: str | None) -> bool:
    """An endpoint that was asked and did not answer (an error, no answer in time): what it would have
    said is unknown. "not exposed" and "none given" are answers: the same on both sides, nothing differs."""
    return outcome is not None and outcome not in ANSWERED


def _not_compared(hop: str, role: str | None, record_a: dict[str, Any], record_b: dict[str, Any],
                  noted: set[str]) -> list[dict[str, Any]]:
    """An endpoint unread in either run: no setting read there can be called the same. Said once per
    endpoint, unless a setting of it is already listed as not read (`noted`: those endpoints)."""
    read_a, read_b = record_a.get("read") or {}, record_b.get("read") or {}
    return [{"hop": hop, "role": role, "key": path, "setting": path, "change": "not compared",
             "a": read_a.get(path), "b": read_b.get(path), "note": None}
            for path in sorted(set(read_a) | set(read_b))
            if (_failed(read_a.get(path)) or _failed(read_b.get(path))) and path not in noted]


LAUNCH_COMMAND = "server_info.launch_command"


def _command_words(command: Any) -> list[str]:
    if isinstance(command, list):
        return [str(word) for word in command]
    try:
        return shlex.split(str(command))
    except ValueError:  # an unbalanced quote: the words as written
        return str(command).split()


def _without_flags(words: list[str], flags: set[str]) -> list[str]:
    """The command line less each of `flags` and its value (`--flag value` or `--flag=value`)."""
    kept, i = [], 0
    while i < len(words):
        word = words[i]
        if word.split("=", 1)[0] in flags:
            has_value = "=" not in word and i + 1 < len(words) and not words[i + 1].startswith("--")
            i += 2 if has_value else 1
            continue
        kept.append(word)
        i += 1
    return kept


def _launch_command_said_by_its_flags(delta: dict[str, Any], found: list[dict[str, Any]]) -> bool:
    """A launch command that differs only by server arguments already listed as their own deltas
    says nothing more: one change, one line. Any other word that differs keeps it."""
    if delta["key"] != LAUNCH_COMMAND or delta["change"] != "changed":
        return False
    flags = {d["setting"] for d in found
             if d["hop"] == delta["hop"] and d["key"] != LAUNCH_COMMAND and d["setting"].startswith("--")}
    if not flags:
        return False
    return (_without_flags(_command_words(delta["a"]), flags)
            == _without_flags(_command_words(delta["b"]), flags))


# --- verdicts and what they can implicate ---------------------------------------------------------


def verdict_groups(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Verdicts by cause (side, where, kind), with their count, first seen first."""
    groups: dict[tuple, dict[str, Any]] = {}
    for verdict in verdicts:
        key = (verdict.get("side"), verdict.get("where"), verdict.get("kind"))
        group = groups.setdefault(key, {"side": key[0], "where": key[1], "kind": key[2], "count": 0, "verdicts": []})
        group["count"] += 1
        group["verdicts"].append(verdict)
    return list(groups.values())


def _engine_at_stall(verdict: dict[str, Any], hop: str) -> tuple[str, str]:
    """What this verdict's evidence says of an engine at the stall: ("idle", words), ("busy", words),
    ("history", words), ("failed", words) or ("not read", words)."""
    if verdict.get("outcome") == "failed":
        # A failed round has ended: the engine is idle after it whatever caused it (a proxy's 502 from
        # the engine's short keep-alive, say), so its gauges rule nothing out.
        return "failed", f"the round failed; {hop} idle after a failure shows nothing of its cause"
    entries = [e for e in verdict.get("evidence") or [] if e.get("hop") == hop]
    gauges = next((e for e in entries if e.get("signal") == "running/queued"), None)
    if gauges is not None:
        value = str(gauges.get("value"))
        if value == IDLE_GAUGES:
            canary = next((e for e in entries if e.get("signal") == "canary"), None)
            words = f"{hop} was idle, {value.replace(',', '')}, at the stall"
            if canary is not None and canary.get("ok") is True and canary.get("status") == 200:
                words += f" ({canary['value']})"
            return "idle", words
        return "busy", f"{hop} read {value} at the stall"
    before = next((e for e in entries if e.get("signal") == "running/queued before the stall"), None)
    if before is not None:
        return "history", f"{hop}'s gauges were read only before the stall ({before.get('value')})"
    page = next((e for e in entries if e.get("signal") == "metrics page"), None)
    if page is not None:
        return "not read", f"{hop}'s gauges: {page.get('value')}"
    return "not read", f"this verdict carries no reading of {hop}'s gauges"


def implications(delta: dict[str, Any], run: str, group: dict[str, Any]) -> list[dict[str, Any]]:
    """Can this delta explain the verdicts of this group? can_explain: True (they point at the
    delta's hop), False (their evidence rules the hop out), None (not ruled out), with the reason
    and how many of the group's verdicts it holds for: a group can split, the engine idle at some
    stalls and busy with other conversations at others."""
    hop, role = delta["hop"], delta.get("role")

    def entry(count: int, can_explain: bool | None, reason: str) -> dict[str, Any]:
        return {"run": run, "side": group["side"], "where": group["where"], "kind": group["kind"],
                "count": count, "of": group["count"], "can_explain": can_explain, "reason": reason}

    if group["where"] == hop:
        return [entry(group["count"], True, f"the verdict points at {hop}")]
    if role == "engine" and group["side"] == "client":
        readings = [_engine_at_stall(v, hop) for v in group["verdicts"]]
        idle = [words for state, words in readings if state == "idle"]
        rest = [words for state, words in readings if state != "idle"]
        found = [entry(len(idle), False, idle[0])] if idle else []
        if rest:
            found.append(entry(len(rest), None, f"not ruled out: {rest[0]}"))
        return found
    if group["side"] == "server" and group["where"] not in (None, hop):
        return [entry(group["count"], None, f"not ruled out: the verdict points at {group['where']}, not at {hop}")]
    return [entry(group["count"], None, f"not ruled out: no evidence in the verdict rules out {hop}")]


def compare(a: RunRecord, b: RunRecord) -> dict[str, Any]:
    """The whole comparison as plain data (what `repro diff --json` prints)."""
    groups = {run.label: verdict_groups(run.verdicts) for run in (a, b)}
    found = deltas(a.deployment, b.deployment)
    for delta in found:
        delta["implications"] = [found for label in ("A", "B") for group in groups[label]
                                 for found in implications(delta, label, group)]
    return {
        "runs": {run.label: {"folder": run.folder, "rounds": run.rounds, "hops": list(run.deployment),
                             "verdicts": [{k: g[k] for k in ("side", "where", "kind", "count")}
                                          for g in groups[run.label]]} for run in (a, b)},
        "deltas": found,
    }


def show(value: Any) -> str:
    return "unset" if value is None else str(value)


def short_change(before: Any, after: Any) -> tuple[str, str]:
    """Two long strings (a launch command) as the words that differ, with one word of context."""
    a, b = show(before), show(after)
    if not (isinstance(before, str) and isinstance(after, str)) or max(len(a), len(b)) <= 60:
        return a, b
    wa, wb = a.split(" "), b.split(" ")
    head = 0
    while head < min(len(wa), len(wb)) and wa[head] == wb[head]:
        head += 1
    tail = 0
    while tail < min(len(wa), len(wb)) - head and wa[-1 - tail] == wb[-1 - tail]:
        tail += 1
    start = max(0, head - 1)

    def cut(words: list[str]) -> str:
        middle = words[start:len(words) - tail]
        return ("... " if start else "") + " ".join(middle) + (" ..." if tail else "")

    return cut(wa), cut(wb)


def delta_line(delta: dict[str, Any]) -> str:
    change = delta["change"]
    if delta["key"] is None:
        return f"{delta['hop']}: {change}: {show(delta['b'] if delta['b'] is not None else delta['a'])}"
    if change == "changed":
        before, after = short_change(delta["a"], delta["b"])
        text = f"changed {before} -> {after}"
    elif change == "not compared":
        text = f"not compared: run A {show(delta['a'] or 'not asked')}; run B {show(delta['b'] or 'not asked')}"
    elif change in ("added", "not read in run A"):
        text = f"{change}: {show(delta['b'])}"
    else:
        text = f"{change} (was {show(delta['a'])})"
    note = f" [{delta['note']}]" if delta.get("note") else ""
    return f"{delta['hop']} {delta['setting']} {text}{note}"


def implication_line(delta: dict[str, Any], imp: dict[str, Any]) -> str:
    rounds = f"{imp['count']} round{'s' if imp['count'] != 1 else ''}"
    if imp["count"] != imp["of"]:
        rounds = f"{imp['count']} of its {imp['of']} rounds"
    cause = f"run {imp['run']}'s {imp['kind']}{f" at {imp['where']}" if imp['where'] else ''} ({imp['side']} side, {rounds})"
    if imp["can_explain"] is False:
        return f"{delta_line(delta)}: cannot explain {cause}: {imp['reason']}"
    if imp["can_explain"] is True:
        return f"{delta_line(delta)}: may explain {cause}: {imp['reason']}"
    return f"{delta_line(delta)}: {cause}: {imp['reason']}"
