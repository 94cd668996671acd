"""Property (issue 31): whatever renders a verdict (the terminal panel and its one-line labels,
report.html, the `repro watch` status page, the alert's annotations, the JSON) never lists the hop
it blames under "ruled out", never writes a value not read as `?` or `None`, and says a metrics
page "stopped answering" or was "never seen answering" only as that hop's recorded reads show.

Over evidence Hypothesis builds (tests/support/evidence_strategies.py: gauges read or not, pages
that answered before or never, canaries refused, timed out, failed every way; a round watched, or
triage's stand-in) judged by the real classify(), and over a realistic verdict of every kind
(tests/support/verdict_cases.py)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from repro.core.classify import classify
from repro.core.evidence import Evidence
from repro.core.next_actions import KINDS
from repro.core.verdict import Verdict
from repro.core.watch_status import WatchStatus
from repro.reporting.rejudge import verdict_title
from repro.reporting.run_report import verdict_html
from repro.reporting.terminal import ruled_out_text, tally_line, verdict_label, verdict_panel, verdict_tally
from repro.reporting.watch_metrics import watch_registry
from repro.reporting.watch_page import render_watch_page
from tests.support.evidence_strategies import LAST_PROGRESS_T, evidences
from tests.support.verdict_cases import CASES

pytestmark = pytest.mark.timeout(300)

# A value not read, printed: a `?` standing alone (not a URL's query, not a question a server
# wrote) or Python's None.
PLACEHOLDER = re.compile(r"(?<![\w?])\?(?![\w?=])|\bNone\b")
NOW = 1_000_000.0


def panel_text(verdict: Verdict) -> str:
    console = Console(width=80, record=True, color_system=None, file=open(os.devnull, "w"))
    console.print(verdict_panel(verdict))
    return console.export_text()


def watched(verdict: Verdict) -> tuple[str, list[str]]:
    """The status page's text (markup, style and script aside) and the alert's annotation labels
    (the open incident's info series), as `repro watch` serves them for this verdict."""
    status = WatchStatus(started_at=NOW - 60)
    status.verdict(verdict.to_dict(), at=NOW - 1, segment="events.jsonl")
    page = render_watch_page(status.to_dict(), now=NOW)
    page = re.sub(r"<script>.*?</script>|<style>.*?</style>", "", page, flags=re.S)
    exposition = generate_latest(watch_registry(status, clock=lambda: NOW)).decode()
    labels = [value for family in text_string_to_metric_families(exposition)
              if family.name == "repro_watch_incident_info" for sample in family.samples
              for value in sample.labels.values()]
    assert labels, "an open incident has its info series"
    return page, labels


def rendered_texts(verdict: Verdict) -> dict[str, str]:
    page, labels = watched(verdict)
    tally = verdict_tally([verdict.to_dict()])
    return {
        "terminal panel": panel_text(verdict),
        "terminal labels": "\n".join([verdict_label(verdict.side, verdict.where, verdict.kind),
                                      *(tally_line(t) for t in tally), verdict_title(verdict)]),
        "report.html": verdict_html(verdict),
        "status page": page,
        "alert annotations": "\n".join(labels),
        "JSON": "\n".join(json_strings(verdict.to_dict())),
    }


def json_strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in json_strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in json_strings(v)]
    return []


def assert_rendered_honestly(verdict: Verdict) -> None:
    # The hop blamed is where the fault is, never also ruled out: in the verdict, and as printed.
    assert not [r for r in verdict.ruled_out if r.partition(": ")[0] == verdict.where], verdict.ruled_out
    printed = ruled_out_text(verdict)
    assert not [r for r in printed if r.partition(" (")[0] == verdict.where], printed
    json.dumps(verdict.to_dict())  # the contract serialises
    for where, text in rendered_texts(verdict).items():
        found = PLACEHOLDER.search(text)
        assert found is None, f"{where} prints {found[0]!r} for a value not read: ...{text[max(0, found.start() - 80):found.end() + 40]}..."


def assert_page_history_told_as_read(verdict: Verdict, evidence: Evidence) -> None:
    """'stopped answering': the hop's page answered a read before the stall and none since;
    'never seen answering': it answered no read at all."""
    hops = {h.name: h for h in evidence.hops}
    said = [(verdict.where, verdict.summary)]
    said += [(r.partition(": ")[0], r) for r in verdict.ruled_out]
    said += [(e["hop"], str(e["value"])) for e in verdict.evidence]
    for name, text in said:
        if name not in hops or not ("stopped answering" in text or "never seen answering" in text):
            continue
        samples = hops[name].samples
        since = [s for s in samples if s.t > LAST_PROGRESS_T]
        if "stopped answering" in text:
            assert any(s.snapshot.ok for s in samples if s.t <= LAST_PROGRESS_T), (name, text, samples)
            assert since and not any(s.snapshot.ok for s in since), (name, text, samples)
        if "never seen answering" in text:
            assert samples and not any(s.snapshot.ok for s in samples), (name, text, samples)


@settings(max_examples=300, deadline=None)
@given(evidences())
def test_a_judged_round_renders_only_what_was_read(evidence):
    verdict = classify(evidence)
    assert_rendered_honestly(verdict)
    assert_page_history_told_as_read(verdict, evidence)


@settings(max_examples=150, deadline=None)
@given(evidences(triage_pid=True))
def test_a_triage_finding_renders_only_what_was_read(evidence):
    verdict = classify(evidence)
    assert_rendered_honestly(verdict)
    assert_page_history_told_as_read(verdict, evidence)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_every_kind_renders_only_what_was_read(kind):
    assert set(CASES) == set(KINDS)
    assert_rendered_honestly(CASES[kind])


def test_the_readme_example_panels_ruled_out_no_blamed_hop_and_print_no_placeholder():
    """The README's panels are real output (`COLUMNS=80 repro run --rounds 6 --inject wedge-after=3
    --stall-after 2`, and `repro wrap` on a real opencode; made by `python scripts/doc_blocks.py
    verdict-panel wrap-opencode`): held to the same rules, so a regenerated panel that breaks them shows."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    starts = [i for i in range(len(readme)) if readme.startswith("╭─ stall verdict:", i)]
    assert len(starts) == 2, "the README shows run's panel and wrap's"
    for start in starts:
        panel = readme[start:readme.index("╰", start)]
        rows = [line.strip("│ ").rstrip() for line in panel.splitlines()]
        blamed = rows[1].rpartition(": ")[2]
        ruled = " ".join(r for r in rows[next(i for i, r in enumerate(rows) if r.startswith("ruled out")):])
        ruled_hops = [part.split(" (")[0] for part in ruled[len("ruled out "):].split("; ")]
        assert blamed == "proxy" and blamed not in ruled_hops, ruled
        assert rows[2].startswith("connection-wedged"), rows[2]
        assert PLACEHOLDER.search(panel) is None, panel


def test_a_ruled_out_aside_the_evidence_already_shows_is_not_printed_twice():
    moved = "pid 7's threads woke 62 time(s) between triage's looks (1.0 s apart)"
    verdict = Verdict(side="client", where="proxy", kind="connection-wedged", confidence="high", phase=None,
                      conversation=1, round=3, stalled_for_s=None, summary="s",
                      evidence=[{"hop": "harness", "signal": "moved during the window", "value": moved}],
                      ruled_out=[f"harness: in use during the window ({moved})", "engine-0: idle, 0 running"])
    assert ruled_out_text(verdict) == ["harness (in use during the window)", "engine-0 (idle; 0 running)"]
