"""The verdict panel as on-call reads it in an 80-column terminal, for every verdict kind:
compared to stored text (tests/fixtures/console/panels/panel-KIND.txt), and held to the rules: no
line over 80 columns, no word broken over two lines, no `?` where a value was not read, the
advice said once, the harness's busy connections counted rather than listed.

Regenerate the stored text after a deliberate change of the panel (tests/support/golden.py):
    REPRO_UPDATE_GOLDEN=1 python -m pytest -q tests/reporting/test_verdict_panel.py
then read the diff (git diff tests/fixtures/console/panels) before committing it.
"""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from repro.core.next_actions import KINDS, next_action
from repro.reporting.terminal import evidence_rows, verdict_panel, where_words
from tests.support.columns import layout_faults
from tests.support.golden import assert_golden
from tests.support.verdict_cases import CASES, make

BORDER = "│╭╮╰╯─"


def rendered(verdict, width: int) -> str:
    console = Console(width=width, record=True, color_system=None, file=open(os.devnull, "w"))
    console.print(verdict_panel(verdict))
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())


def words(text: str) -> set[str]:
    return {w for w in re.split(r"\s+", text.translate({ord(c): " " for c in BORDER})) if w}


def test_every_kind_has_a_case():
    assert set(CASES) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_the_panel_at_80_columns_reads_as_stored(kind):
    assert_golden(f"panels/panel-{kind}", rendered(CASES[kind], 80) + "\n")


@pytest.mark.parametrize("kind", sorted(CASES))
def test_the_panel_fits_80_columns_and_breaks_no_word(kind):
    narrow = rendered(CASES[kind], 80)
    assert max(len(line) for line in narrow.splitlines()) <= 80
    assert not layout_faults(narrow), layout_faults(narrow)  # e.g. "no byte for 2.1" / "s"
    # A word broken over two lines leaves pieces that the unwrapped panel does not have.
    wide = rendered(CASES[kind], 400)
    assert max(len(line) for line in wide.splitlines()) > 80, "a wide terminal is used"
    assert words(narrow) <= words(wide), sorted(words(narrow) - words(wide))
    # Continuations are indented under their entry: below the headline and the kind's line, a
    # line's text starts at the panel's edge only with a label (why, next, ..., ruled out).
    labels = ("why", "next", "confirm", "attach", "evidence", "ruled out")
    at_edge = [line for line in narrow.splitlines()[3:-1] if line[2:3] != " "]
    assert all(line[2:].startswith(labels) for line in at_edge), at_edge


@pytest.mark.parametrize("kind", sorted(CASES))
def test_no_value_not_read_is_printed_as_a_question_mark(kind):
    text = rendered(CASES[kind], 80)
    assert not re.search(r"(^|[\s(=:])\?($|[\s,)])", text), text


def test_the_proxy_gauges_not_read_are_left_out():
    text = rendered(CASES["connection-wedged"], 80)
    assert "running/queued" in text  # the engine's, read
    assert "? running" not in text and text.count("running/queued") == 1


def test_the_headline_places_the_fault_relative_to_the_engines():
    assert where_words(CASES["connection-wedged"]) == "CLIENT-SIDE, in front of the engines: proxy"
    assert where_words(CASES["engine-hung"]) == "SERVER-SIDE: the engine engine-0"
    assert where_words(CASES["harness-idle"]) == "CLIENT-SIDE: the harness itself"
    assert where_words(CASES["client-overloaded"]) == "CLIENT-SIDE: the client itself"
    assert where_words(CASES["no-evidence"]) == "SIDE UNKNOWN: no hop blamed"
    assert where_words(CASES["context-exceeded"]) == "CLIENT-SIDE: what the client sends, refused by engine-0"
    # A keep-alive race with the engine itself (no proxy): never "in front of the engines".
    race = make("keepalive-race", "client", "engine-0", "s", [], outcome="failed", failure="reset")
    assert where_words(race) == "CLIENT-SIDE: the connection to engine-0"


def test_the_title_says_what_was_judged():
    assert rendered(CASES["engine-hung"], 80).startswith("╭─ stall verdict: conversation 1 round 4 ")
    assert rendered(CASES["engine-unreachable"], 80).startswith("╭─ failed round: conversation 1 round 1 ")
    assert rendered(CASES["request-withheld"], 80).startswith("╭─ triage finding ")
    assert "stalled 0.0" not in rendered(CASES["engine-unreachable"], 80)


@pytest.mark.parametrize("kind", ["request-too-large", "context-exceeded", "rate-limited", "request-rejected",
                                  "tls-rejected"])
def test_the_advice_of_a_refusal_is_said_once_as_the_next_action(kind):
    verdict = CASES[kind]
    action = next_action(verdict)
    assert action.advice and action.advice == verdict.advice and action.do == action.advice
    flat = " ".join(rendered(verdict, 400).split())
    assert flat.count(" ".join(action.advice.split())) == 1


def test_ruled_out_does_not_repeat_the_evidence():
    text = " ".join(rendered(CASES["connection-wedged"], 400).split())
    ruled = text[text.index("ruled out"):]
    assert "fresh canary 200 in 0.03 s" not in ruled and "0 running" not in ruled
    assert "engine-0 (idle; tokens 0.0/s)" in ruled
    assert "proxy" not in ruled  # the hop blamed is never also ruled out (issue 31)
    assert "below 1000 ms" in ruled  # what the evidence does not say stays


def test_the_harness_sockets_in_use_are_counted_not_listed():
    rows = evidence_rows(CASES["harness-idle"])
    sockets = [text for hop, text in rows if text.startswith("connection: ")]
    assert sockets == ["connection: pid 4242 :51234 -> :8080, last byte in 12.4 s ago, out 12.5 s ago"]
    assert ("nginx", "connections: 2 more carried a byte within 1 s (in use, not shown)") in rows
    assert rows[0][0] == "harness"  # the verdict's own hop first


def test_a_wide_terminal_gets_longer_lines_not_other_words():
    narrow, wide = rendered(CASES["engine-hung"], 80), rendered(CASES["engine-hung"], 140)
    assert len(wide.splitlines()) < len(narrow.splitlines())
    assert words(narrow) == words(wide)


# --- any verdict, not only the stored ones ------------------------------------------------------

HOPS = st.sampled_from(["nginx", "proxy", "engine-0", "engine-1", "target", "router", "gateway-eu-west-1-primary",
                        "haproxy", "socat", "harness", "client"])
WORD = st.one_of(
    st.sampled_from(["fresh", "canary", "200", "in", "0.03", "s", "running", "queued", "held-request",
                     "(timeout:", "no", "byte)", "127.0.0.1:53716", "ESTABLISHED", "nginx/1.22.1;"]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_./:", min_size=1, max_size=90),
    st.builds(lambda port, path: f"http://127.0.0.1:{port}{path}", st.integers(1, 65535),
              st.sampled_from(["", "/", "/v1", "/v1/chat/completions?stream=true&user=someone-long-name"])))
SENTENCE = st.lists(WORD, min_size=1, max_size=60).map(" ".join)
SOCKET = st.builds(
    lambda who, lp, rp, times, unread: (f"{who} 127.0.0.1:{lp} -> 127.0.0.1:{rp} ESTABLISHED: {times}unread {unread} B, "
                                        "unacknowledged 0 B"),
    st.sampled_from(["the driver", "pid 4242", "pid 77", "nginx's pid 9"]), st.integers(1024, 65535),
    st.integers(1, 65535),
    # A time the kernel did not report is left out of the entry (harness.times_text).
    st.sampled_from(["", "last byte received 0.1 s ago, sent 0.2 s ago; ", "last byte received 2.1 s ago, sent 2.1 s "
                     "ago; ", "last byte received 31.0 s ago; ", "sent 2.0 s ago; "]),
    st.sampled_from([0, 931, 12000]))
# A value as classify writes one, a gauge it did not read left out.
GAUGES = st.sampled_from(["0 running, 0 queued", "2 running", "0 queued", "3 running, 1 queued (stale gauge)"])
ENTRY = st.one_of(
    st.fixed_dictionaries({"hop": HOPS, "signal": st.just("socket"), "value": SOCKET, "at": st.floats(0, 100)}),
    st.fixed_dictionaries({
        "hop": HOPS, "signal": st.sampled_from(["canary", "running/queued", "/health", "round failed",
                                                "metrics page", "holds requests", "event-loop lag p99"]),
        "value": st.one_of(SENTENCE, GAUGES), "at": st.floats(0, 100)}))


@st.composite
def verdicts(draw):
    kind = draw(st.sampled_from(KINDS))
    side = draw(st.sampled_from(["client", "server", "unknown"]))
    outcome = draw(st.sampled_from(["stalled", "failed"]))
    entries = draw(st.lists(ENTRY, max_size=12))
    verdict = make(kind, side, draw(st.one_of(st.none(), HOPS, st.just("connection"))), draw(SENTENCE), [],
                   draw(st.lists(st.builds(lambda h, t: f"{h}: {t}", HOPS, SENTENCE), max_size=4)),
                   phase=draw(st.sampled_from([None, "before-first-byte", "mid-stream"])), outcome=outcome,
                   failure="reset" if outcome == "failed" else None, round=draw(st.sampled_from([0, 1, 7])),
                   stalled=draw(st.one_of(st.none(), st.floats(0, 1e4))))
    verdict.evidence = entries
    return verdict


@settings(max_examples=150, deadline=None)
@given(verdicts())
def test_any_verdict_fits_80_columns_breaks_no_word_and_prints_no_question_mark(verdict):
    narrow = rendered(verdict, 80)
    assert max(len(line) for line in narrow.splitlines()) <= 80, narrow
    assert not [f for f in layout_faults(narrow) if "unit" in f], narrow
    assert words(narrow) <= words(rendered(verdict, 400)), narrow
    labels = ("why", "next", "confirm", "attach", "evidence", "ruled out")
    at_edge = [line for line in narrow.splitlines()[3:-1] if line[2:3] != " "]
    assert all(line[2:].startswith(labels) for line in at_edge), narrow
    assert not re.search(r"(^|[\s(=:])\?($|[\s,)])", narrow), narrow


def test_an_entry_is_read_by_its_typed_fields_not_its_words():
    """A fresh canary's `ok`, `restates` and a socket's `pid` decide how an entry is shown; the same
    words without them (an entry of an older log) are shown as they are."""
    typed = make("engine-hung", "server", "engine-0", "s", [
        ("engine-0", "canary", "fresh canary 200 in 0.03 s", {"ok": True, "status": 200}),
        ("engine-0", "round failed", "round failed: HTTP 500", {"restates": True})])
    words = make("engine-hung", "server", "engine-0", "s", [
        ("engine-0", "canary", "fresh canary 200 in 0.03 s", {}),
        ("engine-0", "round failed", "round failed: HTTP 500", {})])
    assert [t for _, t in evidence_rows(typed)] == ["fresh canary: 200 in 0.03 s", "round failed: HTTP 500"]
    assert [t for _, t in evidence_rows(words)] == ["canary: fresh canary 200 in 0.03 s",
                                                    "round failed: round failed: HTTP 500"]


def test_a_harness_socket_is_counted_by_its_pid_field():
    quiet = "pid 7 127.0.0.1:{} -> 127.0.0.1:8080 ESTABLISHED: last byte received 0.1 s ago, sent 0.1 s ago; unread 0 B, " \
            "unacknowledged 0 B"
    rows = [("nginx", "socket", quiet.format(port), fields) for port, fields in ((5001, {"pid": 7}), (5002, {"pid": 7}))]
    counted = [t for _, t in evidence_rows(make("harness-idle", "client", "harness", "s", rows))]
    assert counted == ["connections: 2 more carried a byte within 1 s (in use, not shown)"], counted
    untyped = [t for _, t in evidence_rows(make("harness-idle", "client", "harness", "s", [r[:3] + ({},) for r in rows]))]
    assert len(untyped) == 2 and all(t.startswith("connection: pid 7") for t in untyped), untyped
