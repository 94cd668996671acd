"""Arbitrary text never makes parse_metrics raise; what it cannot read is ok=False with an error.
Also for the two pages that are not Prometheus text: nginx stub_status and LiteLLM's backlog JSON."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probes import parse_metrics
from probes.dialects import READS
from repro.core.snapshot import Snapshot

NAMES = sorted(READS)

# Lines that look almost right: real names, odd labels and values, comments, EOF markers.
near_miss_line = st.one_of(
    st.builds(lambda n, labels, v: f"{n}{labels} {v}", st.sampled_from(NAMES),
              st.sampled_from(["", "{}", '{a="b"}', '{tp_rank="0",dp_rank="1"}', "{", '{a="\\"}', '{worker="x"}']),
              st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.text(max_size=8))),
    st.sampled_from(["# EOF", "# TYPE sglang:num_running_reqs gauge", "# HELP x", "#", "", "  "]),
    st.text(max_size=40),
)


def check(result):
    assert isinstance(result, list) and result
    for snapshot in result:
        assert isinstance(snapshot, Snapshot)
        assert snapshot.ok or (snapshot.error and "\n" not in snapshot.error)
        json.dumps(snapshot.to_dict(), allow_nan=False)  # nothing unencodable leaks out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=2000))
def test_arbitrary_text_never_raises(text):
    result = parse_metrics(text, hop="h", url="u")
    check(result)
    if not any(name in text for name in READS) and "Active connections:" not in text and "in_flight_requests" not in text:
        assert all(not s.ok for s in result)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(near_miss_line, max_size=30))
def test_near_miss_pages_never_raise(lines):
    check(parse_metrics("\n".join(lines), hop="h", url="u"))


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=500))
def test_arbitrary_bytes_decoded_never_raise(data):
    check(parse_metrics(data.decode("utf-8", "replace")))


# stub_status-like pages: the real four lines, each mutated or swapped for junk, odd whitespace and
# line endings, huge or negative numbers, extra or missing lines.
number = st.one_of(st.integers(min_value=0, max_value=10**6).map(str), st.integers().map(str),
                   st.sampled_from(["", "x", "1.5", "NaN", "9" * 30, "٣", " "]))
space = st.sampled_from([" ", "", "  ", "\t", " \t "])
stub_line = st.one_of(
    st.builds(lambda s, n: f"Active connections:{s}{n}{s}", space, number),
    st.sampled_from(["server accepts handled requests", "server accepts handled", "accepts handled requests", ""]),
    st.builds(lambda s, a, b, c: f"{s}{a} {b}{s}{c}{s}", space, number, number, number),
    st.builds(lambda s, a, b, c: f"Reading:{s}{a} Writing:{s}{b} Waiting:{s}{c}{s}", space, number, number, number),
    st.text(max_size=30),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(stub_line, max_size=7), st.sampled_from(["\n", "\r\n", "\n\n"]), st.booleans())
def test_stub_status_like_pages_never_raise(lines, newline, head):
    text = ("Active connections: 1" + newline if head else "") + newline.join(lines)
    result = parse_metrics(text, hop="h", url="u")
    check(result)
    for snapshot in result:
        if text.lstrip().startswith("Active connections:"):
            assert snapshot.dialect == "nginx"
        if snapshot.ok and snapshot.dialect == "nginx":
            assert snapshot.in_flight is not None and 0 <= snapshot.in_flight < 2**63


json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["in_flight_requests", "queued_requests", "admitted_requests", "x"]),
                       json_value, max_size=4), st.booleans())
def test_backlog_like_json_never_raises(body, cut):
    text = json.dumps(body)
    text = text[: len(text) // 2] if cut else text
    result = parse_metrics(text, hop="h", url="u")
    check(result)
    for snapshot in result:
        if snapshot.ok:
            assert snapshot.dialect == "litellm" and snapshot.in_flight is not None and snapshot.in_flight >= 0
