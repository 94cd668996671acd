"""Hypothesis against every parser of outside input: nothing escapes but our own clear error types,
and the SSE decoder gives the same events however the bytes are split.

Covered elsewhere: probes.parse_metrics and its dialect adapters (tests/probes/test_probe_fuzz.py).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from proxies.spec import PROXY_FAULTS, RELAY_FAULTS, parse_proxy_fault, parse_relay_fault
from repro.core.faultspec import FaultSpec, FaultSpecError, ValueKind, parse_fault_spec
from repro.core.hop import TopologyError, parse_hop_flag
from repro.core.sse import SSEDecoder, SSEEvent
from repro.io.stack_file import hops_from, load_topology
from repro.sim import SIM_FAULTS, SimConfig, SimConfigError, parse_sim_fault

MODEST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                     HealthCheck.function_scoped_fixture])

# --- SSE decoder ---------------------------------------------------------------------------------

SSE_PIECES = [b"data: ", b"data:", b"data", b"event: ", b"event:x", b"id: ", b"id: 7", b"id: a\0b", b":", b": ping",
              b"retry: 5", b"\n", b"\r", b"\r\n", b"\n\n", b"{\"choices\": []}", b"[DONE]", b" ", b"x", b"\xff\xfe",
              "é".encode(), b"data: {\"a\": 1}\n\n"]
sse_stream = st.one_of(
    st.lists(st.sampled_from(SSE_PIECES), max_size=40).map(b"".join),
    st.binary(max_size=300),
)


def reference_events(stream: bytes) -> tuple[list[SSEEvent], str | None, int]:
    """The WHATWG event-stream rules, written plainly (line by line, no fast path)."""
    text = stream.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    events, data, event_type, last_id, comments = [], [], None, None, 0
    # Fields of an event still unterminated at the end of the bytes have not been read yet.
    text = text[: text.rfind(b"\n\n") + 2] if b"\n\n" in text else b""
    *lines, _unterminated = text.split(b"\n")
    for line in lines:
        if not line:
            if data:
                events.append(SSEEvent(b"\n".join(data), event_type, last_id))
            data, event_type = [], None
            continue
        if line.startswith(b":"):
            comments += 1
            continue
        name, sep, value = line.partition(b":")
        if sep and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            data.append(value)
        elif name == b"event":
            event_type = value.decode("utf-8", "replace")
        elif name == b"id" and b"\0" not in value:
            last_id = value.decode("utf-8", "replace")
    return events, last_id, comments


def feed_all(chunks: list[bytes]) -> tuple[list[SSEEvent], SSEDecoder]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for part in chunks:
        events += decoder.feed(part)
    return events, decoder


@MODEST
@given(sse_stream, st.lists(st.integers(min_value=0, max_value=400), max_size=12))
@example(b"data: a\r", [8])
@example(b"data: a\r\n\r\n", [8, 9, 10])
@example(b"data: a\r\r\n", [8])
def test_sse_any_split_gives_the_events_of_one_feed(stream, cuts):
    points = sorted({min(c, len(stream)) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    whole, one = feed_all([stream])
    split, many = feed_all(chunks)
    assert split == whole
    assert many.last_id == one.last_id and many.comments == one.comments


@MODEST
@given(sse_stream)
def test_sse_byte_by_byte_matches_the_plain_reading_of_the_rules(stream):
    events, decoder = feed_all([stream[i:i + 1] for i in range(len(stream))])
    # the block-based decoder dispatches event types per block, as the rules reset them per event
    expected, last_id, comments = reference_events(stream)
    assert events == expected
    assert decoder.last_id == last_id and decoder.comments == comments


@MODEST
@given(st.lists(st.binary(min_size=0, max_size=60).filter(lambda b: b"\n" not in b and b"\r" not in b), max_size=8),
       st.integers(min_value=1, max_value=7))
def test_sse_data_payloads_survive_any_chunk_size(payloads, size):
    stream = b"".join(b"data: " + p + b"\n\n" for p in payloads)
    events, _ = feed_all([stream[i:i + size] for i in range(0, len(stream), size)])
    assert [e.data for e in events] == payloads


# --- topology and hop flags -----------------------------------------------------------------------

def toml_value(draw_value):
    return draw_value


scalar = st.one_of(st.text(max_size=20), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                   st.booleans(), st.sampled_from(["http://127.0.0.1:30000", "https://h/v1", "ftp://x", "http://",
                                                   "engine", "proxy", "router", ""]))
toml_field_value = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                                st.dictionaries(st.sampled_from(["a", "url"]), inner,
                                                                                max_size=2)), max_leaves=6)
FIELDS = ["name", "url", "metrics_url", "metrics", "role", "extra"]


def render(value) -> str:
    """A TOML literal for a value (strings as basic strings; tomllib has no writer)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        escaped = "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" if ord(c) < 0x10000
                          else f"\\U{ord(c):08x}" for c in value)
        return f'"{escaped}"'
    if isinstance(value, list):
        return "[" + ", ".join(render(v) for v in value) + "]"
    return "{" + ", ".join(f"{k} = {render(v)}" for k, v in value.items()) + "}"


hop_table = st.dictionaries(st.sampled_from(FIELDS), toml_field_value, max_size=5)
topology_doc = st.one_of(
    st.lists(hop_table, max_size=4).map(
        lambda tables: "\n".join("[[hop]]\n" + "\n".join(f"{k} = {render(v)}" for k, v in t.items()) for t in tables)),
    st.builds(lambda v: f"hop = {render(v)}", toml_field_value),
    st.text(max_size=200),
)


def assert_hops_or_topology_error(call):
    try:
        hops = call()
    except TopologyError as exc:
        assert "\n" not in str(exc) and str(exc)
        return None
    for hop in hops:
        assert hop.url.startswith(("http://", "https://")) and hop.role in ("proxy", "router", "engine")
    return hops


@FEW
@given(topology_doc)
@example("hop = 1")
@example("hop = {}")
@example('hop = [{name = "a", url = "http://127.0.0.1:1", role = []}]')
@example('[[hop]]\nname = "a"\nurl = "http://127.0.0.1:1"\nrole = {a = 1}')
def test_load_topology_raises_only_topology_error(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("topo") / "stack.toml"
    path.write_bytes(doc.encode("utf-8", "surrogatepass"))
    assert_hops_or_topology_error(lambda: load_topology(path))


@pytest.mark.parametrize("doc", ["hop = [1]", "hop = [[]]"])
def test_load_topology_of_non_table_hop_entries_is_a_topology_error(tmp_path, doc):
    path = tmp_path / "stack.toml"
    path.write_text(doc)
    with pytest.raises(TopologyError):
        load_topology(path)


@MODEST
@given(st.one_of(
    st.text(max_size=120),
    st.lists(st.tuples(st.sampled_from(FIELDS + ["", " name", "url "]),
                       st.sampled_from(["", "x", "http://127.0.0.1:1", "http://127.0.0.1:1/metrics", "engine",
                                        "router", "=", ",", "http://h:99999"])), max_size=6)
      .map(lambda kv: ",".join(f"{k}={v}" for k, v in kv)),
))
@example("name=a,url=http://h:99999")
def test_parse_hop_flag_raises_only_topology_error(text):
    assert_hops_or_topology_error(lambda: [parse_hop_flag(text)])
    assert_hops_or_topology_error(lambda: hops_from(None, [text, text]))


def test_a_hop_url_with_a_broken_ipv6_bracket_is_a_topology_error():
    with pytest.raises(TopologyError):
        parse_hop_flag("name=a,url=http://[::1")


@pytest.mark.network
def test_a_target_with_a_broken_ipv6_bracket_is_a_usage_error(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "repro", "run", "--target", "http://[::1/v1", "--model", "m",
                           "--rounds", "1", "--out", str(tmp_path / "run")], capture_output=True, timeout=60)
    lines = proc.stderr.decode().strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "--target" in lines[0], lines[-3:]


# --- fault specs ----------------------------------------------------------------------------------

def spec_text(names):
    option = st.one_of(
        st.builds(lambda v: f"after={v}", st.sampled_from(["3", "0", "-1", "2.5s", "s", "1e400s", "nans", "9" * 5000,
                                                           "", "x", "1_0", "٣"])),
        st.builds(lambda v: f"per={v}", st.sampled_from(["conn", "global", "connection", "x", ""])),
        st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["path", "k", "", "AFTER"]),
                  st.sampled_from(["/v1", "v1", "", "="])),
        st.text(max_size=8),
    )
    head = st.builds(lambda n, v: n + v, st.sampled_from(sorted(names) + ["", "HANG", "x"]),
                     st.sampled_from(["", "=", "=1", "=0", "=-2", "=1.5", "=nan", "=inf", "= 3", "=x", "=1=2"]))
    return st.one_of(st.builds(lambda h, opts: ",".join([h, *opts]), head, st.lists(option, max_size=4)),
                     st.text(max_size=60))


def assert_spec_or_fault_error(call):
    try:
        spec = call()
    except FaultSpecError as exc:
        assert "\n" not in str(exc) and str(exc)
        return None
    assert isinstance(spec, FaultSpec)
    assert spec.after_requests >= 0 and spec.after_seconds >= 0
    return spec


ALL_KINDS = {"none": ValueKind.NONE, "int": ValueKind.INT, "float": ValueKind.FLOAT,
             "oint": ValueKind.OPTIONAL_INT, "ofloat": ValueKind.OPTIONAL_FLOAT}


@MODEST
@given(spec_text(ALL_KINDS))
def test_parse_fault_spec_raises_only_fault_spec_error(text):
    assert_spec_or_fault_error(lambda: parse_fault_spec(text, ALL_KINDS))


@MODEST
@given(spec_text(SIM_FAULTS))
def test_parse_sim_fault_raises_only_fault_spec_error(text):
    spec = assert_spec_or_fault_error(lambda: parse_sim_fault(text))
    if spec is not None:
        assert spec.name in SIM_FAULTS
        try:  # the engine's own config check of the same text: its own error types only
            SimConfig(fault=text).validate()
        except (FaultSpecError, SimConfigError):
            pytest.fail(f"parse_sim_fault accepted {text!r} but SimConfig.validate refused it")


@MODEST
@given(spec_text(PROXY_FAULTS))
@example("wedge-after=2,after=1")
@example("idle-cut=0")
@example("pass,path=v1")
def test_parse_proxy_fault_raises_only_fault_spec_error(text):
    spec = assert_spec_or_fault_error(lambda: parse_proxy_fault(text))
    if spec is not None:
        assert spec.name in PROXY_FAULTS
        assert set(spec.params) <= {"path"}


@MODEST
@given(spec_text(RELAY_FAULTS))
def test_parse_relay_fault_raises_only_fault_spec_error(text):
    spec = assert_spec_or_fault_error(lambda: parse_relay_fault(text))
    if spec is not None:
        assert spec.name in RELAY_FAULTS and not spec.params


# --- the run log reader -----------------------------------------------------------------------------

VALID_LINES = [
    b'{"type":"round_done","t":0.3,"conv":0,"round":0,"duration_s":0.1,"ttft_s":0.01,"completion_tokens":2,'
    b'"events":3,"max_gap_s":0.01}',
    b'{"type":"note","t":0.1,"text":"hi"}',
]


@MODEST
@given(st.lists(st.one_of(st.sampled_from(VALID_LINES), st.binary(max_size=80),
                          st.sampled_from([b"{}", b"[]", b"null", b'{"type":"nope"}', b'{"type":"round_done"}',
                                           b'{"type":"round_done","t":"x"}', b"\xff", b'{"type":'])), max_size=12))
def test_read_run_log_raises_only_run_log_error_on_any_content(tmp_path_factory, lines):
    from repro.io.runlog import RunLogError, read_run_log

    folder = tmp_path_factory.mktemp("log")
    (folder / "events.jsonl").write_bytes(b"\n".join(lines))
    try:
        log = read_run_log(folder)
    except RunLogError as exc:  # our own error: a file with nothing of ours in it
        assert "\n" not in str(exc)
        return
    physical = b"\n".join(lines).split(b"\n")
    assert len(log.events) + len(log.skipped) + int(log.torn_last_line) <= len(physical)
    assert all("\n" not in s for s in log.skipped)
