"""`repro wrap` run as a user runs it, for the tests of tests/wrap/: its exit, its one-line --json
(the last line of stdout), the harness's own stdout lines before it, and its stderr.

    out = run_wrap("--hop", f"name=engine-0,url={sim.url}", "--stall-after", "1.5", "--",
                   *openai_harness("{proxy_url}/v1", rounds=5))
    out.code, out.result["verdicts"], out.harness_lines, out.stderr

A wrap still running at its deadline is killed with its group (it started the harness in a group
of its own: that group too, by the pid the wrap's log names), and the test fails saying so.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support.harness_process import HARNESS, ROOT
from tests.support.npm_harness import cache_dir, installed, offline_env

WRAP_TIMEOUT_S = 60.0


@dataclass
class WrapRun:
    code: int
    result: dict
    harness_lines: list[dict]
    stderr: str

    @property
    def verdicts(self) -> list[tuple[str, str | None, str]]:
        return [(v["side"], v["where"], v["kind"]) for v in self.result.get("verdicts", [])]


def openai_harness(base_url: str, *, rounds: int, think: float = 0.3, client: str = "async") -> list[str]:
    """tests/harnesses/openai_chat.py's command: `rounds` streamed rounds, `think` s apart."""
    return [sys.executable, str(HARNESS), "--client", client, "--base-url", base_url, "--rounds", str(rounds),
            "--think", str(think)]


def wrap_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "repro", "wrap", *args]


def parsed(stdout: str, code: int, stderr: str) -> WrapRun:
    lines = [line for line in stdout.splitlines() if line.strip()]
    result = json.loads(lines[-1]) if lines and lines[-1].startswith('{"exit"') else {}
    harness_lines = []
    for line in lines[:-1] if result else lines:
        try:
            harness_lines.append(json.loads(line))
        except ValueError:
            continue
    return WrapRun(code, result, harness_lines, stderr)


def run_wrap(*args: str, env: Mapping[str, str] | None = None, timeout: float = WRAP_TIMEOUT_S) -> WrapRun:
    process = subprocess.Popen(wrap_command(*args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=ROOT, env=dict(env) if env is not None else None, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate(timeout=10)
        raise AssertionError(f"repro wrap still running after {timeout:g} s: {stderr[-2000:]}") from None
    return parsed(stdout, process.returncode, stderr)


class WrapProcess:
    """`repro wrap` running, its stdout read as it comes: for a test that acts mid-run (freezes a
    hop, sends Ctrl-C) once the harness has said how far it got."""

    def __init__(self, *args: str, env: Mapping[str, str] | None = None) -> None:
        self.process = subprocess.Popen(wrap_command(*args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                        env=dict(env) if env is not None else None, start_new_session=True)
        self.read: list[str] = []

    def wait_for(self, event: str, round_index: int, timeout: float = 30.0) -> None:
        """Until the openai-SDK harness prints that event of that round (its stdout passes through wrap's)."""
        self.wait_for_line(lambda said: (said.get("event"), said.get("round")) == (event, round_index),
                           f"{event} of round {round_index}", timeout)

    def wait_for_line(self, wanted: Callable[[dict], bool], what: str, timeout: float = 30.0) -> dict:
        """Until the harness prints a JSON line `wanted` says yes to; that line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            line = self.process.stdout.readline()
            if not line:
                break
            self.read.append(line)
            try:
                said = json.loads(line)
            except ValueError:
                continue
            if isinstance(said, dict) and wanted(said):
                return said
        raise AssertionError(f"no {what} within {timeout:g} s (exit {self.process.poll()}): {self.read[-3:]}")

    def finish(self, timeout: float = WRAP_TIMEOUT_S) -> WrapRun:
        try:
            stdout, stderr = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"repro wrap still running after {timeout:g} s") from None
        return parsed("".join(self.read) + stdout, self.process.returncode, stderr)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.communicate(timeout=10)


def logged(run_dir: Path, kind: str) -> list[dict]:
    """The events of that type (`round_done`, `run_finished`, ...) wrap's run log holds so far."""
    path = run_dir / "events.jsonl"
    found = []
    for line in (path.read_text().splitlines() if path.exists() else []):
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line being written
        if event.get("type") == kind:
            found.append(event)
    return found


OPENCODE_CONFIG = ('{"provider": {"local": {"npm": "@ai-sdk/openai-compatible", "name": "local", "options": '
                   '{"baseURL": "{proxy_url}/v1", "apiKey": "x"}, "models": {"MODEL": {"name": "MODEL"}}}}, '
                   '"model": "local/MODEL", "autoupdate": false, "share": "disabled"}')


@dataclass
class OpencodeProject:
    folder: Path  # the project: git-initialised, notes.txt in it
    template: Path  # opencode.json's template, {proxy_url} where its baseURL goes (outside the folder)
    env: dict[str, str]  # offline, HOME its own (the plugins opencode installed once shared from the cache)
    command: list[str]  # `opencode run` reading notes.txt

    @property
    def notes(self) -> Path:
        return self.folder / "notes.txt"


def agent_project(folder: Path) -> Path:
    """A folder a harness works in: git-initialised (opencode's walk up for its project stops
    there), notes.txt in it for the simulated engine's tool calls to read."""
    folder.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(folder)], check=True, timeout=30)
    (folder / "notes.txt").write_text("the notes of this test\n")
    return folder


def opencode_home(home: Path, folder: Path) -> dict[str, str]:
    """A fresh HOME for opencode run in `folder`, offline; its environment. opencode installs its
    own plugin packages into ~/.config/opencode on its first start (from npm): that folder is made
    once in the harness cache (`home-opencode`, by a first bounded run) and linked into each HOME."""
    shared = cache_dir() / "home-opencode"
    home.mkdir(parents=True)
    if not (shared / ".config" / "opencode").is_dir():
        shared.mkdir(parents=True, exist_ok=True)
        # Its first start, with no engine: it installs its plugins, then fails on the model; bounded.
        subprocess.run([str(installed("opencode")), "--version"], env={**offline_env(shared), "PWD": str(folder)},
                       cwd=folder, capture_output=True, timeout=300)
    if (shared / ".config").is_dir():
        (home / ".config").symlink_to(shared / ".config")
    return {**offline_env(home), "PWD": str(folder)}


def opencode_project(tmp: Path, model: str) -> OpencodeProject:
    """A project folder opencode runs in offline (`agent_project`, `opencode_home`), its
    opencode.json a template for --config-template."""
    folder = agent_project(tmp / "project")
    env = opencode_home(tmp / "home", folder)
    template = tmp / "opencode.json.template"
    template.write_text(OPENCODE_CONFIG.replace("MODEL", model))
    return OpencodeProject(folder, template, env, [str(installed("opencode")), "run", "--format", "json", "-m",
                                                   f"local/{model}", "read notes.txt"])


@dataclass
class RealHarness:
    """A real harness from npm set up to run one agent loop (read notes.txt) in a project folder,
    and what `repro wrap` must be told of it."""

    name: str  # opencode | claude
    argv: list[str]
    env: dict[str, str]
    wrap_args: list[str]  # --cwd; --api messages (Claude Code); --config-template (opencode, --inject)

    def ran_its_loop(self, line: dict) -> bool:
        """A line of its output saying a tool call was made and answered: its agent loop went round
        (opencode's `tool_use`, Claude Code's `user` line carrying the tool's result)."""
        return line.get("type") == ("tool_use" if self.name == "opencode" else "user")

    def answered(self, lines: list[dict]) -> bool:
        """It printed the model's text answer, the end of its loop (opencode's `text` line, Claude
        Code's `result` line with no error)."""
        if self.name == "opencode":
            return any(line.get("type") == "text" for line in lines)
        return any(line.get("type") == "result" and line.get("is_error") is False for line in lines)

    def gave_up_on(self, lines: list[dict]) -> int | None:
        """The HTTP status it said it gave up on (opencode's `error` line, Claude Code's `result`
        line with is_error), or None."""
        for line in lines:
            if self.name == "opencode" and line.get("type") == "error":
                return ((line.get("error") or {}).get("data") or {}).get("statusCode")
            if self.name == "claude" and line.get("type") == "result" and line.get("is_error"):
                return line.get("api_error_status")
        return None


def real_harness(name: str, folder: Path, home: Path, url: str | None, *, model: str = "sim-model") -> RealHarness:
    """`name` run in `folder` (an `agent_project`) with a fresh `home`, talking to `url` (the
    hop's origin, no /v1); None: to the fault proxy `repro wrap --inject` starts (Claude Code
    reads its URL from the variable wrap sets, opencode from the config wrap renders)."""
    if name == "opencode":
        env = opencode_home(home, folder)
        wrap_args = ["--cwd", str(folder)]
        config = OPENCODE_CONFIG.replace("MODEL", model)
        if url is None:
            template = home / "opencode.json.template"
            template.write_text(config)
            wrap_args += ["--config-template", str(template)]
        else:
            (folder / "opencode.json").write_text(config.replace("{proxy_url}", url))
        argv = [str(installed("opencode")), "run", "--format", "json", "-m", f"local/{model}", "read notes.txt"]
        return RealHarness(name, argv, env, wrap_args)
    home.mkdir(parents=True)
    env = {**offline_env(home), "ANTHROPIC_API_KEY": "sk-any", **({"ANTHROPIC_BASE_URL": url} if url else {})}
    argv = [str(installed("claude")), "-p", "read notes.txt", "--output-format", "stream-json", "--verbose",
            "--allowedTools", "Read"]
    return RealHarness(name, argv, env, ["--cwd", str(folder), "--api", "messages"])
