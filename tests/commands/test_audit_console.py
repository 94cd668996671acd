"""What `repro audit` prints fits 80 columns with no word broken: the measurements of a real audit
(nginx keepalive_timeout 2s, client_max_body_size 64k, in front of the simulated engine)."""

from __future__ import annotations

import pytest

from repro.core.audit_findings import audit_findings
from repro.core.audit_measurements import (
    BodySeen,
    CancelSeen,
    Growth,
    HopAudit,
    IdleStreamSeen,
    KeepAliveSeen,
)
from repro.reporting.audit_report import audit_report
from tests.support.golden import assert_fits, assert_units_kept, assert_words_whole, render_text

HOPS = [
    HopAudit("nginx", "proxy", keepalive_timeout_s=2.0, keepalive_limit_s=8,
             keepalive_how="GET /v1/models (http 200), then idle until eof", max_body_bytes=63717,
             body_cap_bytes=262144, body_step_bytes=4096,
             body_how="bisection, 7 max_tokens=1 requests: 63717 B accepted, 65512 B refused (http 413)",
             cancel_release_s=0.3, cancel_how="stream sent to nginx: nginx proxy in-flight: 0 before, 1 while "
                                              "streaming, back to 0 0.3 s after the close",
             idle_stream_cut_s=2.0, idle_stream_how="first token held back 60 s: cut after 2.0 s (closed (eof) after "
                                                    "http 200 headers, no event)",
             keepalive_seen=KeepAliveSeen.CLOSED, body_seen=BodySeen.LIMIT, cancel_seen=CancelSeen.RELEASED,
             idle_stream_seen=IdleStreamSeen.CUT),
    HopAudit("engine-0", "engine", keepalive_timeout_s=5.0, keepalive_limit_s=8,
             keepalive_how="GET /v1/models (http 200), then idle until eof", body_cap_bytes=262144,
             body_step_bytes=4096, body_how="a 256 KiB body was accepted (http 200)", context_tokens=32768,
             context_how="GET /v1/models max_model_len",
             cancel_how="stream sent to nginx: engine-0 engine running: 0 before, 1 while streaming, still 1 at "
                        "10.0 s after the close (deadline 10 s)",
             idle_stream_how="first token held back 60 s: not cut, its first event came after 60.0 s",
             keepalive_seen=KeepAliveSeen.CLOSED, body_seen=BodySeen.NO_LIMIT, cancel_seen=CancelSeen.KEPT,
             idle_stream_seen=IdleStreamSeen.NOT_CUT),
]
GROWTH = Growth(238, 408, "repro run's defaults: 200-character turns, 32-token replies")


@pytest.mark.parametrize("width", [80, 132])
def test_the_audit_fits_and_keeps_its_words(width):
    findings = audit_findings(HOPS, client="aiohttp", client_idle_s=15.0, growth=GROWTH, horizon=200)
    assert {f.kind for f in findings} == {"keepalive-mismatch", "body-limit-ahead"}
    text = render_text(audit_report(HOPS, findings, {"nginx": {"body": {"requests": 7}}}, GROWTH, 200, width=width),
                       width)
    assert_fits(text, width)
    assert_words_whole(text, ["keep-alive", "max", "body", "context", "reqs", "cancel", "kept", "none", "0.3",
                              "engine-0", "2.0", "62.2", "32768", "CLIENT-SIDE", "keepalive-mismatch", "body-limit-ahead", "nginx"])


def test_the_load_line_fits_80_columns_and_keeps_numbers_with_their_units():
    """The audit in docs/audit.md printed its load on one line of 377 columns."""
    from repro.core.hop import Hop
    from repro.reporting.audit_report import load_lines
    from repro.session.stack_audit import AuditSettings, planned_load

    hops = [Hop("nginx", "http://127.0.0.1:8080", role="proxy"), Hop("engine-0", "http://127.0.0.1:30000",
                                                                       role="engine")]
    load = planned_load(hops, AuditSettings(keepalive_limit=10, ttft_budget=10))
    text = "\n".join(load_lines(len(hops), load.requests, load.detail, load.upload, load.time.text())) + "\n"
    assert_fits(text, 80)
    assert_units_kept(text)
    assert_words_whole(text, ["audit", "max_tokens=256", "18.7", "max_tokens=1", "30.07"])
    assert "at most 201 requests" in text and "at most 118 s (keep-alive waits 20 s" in " ".join(text.split())


def test_the_help_fits_80_columns_and_keeps_numbers_with_their_units(capsys, monkeypatch):
    from repro.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        main(["audit", "--help"])
    text = capsys.readouterr().out
    assert_fits(text, 80)
    assert_units_kept(text)
    assert "never sets the exit status" in " ".join(text.split())


def test_the_table_is_made_from_outcome_values_not_from_the_sentences():
    """The sentences say how each was obtained; what the table prints comes from the values (before,
    "still" in the cancel sentence made "kept", "not cut" made "none", a "GET" made "open at")."""
    from repro.reporting.audit_report import body_text, cancel_text, idle_cut_text, seconds_text

    said_one_thing = HopAudit("h", "proxy", keepalive_limit_s=8, keepalive_how="GET /v1/models (http 200)",
                              body_how="none", cancel_how="still 1 at 10 s", idle_stream_how="not cut")
    assert [seconds_text(said_one_thing), body_text(said_one_thing), cancel_text(said_one_thing),
            idle_cut_text(said_one_thing)] == ["not measured", "not measured", "-", "-"]
    valued = HopAudit("h", "proxy", keepalive_limit_s=8, body_cap_bytes=262144, keepalive_seen=KeepAliveSeen.STILL_OPEN,
                      body_seen=BodySeen.NO_LIMIT, cancel_seen=CancelSeen.KEPT, idle_stream_seen=IdleStreamSeen.NOT_CUT)
    assert [seconds_text(valued), body_text(valued), cancel_text(valued), idle_cut_text(valued)] == [
        "open at 8 s", "none up to 256 KiB", "kept", "none"]


def test_a_gauge_not_measurable_here_is_told_from_one_that_failed_by_its_value():
    from repro.core.audit_measurements import CancelRun, GaugeUnread, Release
    from repro.session.stack_audit import unmeasured_of

    runs = [CancelRun("nginx", 3, (Release("nginx", "proxy in-flight", why="no metrics page: give the hop metrics=URL",
                                           unread=GaugeUnread.READ_FAILED),
                                   Release("engine", "engine running", why="anything",
                                           unread=GaugeUnread.NO_GAUGE)), 10.0)]
    failed, cannot = unmeasured_of([], runs, [], [])
    assert [line.split(":")[0] for line in failed] == ["nginx"] and [line.split(":")[0] for line in cannot] == ["engine"]
