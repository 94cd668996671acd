"""Check a verdict (as its JSON dict) against its own evidence entries: every claim the summary
and the ruled-out lines make must stand on an entry of that verdict. Used over every verdict the
scenario matrix and the real-stack tests produce (the property test does it on generated evidence)."""

from __future__ import annotations

import re

from repro.core.next_actions import ADVICE, ADVICE_KIND


def unbacked_claims(verdict: dict) -> list[str]:
    """The claims of `verdict` that none of its evidence entries back; empty when all are."""
    entries = verdict.get("evidence") or []

    def has(hop: str, signal: str, value: str | None = None, startswith: str | None = None) -> bool:
        for entry in entries:
            if entry.get("hop") != hop or entry.get("signal") != signal:
                continue
            text = str(entry.get("value"))
            if (value is None or text == value) and (startswith is None or text.startswith(startswith)):
                return True
        return False

    problems = []
    texts = [verdict.get("summary") or "", *(verdict.get("ruled_out") or [])]
    hops = {e.get("hop") for e in entries}
    engines = {e["hop"] for e in entries if e.get("signal") in ("running/queued", "metrics page")
               and str(e.get("hop", "")).startswith(("engine", "prefill", "decode", "target"))}
    for text in texts:
        for hop in hops:
            if f"{hop} answers /health (200)" in text and not has(hop, "/health", "200"):
                problems.append(f"'{hop} answers /health' without a /health 200 entry: {text}")
            if text.startswith(f"{hop}: idle") and not has(hop, "running/queued", startswith="0 running, 0 queued"):
                problems.append(f"'{hop}: idle' without gauges read since the stall at 0/0: {text}")
            counts = re.match(rf"{re.escape(hop)}: [^,;]*, (\d+) running, (\d+) queued", text)
            if counts and not has(hop, "running/queued", startswith=f"{counts[1]} running, {counts[2]} queued"):
                problems.append(f"counts for {hop} not in its evidence: {text}")
        if "engines serve fresh requests" in text:
            for engine in engines:
                if not has(engine, "canary", startswith="fresh canary 200"):
                    problems.append(f"'engines serve' but {engine} has no successful canary entry: {text}")
        if "a fresh connection works" in text and not any(
                e.get("signal") == "canary" and str(e.get("value")).startswith("fresh canary 200") for e in entries):
            problems.append(f"'a fresh connection works' without a successful canary entry: {text}")
    where = verdict.get("where")
    summary = verdict.get("summary") or ""
    if "show idle" in summary and not has(where, "running/queued", startswith="0 running, 0 queued"):
        problems.append(f"'show idle' without {where}'s gauges at 0/0 since the stall: {summary}")
    if "stopped answering" in summary and where and not has(where, "metrics page", startswith="stopped answering"):
        problems.append(f"'stopped answering' without {where}'s silent-page entry: {summary}")
    # An idle harness's verdict (triage --pid): each thread it names, and each hop's in-flight count.
    for tid in re.findall(r"\bthread (\d+) \(", summary):
        if not any(e.get("hop") == "harness" and f" thread {tid}" in str(e.get("signal")) for e in entries):
            problems.append(f"thread {tid} named without its 'harness' entry: {summary}")
    for hop, count in re.findall(r"([\w.-]+) has ([\d.]+) in flight", summary):
        if not has(hop, "in flight", count):
            problems.append(f"'{hop} has {count} in flight' without its entry: {summary}")
    return problems + advice_misfits(verdict)


def advice_misfits(verdict: dict) -> list[str]:
    """A verdict's advice must fit its kind and its cause: a refusal kind carries one of its own
    advice sentences and no other kind's; the API-key advice only for a 401/403 or an answer that
    speaks of the key; the body-size advice only for a 413."""
    summary = verdict.get("summary") or ""
    kind = verdict.get("kind")
    given = [name for name, sentence in ADVICE.items() if sentence.split("{")[0] in summary]
    problems = [f"advice '{name}' in a {kind} verdict: {summary}" for name in given if ADVICE_KIND[name] != kind]
    if kind in ADVICE_KIND.values() and not any(ADVICE_KIND[name] == kind for name in given):
        problems.append(f"a {kind} verdict without its advice: {summary}")
    if "key" in given and verdict.get("status") not in (401, 403) and not re.search(
            r"Unauthorized|Forbidden|Authentication|API key", summary.split("; check the API key")[0]):
        problems.append(f"API-key advice for HTTP {verdict.get('status')} whose answer says nothing of a key: {summary}")
    if "request-too-large" in given and verdict.get("status") != 413:
        problems.append(f"body-size advice for HTTP {verdict.get('status')}: {summary}")
    status = verdict.get("status")
    if kind == "request-rejected" and status == 413:
        problems.append(f"a 413 (too large) given request-rejected's advice: {summary}")
    if kind == "request-rejected" and status in (401, 403) and "key" not in given:
        problems.append(f"HTTP {status} without the API-key advice: {summary}")
    if "check the API key" in summary and "key" not in given and "request" not in given:
        problems.append(f"API-key words outside the advice that fits them: {summary}")
    return problems
