"""What `repro audit` prints fits 80 columns with no word broken: the measurements of a real audit
(nginx keepalive_timeout 2s, client_max_body_size 64k, in front of the simulated engine)."""

from __future__ import annotations

import pytest

from repro.commands.audit import audit_report
from repro.core.audit import Growth, HopAudit, audit_findings
from tests.support.golden import assert_fits, assert_words_whole, render_text

HOPS = [
    HopAudit("nginx", "proxy", keepalive_timeout_s=2.0, keepalive_limit_s=8,
             keepalive_how="GET /v1/models (http 200), then idle until eof", max_body_bytes=63717,
             body_cap_bytes=262144, body_step_bytes=4096,
             body_how="bisection, 7 max_tokens=1 requests: 63717 B accepted, 65512 B refused (http 413)",
             cancel_release_s=0.3, cancel_how="stream sent to nginx: nginx proxy in-flight: 0 before, 1 while "
                                              "streaming, back to 0 0.3 s after the close",
             idle_stream_cut_s=2.0, idle_stream_how="first token held back 60 s: cut after 2.0 s (closed (eof) after "
                                                    "http 200 headers, no event)"),
    HopAudit("engine-0", "engine", keepalive_timeout_s=5.0, keepalive_limit_s=8,
             keepalive_how="GET /v1/models (http 200), then idle until eof", body_cap_bytes=262144,
             body_step_bytes=4096, body_how="a 256 KiB body was accepted (http 200)", context_tokens=32768,
             context_how="GET /v1/models max_model_len",
             cancel_how="stream sent to nginx: engine-0 engine running: 0 before, 1 while streaming, still 1 at "
                        "10.0 s after the close (deadline 10 s)",
             idle_stream_how="first token held back 60 s: not cut, its first event came after 60.0 s"),
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
