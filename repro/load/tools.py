"""The tool definitions a round sends (`--tools N`) and the tool results an agent loop answers with.

The definitions are the shapes coding and operations agents offer their models (Claude Code's,
OpenHands' and SWE-agent's), in the OpenAI `tools` format; a result is a plausible, deterministic
output for a call, so that a history grows as an agent harness's does.
"""

from __future__ import annotations

import json
import zlib

from repro.core.errors import ReproError

MAX_TOOLS = 128  # OpenAI's limit on `tools` per request


class ToolCountError(ReproError, ValueError):
    """A number of tool definitions that cannot be sent."""


def _string(description: str) -> dict:
    return {"type": "string", "description": description}


def _integer(description: str) -> dict:
    return {"type": "integer", "description": description}


def _tool(name: str, description: str, properties: dict, required: tuple[str, ...]) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": list(required)}}}


# What coding and operations agents offer their models (the shapes of Claude Code's, OpenHands'
# and SWE-agent's tools, in the OpenAI `tools` format).
_CATALOGUE = (
    _tool("read_file", "Read a text file of the repository, optionally a range of lines.",
          {"path": _string("path relative to the repository root"), "start_line": _integer("first line, 1-based"),
           "end_line": _integer("last line, inclusive")}, ("path",)),
    _tool("run_shell", "Run a shell command in the workspace and return its output.",
          {"command": _string("the command line"), "timeout_s": _integer("seconds before it is killed")},
          ("command",)),
    _tool("search_code", "Search the repository for a regular expression.",
          {"pattern": _string("regular expression"), "path": _string("directory to search")}, ("pattern",)),
    _tool("edit_file", "Replace one exact occurrence of a text in a file.",
          {"path": _string("file to edit"), "old_text": _string("text to replace"),
           "new_text": _string("replacement")}, ("path", "old_text", "new_text")),
    _tool("list_directory", "List the entries of a directory.", {"path": _string("directory")}, ("path",)),
    _tool("run_tests", "Run the test suite or a part of it.",
          {"target": _string("test file or node id"), "verbose": {"type": "boolean"}}, ("target",)),
    _tool("write_file", "Create or overwrite a file.",
          {"path": _string("file to write"), "content": _string("the whole new content")}, ("path", "content")),
    _tool("find_files", "Find files whose path matches a glob.", {"glob": _string("e.g. src/**/*.py")}, ("glob",)),
    _tool("git_diff", "Show the uncommitted changes.",
          {"path": _string("limit to this path"), "staged": {"type": "boolean"}}, ()),
    _tool("read_logs", "Read the last lines of a service's log.",
          {"service": {"type": "string", "enum": ["api", "router", "engine", "proxy"]},
           "lines": _integer("how many lines")}, ("service",)),
    _tool("get_metrics", "Read a Prometheus metric from a service.",
          {"service": {"type": "string", "enum": ["router", "engine"]}, "name": _string("metric name")},
          ("service", "name")),
    _tool("todo_write", "Replace the task list.",
          {"items": {"type": "array", "items": {"type": "string"}}}, ("items",)),
)


def tool_definitions(count: int) -> list[dict]:
    """`count` function tools in the OpenAI `tools` format, the same ones every time: a harness's
    catalogue, then numbered variants of it when more are asked for than it holds."""
    if not 0 <= count <= MAX_TOOLS:
        raise ToolCountError(f"--tools {count}: give 0 to {MAX_TOOLS} tool definitions (OpenAI accepts at most {MAX_TOOLS})")
    tools = []
    for i in range(count):
        base = _CATALOGUE[i % len(_CATALOGUE)]
        copy = i // len(_CATALOGUE)
        if copy == 0:
            tools.append(base)
            continue
        function = base["function"]
        tools.append({"type": "function", "function": {
            **function, "name": f"{function['name']}_{copy + 1}",
            "description": f"{function['description']} (workspace {copy + 1})"}})
    return tools


_RESULT_LINES = (
    "def handle(request):", "    return dispatch(request.path)", "ok: 14 passed in 0.82s",
    "router.py:212: pending = queue.get(timeout=30)", "2025-06-01T10:02:11Z INFO request completed status=200",
    "src/server/stream.py", "    raise TimeoutError('no token within 30 s')", "M  repro/load/driver.py",
    "engine: num_running_reqs 12, num_queue_reqs 0", "import asyncio", "# TODO: bound this wait",
)


def tool_result(name: str, arguments: str, max_chars: int) -> str:
    """A plausible, deterministic tool output for a call, between half of `max_chars` and all of it."""
    seed = zlib.crc32(f"{name}\0{arguments}".encode())
    size = max_chars // 2 + seed % (max_chars // 2 + 1)
    lines = [f"[{name} exit=0]"]
    length = len(lines[0])
    state = seed
    while length < size:
        state = (state * 1103515245 + 12345) & 0x7FFFFFFF  # an LCG: its high bits pick the line
        line = _RESULT_LINES[(state >> 16) % len(_RESULT_LINES)]
        lines.append(line)
        length += len(line) + 1
    return "\n".join(lines)[:size]


def is_json_object(text) -> bool:
    """Whether a tool call's arguments are what engines accept: a JSON object, encoded as a string."""
    if not isinstance(text, str):
        return False
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False
