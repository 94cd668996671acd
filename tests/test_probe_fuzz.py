"""Arbitrary text never makes parse_metrics raise; what it cannot read is ok=False with an error."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probes import parse_metrics
from repro.core.snapshot import Snapshot
from probes.dialects import READS

NAMES = sorted(READS)

# Lines that look almost right: real names, odd labels and values, comments, EOF markers.
near_miss_line = st.one_of(
    st.builds(lambda n, l, v: f"{n}{l} {v}", st.sampled_from(NAMES),
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
    if not any(name in text for name in READS):
        assert all(not s.ok for s in result)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(near_miss_line, max_size=30))
def test_near_miss_pages_never_raise(lines):
    check(parse_metrics("\n".join(lines), hop="h", url="u"))


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=500))
def test_arbitrary_bytes_decoded_never_raise(data):
    check(parse_metrics(data.decode("utf-8", "replace")))
