"""Topology from TOML and --hop flags: good input gives Hops, bad input one clear line."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest

from repro.core.hop import Hop, TopologyError, parse_hop_flag
from repro.io.stack_file import hops_from, load_topology

GOOD = """\
[[hop]]
name = "proxy"
url = "http://127.0.0.1:8080"
metrics_url = "http://127.0.0.1:9090/metrics"
role = "proxy"

[[hop]]
name = "router"
url = "http://127.0.0.1:30000/v1"
metrics_url = "http://127.0.0.1:29000/metrics"
role = "router"

[[hop]]
name = "engine-0"
url = "http://127.0.0.1:30001"
"""


def test_load_topology(tmp_path):
    path = tmp_path / "stack.toml"
    path.write_text(GOOD)
    hops = load_topology(path)
    assert hops == [
        Hop("proxy", "http://127.0.0.1:8080", "http://127.0.0.1:9090/metrics", "proxy"),
        Hop("router", "http://127.0.0.1:30000/v1", "http://127.0.0.1:29000/metrics", "router"),
        Hop("engine-0", "http://127.0.0.1:30001", "http://127.0.0.1:30001/metrics", "engine"),
    ]


@pytest.mark.parametrize("flag, metrics_url", [
    ("name=e,url=http://127.0.0.1:30000/v1", "http://127.0.0.1:30000/metrics"),  # an engine: its API port
    ("name=r,url=http://127.0.0.1:29000,role=router", "http://127.0.0.1:29000/metrics"),
    ("name=p,url=http://127.0.0.1:8080,role=proxy", None),  # its /metrics may be the engine's, proxied
    ("name=p,url=http://127.0.0.1:8080,role=proxy,metrics=http://127.0.0.1:9101/metrics", "http://127.0.0.1:9101/metrics"),
    ("name=e,url=http://127.0.0.1:30000,metrics=none", None),
    ("name=e,url=http://127.0.0.1:30000,metrics=NONE", None),
])
def test_one_rule_for_a_missing_metrics_url(flag, metrics_url):
    assert parse_hop_flag(flag).metrics_url == metrics_url


def test_a_hop_read_back_from_a_run_log_keeps_its_resolved_metrics_url():
    recorded = b'{"name": "e", "url": "http://127.0.0.1:1", "metrics_url": null, "role": "engine"}'
    assert msgspec.json.decode(recorded, type=Hop).metrics_url is None
    assert Hop("e", "http://127.0.0.1:1").metrics_url == "http://127.0.0.1:1/metrics"
    with pytest.raises(dataclasses.FrozenInstanceError):
        Hop("e", "http://127.0.0.1:1").name = "x"


@pytest.mark.parametrize(
    "text, words",
    [
        ("[[hop]]\nname='a'\nurl='http://x:1'\nrole='gateway'\n", ["hop 1 (line 1)", "role 'gateway'", "proxy|router|engine"]),
        ("[[hop]]\nname='a'\nurl='ftp://x'\n", ["url 'ftp://x'", "http(s)"]),
        ("[[hop]]\nurl='http://x:1'\n", ["missing name"]),
        ("[[hop]]\nname='a'\n", ["hop 1 (line 1)", "missing url", 'url="http://127.0.0.1:30000"']),
        ("[[hop]]\nname='a'\nurl='http://x:1'\n\n[[hop]]\nname='b'\nurl='http://y:1'\nmetric='http://y:2'\n",
         ["hop 2 (line 5)", "unknown field 'metric'"]),
        ("[[hop]]\nname='a'\nurl='http://x:1'\n[[hop]]\nname='a'\nurl='http://x:2'\n", ["'a' appears twice"]),
        ("name = 'a'\n", ["no [[hop]] tables"]),
        ("[[hop]\n", ["not valid TOML", "line 1"]),
    ],
)
def test_bad_topology_names_file_hop_and_fix(tmp_path, text, words):
    path = tmp_path / "t.toml"
    path.write_text(text)
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    message = str(info.value)
    assert str(path) in message and "\n" not in message
    for word in words:
        assert word in message, message


def test_missing_file(tmp_path):
    with pytest.raises(TopologyError, match="cannot read topology file"):
        load_topology(tmp_path / "nope.toml")


def test_hop_flag():
    hop = parse_hop_flag("name=proxy,url=http://127.0.0.1:8080,metrics=http://127.0.0.1:9090/metrics,role=proxy")
    assert hop == Hop("proxy", "http://127.0.0.1:8080", "http://127.0.0.1:9090/metrics", "proxy")
    assert parse_hop_flag("name=e,url=http://h:1/").url == "http://h:1"


@pytest.mark.parametrize("text, words", [
    ("name=e", "missing url; add url=http://127.0.0.1:30000"),
    ("name=e,url=", "url '' is not an http(s) URL"),
    ("name=e,url=http://h:1,role=db", "role 'db'"),
    ("name=e,http://h:1", "not key=value"),
])
def test_bad_hop_flag(text, words):
    with pytest.raises(TopologyError, match="--hop") as info:
        parse_hop_flag(text)
    assert words in str(info.value)
    assert "None" not in str(info.value)  # a field not given is named as missing, never printed


def test_duplicate_flags():
    with pytest.raises(TopologyError, match="twice"):
        hops_from(None, ["name=e,url=http://a:1", "name=e,url=http://b:1"])


def test_a_name_in_the_topology_file_and_in_a_flag_is_a_duplicate(tmp_path):
    path = tmp_path / "stack.toml"
    path.write_text('[[hop]]\nname = "engine-0"\nurl = "http://127.0.0.1:30000"\n')
    with pytest.raises(TopologyError, match="'engine-0' appears twice") as info:
        hops_from(path, ["name=engine-0,url=http://127.0.0.1:30001"])
    assert "--topology and --hop" in str(info.value)
