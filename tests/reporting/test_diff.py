"""`repro diff RUN_A RUN_B`: two real runs against simulated engines with different settings, the
delta listed beside the verdicts, and what the verdicts' own evidence says each delta can explain;
the comparison's rules on plain records; one-line errors for folders it cannot compare."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from repro.core import events as ev
from repro.io.runlog import RunLogWriter, read_run_log
from repro.reporting.deployment_diff import RunRecord, compare, deltas, implication_line
from repro.sim import SimConfig, start_sim_process
from tests.support.columns import layout_faults
from tests.support.runs import kinds, repro_run

pytestmark = pytest.mark.timeout(90)


def repro(*args: str, timeout: float = 30, columns: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns)} if columns else None
    return subprocess.run([sys.executable, "-m", "repro", *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


@pytest.mark.network
def test_diff_of_two_runs_names_the_setting_and_says_it_cannot_explain_a_client_side_wedge(tmp_path):
    healthy = start_sim_process(SimConfig(cuda_graph_max_bs=64))
    broken = start_sim_process(SimConfig(cuda_graph_max_bs=48))
    try:
        code_a, _, _ = repro_run("--hop", f"name=engine-0,url={healthy.url}/v1", "--rounds", "2",
                                 "--conversations", "2", "--out", str(tmp_path / "a"))
        # The incident: the setting was lowered, and a proxy wedges reused connections while the engine idles.
        # One conversation: nothing else runs on the engine when its reused connection wedges.
        code_b, summary_b, _ = repro_run("--hop", f"name=engine-0,url={broken.url}/v1", "--rounds", "3",
                                         "--conversations", "1", "--inject", "wedge-after=2", "--stall-after", "1.5",
                                         "--out", str(tmp_path / "b"))
    finally:
        healthy.stop()
        broken.stop()
    assert code_a == 0 and code_b == 10, (code_a, code_b)
    assert kinds(summary_b) == {("client", "proxy", "connection-wedged")}
    # `repro run` wrote each hop's record right after its header.
    log_b = read_run_log(tmp_path / "b")
    assert [type(e) for e in log_b.events[:2]] == [ev.RunStarted, ev.DeploymentRecorded]
    recorded = log_b.events[1].hops
    assert list(recorded) == ["proxy", "engine-0"]
    assert recorded["engine-0"]["settings"]["server_info.cuda_graph_max_bs"] == 48
    assert recorded["proxy"]["settings"]["fault"] == "wedge-after=2"  # ours: known, not read through it

    out = repro("diff", str(tmp_path / "a"), str(tmp_path / "b"), "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["runs"]["B"]["verdicts"] == [{"side": "client", "where": "proxy", "kind": "connection-wedged",
                                               "count": summary_b["rounds_stalled"]}]
    assert result["runs"]["A"]["verdicts"] == []
    [setting] = [d for d in result["deltas"] if d["key"] == "server_info.cuda_graph_max_bs"]
    assert (setting["hop"], setting["change"], setting["a"], setting["b"]) == ("engine-0", "changed", 64, 48)
    [imp] = setting["implications"]
    assert imp["can_explain"] is False
    assert imp["text"].startswith("engine-0 --cuda-graph-max-bs changed 64 -> 48: cannot explain run B's "
                                  "connection-wedged at proxy (client side")
    assert "engine-0 was idle, 0 running 0 queued, at the stall" in imp["text"]
    # The proxy exists in run B only; the verdict points at it, so it may explain it.
    [proxy] = [d for d in result["deltas"] if d["hop"] == "proxy"]
    assert proxy["change"] == "hop only in run B" and proxy["implications"][0]["can_explain"] is True
    # Nothing else changed: no noise from ports, timestamps or load.
    assert {d["hop"] for d in result["deltas"]} == {"engine-0", "proxy"}
    # The launch command differs by that flag only: one change, one line.
    assert {d["key"] for d in result["deltas"] if d["hop"] == "engine-0"} == {"server_info.cuda_graph_max_bs"}

    text = repro("diff", str(tmp_path / "a"), str(tmp_path / "b"), columns=80)
    assert text.returncode == 0 and "cannot explain run B's connection-wedged at proxy" in " ".join(text.stdout.split())
    assert not layout_faults(text.stdout, what="repro diff"), layout_faults(text.stdout, what="repro diff")


# --- the rules, on plain records ------------------------------------------------------------------

ENGINE_A = {"role": "engine", "url": "u", "settings": {"server_info.foo": 8, "version": "1"},
            "read": {"/server_info": "ok", "/version": "not exposed (http 404)", "/v1/models": "ok"}}
ENGINE_B = {**ENGINE_A, "settings": {"server_info.foo": 16, "version": "1"}}


def verdict(side: str, where: str, kind: str, *entries: tuple) -> dict:
    """Entries (hop, signal, value) or (hop, signal, value, typed fields)."""
    return {"side": side, "where": where, "kind": kind,
            "evidence": [{"hop": e[0], "signal": e[1], "value": e[2], "at": 3.0, **(e[3] if len(e) > 3 else {})}
                         for e in entries]}


def canary_200(hop: str) -> tuple:
    return (hop, "canary", "fresh canary 200 in 0.05 s", {"ok": True, "status": 200})


def only_implication(*verdicts: dict) -> dict:
    result = compare(RunRecord("A", "a", {"engine-0": ENGINE_A}),
                     RunRecord("B", "b", {"engine-0": ENGINE_B}, list(verdicts)))
    [delta] = result["deltas"]
    [imp] = delta["implications"]
    imp["text"] = implication_line(delta, imp)
    return imp


def test_an_engine_idle_at_the_stall_rules_its_setting_out():
    imp = only_implication(verdict("client", "proxy", "connection-wedged",
                                   ("engine-0", "running/queued", "0 running, 0 queued"),
                                   canary_200("engine-0")))
    assert imp["can_explain"] is False
    assert imp["text"] == ("engine-0 --foo changed 8 -> 16: cannot explain run B's connection-wedged at proxy "
                           "(client side, 1 round): engine-0 was idle, 0 running 0 queued, at the stall "
                           "(fresh canary 200 in 0.05 s)")


def test_an_idle_engine_whose_canary_is_not_typed_is_said_without_it():
    """The canary's answer is read from its typed fields, never its words: an entry of an older log,
    words only, is left out of the sentence (the gauges still rule the setting out)."""
    imp = only_implication(verdict("client", "proxy", "connection-wedged",
                                   ("engine-0", "running/queued", "0 running, 0 queued"),
                                   ("engine-0", "canary", "fresh canary 200 in 0.05 s")))
    assert imp["can_explain"] is False and imp["text"].endswith("engine-0 was idle, 0 running 0 queued, at the stall")


@pytest.mark.parametrize(("entries", "words"), [
    # Read only before the stall: the past, not the engine's state at the stall.
    ([("engine-0", "running/queued before the stall", "0 running, 0 queued, 4.0 s before it (history)")],
     "read only before the stall"),
    ([("engine-0", "metrics page", "not read since the stall")], "not read since the stall"),
    ([], "this verdict carries no reading of engine-0's gauges"),
    ([("engine-0", "running/queued", "3 running, 0 queued")], "engine-0 read 3 running, 0 queued at the stall"),
    ([("engine-0", "running/queued", "0 running, 0 queued (stale gauge)")], "(stale gauge) at the stall"),
])
def test_without_an_idle_reading_at_the_stall_the_setting_is_not_ruled_out(entries, words):
    imp = only_implication(verdict("client", "proxy", "connection-wedged", *entries))
    assert imp["can_explain"] is None and "cannot explain" not in imp["text"] and imp["count"] == 1
    assert imp["reason"].startswith("not ruled out") and words in imp["reason"]


def test_an_idle_engine_after_a_failed_round_rules_nothing_out():
    # A proxy's 502 from the engine's shorter keep-alive (keepalive-race): the round has ended, so
    # the engine reads idle after it whatever the cause; its keep-alive setting stays a suspect.
    failed = {**verdict("client", "proxy", "keepalive-race", ("engine-0", "running/queued", "0 running, 0 queued"),
                        canary_200("engine-0")), "outcome": "failed"}
    result = compare(RunRecord("A", "a", {"engine-0": ENGINE_A}), RunRecord("B", "b", {"engine-0": ENGINE_B}, [failed]))
    [delta] = result["deltas"]
    [imp] = delta["implications"]
    text = implication_line(delta, imp)
    assert imp["can_explain"] is None and "cannot explain" not in text and "at the stall" not in text
    assert "not ruled out: the round failed" in text


def test_a_cause_splits_into_the_rounds_the_evidence_rules_out_and_the_rest():
    idle = verdict("client", "proxy", "connection-wedged", ("engine-0", "running/queued", "0 running, 0 queued"))
    busy = verdict("client", "proxy", "connection-wedged", ("engine-0", "running/queued", "1 running, 0 queued"))
    result = compare(RunRecord("A", "a", {"engine-0": ENGINE_A}),
                     RunRecord("B", "b", {"engine-0": ENGINE_B}, [idle, busy, idle]))
    [delta] = result["deltas"]
    ruled_out, open_ = delta["implications"]
    assert (ruled_out["can_explain"], ruled_out["count"], ruled_out["of"]) == (False, 2, 3)
    assert (open_["can_explain"], open_["count"], open_["of"]) == (None, 1, 3)
    assert "cannot explain run B's connection-wedged at proxy (client side, 2 of its 3 rounds)" in implication_line(
        delta, ruled_out)
    assert "engine-0 read 1 running, 0 queued at the stall" in implication_line(delta, open_)


def test_a_long_changed_string_shows_the_words_that_differ():
    a = "python -m sglang.launch_server --model-path /m --tp-size 1 --cuda-graph-max-bs 64 --port 30000"
    [delta] = deltas({"e": {**ENGINE_A, "settings": {"server_info.launch_command": a}}},
                     {"e": {**ENGINE_A, "settings": {"server_info.launch_command": a.replace("64", "48")}}})
    assert implication_line(delta, {"count": 1, "of": 1, "run": "B", "kind": "k", "where": "w", "side": "client",
                                    "can_explain": None, "reason": "r"}).startswith(
        "e server_info.launch_command changed ... --cuda-graph-max-bs 64 ... -> ... --cuda-graph-max-bs 48 ...: ")


LAUNCH = "python -m sglang.launch_server --model-path /m --cuda-graph-max-bs 64 --enable-metrics --port 30000"


def engine_with(command, **args):
    return {**ENGINE_A, "settings": {"server_info.launch_command": command,
                                     **{f"server_info.{k}": v for k, v in args.items()}}}


@pytest.mark.parametrize("as_list", [False, True])
def test_a_launch_command_that_differs_only_by_a_listed_flag_is_not_listed_twice(as_list):
    b = LAUNCH.replace("max-bs 64", "max-bs=48")  # either spelling of the flag's value
    a_cmd, b_cmd = (LAUNCH.split(), b.split()) if as_list else (LAUNCH, b)
    found = deltas({"e": engine_with(a_cmd, cuda_graph_max_bs=64)}, {"e": engine_with(b_cmd, cuda_graph_max_bs=48)})
    assert [d["key"] for d in found] == ["server_info.cuda_graph_max_bs"]


def test_a_launch_command_with_another_difference_is_kept():
    b = LAUNCH.replace("max-bs 64", "max-bs 48").replace("/m", "/other-model")
    found = deltas({"e": engine_with(LAUNCH, cuda_graph_max_bs=64)}, {"e": engine_with(b, cuda_graph_max_bs=48)})
    assert sorted(d["key"] for d in found) == ["server_info.cuda_graph_max_bs", "server_info.launch_command"]
    # A flag dropped from the command with its setting unchanged is a difference too.
    c = LAUNCH.replace(" --enable-metrics", "")
    found = deltas({"e": engine_with(LAUNCH, cuda_graph_max_bs=64)}, {"e": engine_with(c, cuda_graph_max_bs=64)})
    assert [d["key"] for d in found] == ["server_info.launch_command"]


def test_a_verdict_at_the_hop_may_be_explained_by_its_setting():
    imp = only_implication(verdict("server", "engine-0", "engine-hung",
                                   ("engine-0", "running/queued", "0 running, 0 queued")))
    assert imp["can_explain"] is True and "may explain run B's engine-hung at engine-0" in imp["text"]


def test_a_setting_an_unanswered_endpoint_hides_is_not_read_rather_than_removed():
    broken = {**ENGINE_A, "settings": {"version": "1"},
              "read": {**ENGINE_A["read"], "/server_info": "no answer within the 2 s deadline"}}
    [delta] = deltas({"engine-0": ENGINE_A}, {"engine-0": broken})
    assert delta["change"] == "not read in run B" and delta["note"] == "/server_info: no answer within the 2 s deadline"
    answered = {**ENGINE_A, "settings": {"version": "1"}}
    [delta] = deltas({"engine-0": ENGINE_A}, {"engine-0": answered})
    assert delta["change"] == "removed"


# --- folders it cannot compare --------------------------------------------------------------------


@pytest.mark.network
def test_a_folder_without_a_run_log_or_without_a_record_is_a_one_line_error(tmp_path):
    (tmp_path / "empty").mkdir()
    old = RunLogWriter(tmp_path / "old")  # a run log from before deployment records: a header only
    old.write(ev.RunStarted(t=0.0, config={}, versions={}, monotonic_origin=0.0, wall_clock_origin=0.0))
    old.close()
    for folder, words in (("empty", "no run log at"), ("old", "holds no deployment record")):
        out = repro("diff", str(tmp_path / folder), str(tmp_path / folder))
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1, out.stderr
        assert str(tmp_path / folder) in lines[0] and words in lines[0]


def test_endpoints_unread_in_either_run_are_not_compared_never_the_same():
    unread = {"role": "engine", "url": "u", "settings": {},
              "read": {"/server_info": "no answer within the deadline", "/version": "not exposed (http 404)",
                       "/v1/models": "error: connection refused"}}
    found = deltas({"e": unread}, {"e": unread})
    assert [(d["key"], d["change"]) for d in found] == [("/server_info", "not compared"), ("/v1/models", "not compared")]
    assert implication_line(found[0], {"count": 1, "of": 1, "run": "B", "kind": "k", "where": "w", "side": "server",
                                       "can_explain": None, "reason": "r"}).startswith(
        "e /server_info not compared: run A no answer within the deadline; run B no answer within the deadline")
    # Read in one run only: the settings it gave are listed as not read in the other, once.
    read = {**unread, "settings": {"server_info.x": 1}, "read": {**unread["read"], "/server_info": "ok"}}
    assert [(d["key"], d["change"]) for d in deltas({"e": unread}, {"e": read})] == [
        ("server_info.x", "not read in run A"), ("/v1/models", "not compared")]
    # "not exposed" on both sides is an answer: nothing to say.
    exposed = {**unread, "read": {"/version": "not exposed (http 404)"}}
    assert deltas({"e": exposed}, {"e": exposed}) == []
