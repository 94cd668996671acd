"""Verdicts on the terminal: one panel per cause, repeats counted, the tally at the end."""

import io

from rich.console import Console

from repro.core.verdict import Verdict
from repro.reporting.terminal import VerdictFeed, tally_line, verdict_tally


def verdict(kind: str, conv: int, where: str = "engine-0", side: str = "server") -> Verdict:
    return Verdict(side=side, where=where, kind=kind, confidence="high", phase="mid-stream", conversation=conv,
                   round=2, stalled_for_s=3.0, evidence=[], ruled_out=[], summary=f"{kind} summary")


def test_a_mass_hang_shows_one_panel_per_cause_and_counts_the_rest():
    out = io.StringIO()
    feed = VerdictFeed(Console(file=out, width=100))
    for conv in range(50):
        feed(verdict("engine-saturated" if conv < 5 else "engine-hung", conv))
    text = out.getvalue()
    assert text.count("stall verdict") == 2  # saturated first, then the change to hung
    assert text.index("engine-saturated") < text.index("engine-hung")
    assert "conversation 0 round 2" in text and "conversation 5 round 2" in text
    assert "conversation 6 round 2" not in text
    assert text.count("counted, not shown") == 2  # one line per cause, at its first repeat
    assert feed.counts == {("server", "engine-0", "engine-saturated"): 5, ("server", "engine-0", "engine-hung"): 45}


def test_the_same_kind_at_another_hop_is_another_cause():
    out = io.StringIO()
    feed = VerdictFeed(Console(file=out, width=100))
    feed(verdict("engine-hung", 0, where="engine-0"))
    feed(verdict("engine-hung", 1, where="engine-1"))
    assert out.getvalue().count("stall verdict") == 2


def test_the_tally_counts_rounds_per_cause_most_first():
    verdicts = [verdict("engine-hung", c).to_dict() for c in range(3)]
    verdicts += [verdict("connection-wedged", 9, where="proxy", side="client").to_dict()]
    assert verdict_tally(verdicts) == [
        {"side": "server", "where": "engine-0", "kind": "engine-hung", "rounds": 3},
        {"side": "client", "where": "proxy", "kind": "connection-wedged", "rounds": 1},
    ]
    assert verdict_tally([]) == []


def test_a_round_judged_twice_counts_once():
    again = [verdict("engine-slow", 4).to_dict(), verdict("engine-slow", 4).to_dict(), verdict("engine-slow", 5).to_dict()]
    (entry,) = verdict_tally(again)
    assert entry["rounds"] == 2
    assert tally_line(entry) == "2 rounds judged SERVER-SIDE at engine-0: engine-slow"
    assert tally_line({**entry, "rounds": 1}) == "1 round judged SERVER-SIDE at engine-0: engine-slow"
