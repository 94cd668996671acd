"""`repro wrap` on the real harnesses from npm (pinned in tests/support/npm_harness.py), behind a
proxy that holds each connection's third request (`--inject wedge-after=2`):

- opencode, a Bun program that reads its engine's URL from opencode.json: `--config-template`
  renders it with the fault proxy's URL, and the project's folder must be left as it was;
- Claude Code (Node), pointed by ANTHROPIC_BASE_URL, on the Messages API (`--api messages`).

The simulated engine answers with tool calls reading a file of the project, so each harness runs a
real multi-round agent loop over its pooled connection. The verdict must name the proxy, client side."""

from __future__ import annotations

import json

import pytest

from repro.sim import SimConfig, serve_in_thread
from tests.support.npm_harness import installed, offline_env
from tests.support.stacks import nginx, started
from tests.support.waiting import wait_for
from tests.support.wrapping import WrapProcess, agent_project, logged, opencode_project, real_harness, run_wrap

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(240)]


def opencode_events(lines: list[dict]) -> list[str]:
    return [line.get("type") for line in lines]


def test_opencode_behind_a_wedging_proxy_is_judged_client_side_at_the_proxy(tmp_path):
    project = opencode_project(tmp_path, "sim-model")
    config = SimConfig(reply_tokens=10, tool_rounds=4, tool_name="read", tool_path=str(project.notes))
    with serve_in_thread(config) as sim:
        out = run_wrap("--hop", f"name=engine-0,url={sim.url}", "--inject", "wedge-after=2",
                       "--config-template", str(project.template), "--cwd", str(project.folder),
                       "--stall-after", "2", "--window", "1.5", "--canary-timeout", "2", "--stop-on-verdict",
                       "--out", str(tmp_path / "run"), "--json", "--", *project.command, env=project.env, timeout=150)
    events = opencode_events(out.harness_lines)
    # opencode ran its loop through the proxy (a tool call read the file) before the held request.
    assert "tool_use" in events, out.stderr[-3000:]
    assert out.verdicts == [("client", "proxy", "connection-wedged")], out.stderr[-3000:]
    assert out.code == 10
    judged = [s for s in out.result["stalls"] if s["verdicts"]]
    assert len(judged) == 1
    stall = judged[0]
    assert stall["hop"] == "proxy" and stall["phase"] == "before-first-byte"
    # opencode may think for longer than --stall-after between rounds (its first ones, on a cold
    # start) with its answer read and the connection kept: no hop holds it, so no verdict for it.
    assert all(s["phase"] == "mid-stream" for s in out.result["stalls"] if not s["verdicts"])
    # The rendered opencode.json was removed again (there was none before): the folder as it was.
    assert sorted(p.name for p in project.folder.iterdir()) == [".git", "notes.txt"]
    assert json.loads(project.template.read_text())["provider"]["local"]["options"]["baseURL"] == "{proxy_url}/v1"


def test_claude_code_behind_a_wedging_proxy_is_judged_client_side_at_the_proxy(tmp_path):
    claude = str(installed("claude"))
    (tmp_path / "home").mkdir()
    notes = tmp_path / "notes.txt"
    notes.write_text("the notes of this test\n")
    env = {**offline_env(tmp_path / "home"), "ANTHROPIC_API_KEY": "sk-any"}
    config = SimConfig(reply_tokens=10, tool_rounds=4, tool_name="Read", tool_path=str(notes))
    with serve_in_thread(config) as sim:
        out = run_wrap("--hop", f"name=engine-0,url={sim.url}", "--inject", "wedge-after=2", "--api", "messages",
                       "--cwd", str(tmp_path), "--stall-after", "2", "--window", "1.5", "--canary-timeout", "2",
                       "--stop-on-verdict", "--out", str(tmp_path / "run"), "--json", "--",
                       claude, "-p", "read notes.txt", "--output-format", "stream-json", "--verbose",
                       "--allowedTools", "Read", env=env, timeout=150)
    # Claude Code read the file through the proxy (a tool result) before the held request.
    assert any(line.get("type") == "user" for line in out.harness_lines), out.stderr[-3000:]
    assert out.verdicts == [("client", "proxy", "connection-wedged")], out.stderr[-3000:]
    assert out.code == 10
    stall = next(s for s in out.result["stalls"] if s["verdicts"])
    # Its rounds come about 0.1 s apart: two within one 0.25 s poll are counted as one (docs/wrap.md),
    # so the held request is not told by its number here, only by where it is held.
    assert stall["hop"] == "proxy" and stall["phase"] == "before-first-byte"


# --- each way a run ends, on both harnesses, against one simulated engine -----------------------
#
# The module's engine runs every test's agent loop: four tool rounds reading notes.txt (opencode's
# tool is `read`, Claude Code's `Read`), then a short text answer. Faults are armed on it at
# runtime (the sim's `arm`, as POST /sim/fault) once the harness has shown its loop going round,
# and lifted after each test. (Left alone, opencode also sends a title request at its start, on a
# connection of its own: the first request on /v1/chat/completions; Claude Code sends its rounds
# one after another on one connection.)

HARNESSES = ("opencode", "claude")
TOOL_ROUNDS = 4
# Short judgements: one second of hop metrics, a hung hop's canary given up after 1.5 s.
QUICK = ("--stall-after", "1.5", "--window", "1", "--canary-timeout", "1.5")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return agent_project(tmp_path_factory.mktemp("agent") / "project")


@pytest.fixture(scope="module")
def shared_engine(project):
    config = SimConfig(reply_tokens=16, tool_rounds=TOOL_ROUNDS, tool_name="read,Read",
                       tool_path=str(project / "notes.txt"))
    with serve_in_thread(config) as sim:
        yield sim


@pytest.fixture
def engine(shared_engine):
    """The module's engine, no fault armed before the test nor left after it."""
    shared_engine.arm(None)
    yield shared_engine
    shared_engine.arm(None)


def judged(out) -> dict:
    """The one stall with verdicts."""
    stalls = [s for s in out.result["stalls"] if s["verdicts"]]
    assert len(stalls) == 1, out.result["stalls"]
    return stalls[0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", HARNESSES)
def test_a_hung_engine_is_judged_server_side_at_the_engine(name, engine, project, tmp_path):
    harness = real_harness(name, project, tmp_path / "home", engine.url)
    wrap = WrapProcess("--hop", f"name=engine-0,url={engine.url}", *harness.wrap_args, *QUICK, "--stop-on-verdict",
                       "--json", "--out", str(tmp_path / "run"), "--", *harness.argv, env=harness.env)
    try:
        wrap.wait_for_line(harness.ran_its_loop, "tool round", timeout=60)
        engine.arm("hang")  # from now on: requests admitted, running, and no token
        out = wrap.finish(timeout=60)
    finally:
        wrap.kill()
    assert out.verdicts == [("server", "engine-0", "engine-hung")], out.stderr[-3000:]
    assert out.code == 11
    stall = judged(out)
    assert stall["hop"] == "engine-0" and stall["phase"] == "mid-stream"  # the headers came, no token


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", HARNESSES)
def test_a_frozen_nginx_is_judged_client_side_at_nginx(name, engine, project, tmp_path):
    with started(nginx, engine.url, tmp_path / "nginx") as proxy:
        harness = real_harness(name, project, tmp_path / "home", proxy.url)
        wrap = WrapProcess("--hop", f"name=nginx,url={proxy.url},role=proxy", "--hop", f"name=engine-0,url={engine.url}",
                           *harness.wrap_args, *QUICK, "--stop-on-verdict", "--json", "--out", str(tmp_path / "run"),
                           "--", *harness.argv, env=harness.env)
        try:
            wrap.wait_for_line(harness.ran_its_loop, "tool round", timeout=60)
            # The next round caught in flight: held at the engine's door until nginx is frozen, then
            # answered by the engine into nginx, which relays nothing more.
            engine.arm("lose")
            wait_for(lambda: engine.state()["parked"], timeout=30, what="a round held at the engine", every=0.02)
            proxy.freeze()
            engine.arm(None)
            out = wrap.finish(timeout=60)
        finally:
            proxy.thaw()
            wrap.kill()
    # Client side, at nginx, holding the response: the hops' sockets show the engine's answer back
    # in nginx's connection out, though the harness has no byte of it.
    assert out.verdicts == [("client", "nginx", "response-withheld")], out.stderr[-3000:]
    assert out.code == 10
    stall = judged(out)
    assert stall["hop"] == "nginx" and stall["phase"] == "before-first-byte"


# Streamed 12 times slower than it is (60 ms a token): each answer takes over a second.
SLOW = "slow=12"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", HARNESSES)
def test_healthy_long_answers_have_no_verdict_and_the_harness_own_exit(name, engine, project, tmp_path):
    engine.arm(SLOW)
    harness = real_harness(name, project, tmp_path / "home", engine.url)
    out = run_wrap("--hop", f"name=engine-0,url={engine.url}", *harness.wrap_args, "--stall-after", "1", *QUICK[2:],
                   "--json", "--out", str(tmp_path / "run"), "--", *harness.argv, env=harness.env, timeout=100)
    assert out.code == 0 and out.result["harness_exit"] == 0, out.stderr[-3000:]
    assert out.verdicts == [] and not out.result["interrupted"] and not out.result["bounded"]
    # Its whole loop ran: every tool round, then its answer.
    assert sum(1 for line in out.harness_lines if harness.ran_its_loop(line)) == TOOL_ROUNDS
    assert harness.answered(out.harness_lines)
    # Answers streamed for longer than --stall-after: never a stall while bytes come.
    done = logged(tmp_path / "run", "round_done")
    assert max(d["duration_s"] for d in done) > 1.0, done
    # Quiet pauses between rounds (the harness at work, its answer read) get no verdict either.
    assert all(not s["verdicts"] for s in out.result["stalls"])


# A request refused with a 400 (not retried: a client error) once the loop has gone round. opencode
# sends its title request beside its first round, in either order (under load, now and then more
# than one before its first tool call): three pass, and its loop of five rounds still meets the 400.
# Counted across connections (opencode's pool reuses the title's for its rounds, or not), so nothing
# else may pass the proxy first: no stall may be judged before (a judgement's canary goes through it
# too), hence a --stall-after longer than opencode's start.
REFUSED = {"opencode": "status=400,after=3,path=/v1/chat/completions", "claude": "status=400,after=1,path=/v1/messages"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", HARNESSES)
def test_a_harness_giving_up_on_a_refused_round_passes_its_code_through(name, engine, project, tmp_path):
    harness = real_harness(name, project, tmp_path / "home", None)
    out = run_wrap("--hop", f"name=engine-0,url={engine.url}", "--inject", REFUSED[name], *harness.wrap_args,
                   "--stall-after", "20", *QUICK[2:], "--json", "--out", str(tmp_path / "run"), "--", *harness.argv,
                   env=harness.env, timeout=100)
    assert any(harness.ran_its_loop(line) for line in out.harness_lines), (out.harness_lines, out.stderr[-3000:])
    # It said it gave up on the 400 (opencode's `error` line, Claude Code's error result), and exited 1.
    assert harness.gave_up_on(out.harness_lines) == 400, out.harness_lines[-2:]
    assert out.code == 1 and out.result["harness_exit"] == 1, out.stderr[-3000:]
    assert out.verdicts == [] and out.result["stalls"] == []
