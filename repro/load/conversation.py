"""What a conversation sends, round after round: user turns, tool definitions, a growing history.

Like an agent loop, each round appends the user turn and then the real assistant reply, so
the prompt grows round after round and the engine sees the true multi-turn shape. When a reply
asks for tools, the loop appends the assistant message with its `tool_calls` and one synthetic
`tool` result per call, and the next round continues from those results with no new user turn:
that is what an agent harness does, and how its histories grow.

A prompts-file line may also be a recorded agent transcript (messages with tool calls and tool
results); it is replayed as the harness sent it, one round per model call.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from repro.core.errors import ReproError

_TASKS = (
    "List the files you would inspect next and why.",
    "Summarize what we learned so far in two sentences.",
    "Propose the next shell command to run, then explain the expected output.",
    "Review the previous answer for mistakes and correct them.",
    "Write a short unit test for the function we discussed.",
    "Which hypothesis is now most likely? Give evidence.",
    "Draft a commit message for the change so far.",
    "What would you check if this step fails?",
)

MAX_TOOLS = 128  # OpenAI's limit on `tools` per request
ROLES = ("system", "developer", "user", "assistant", "tool")


class PromptFileError(ReproError, ValueError):
    """A prompts file that cannot be used; one line naming the file, line and fix."""


class ToolCountError(ReproError, ValueError):
    """A number of tool definitions that cannot be sent."""


# --- tool definitions ---------------------------------------------------------------------------

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


# --- where the turns come from ------------------------------------------------------------------

def message_chars(message: dict) -> int:
    """Characters a message carries to the model: its text, and its tool calls' names and arguments."""
    content = message.get("content")
    if isinstance(content, str):
        chars = len(content)
    elif isinstance(content, list):  # content parts: only the text ones are counted
        chars = sum(len(part.get("text") or "") for part in content if isinstance(part, dict))
    else:
        chars = 0
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        chars += len(function.get("name") or "") + len(function.get("arguments") or "")
    return chars


@dataclass(frozen=True)
class Transcript:
    """A recorded agent session: its messages, and where the harness asked the model."""

    messages: tuple[dict, ...]
    calls: tuple[int, ...]  # per model call, how many messages it sent
    chars_before: tuple[int, ...]  # characters in the first k messages, for every k
    tools: tuple[dict, ...] = ()  # the tool definitions the harness sent, if recorded
    user_turns: tuple[str, ...] = ()


@dataclass
class PromptSource:
    """Per conversation, the user turns (a JSONL file or a deterministic generator) or a recorded
    transcript; and the tool definitions every round sends (`--tools N`)."""

    conversations: list[list[str] | Transcript] = field(default_factory=list)
    prompt_chars: int = 200
    tools: list[dict] = field(default_factory=list)
    tool_result_chars: int = 400  # the synthetic tool results' bound

    def conversation(self, conv: int) -> list[str] | Transcript | None:
        return self.conversations[conv % len(self.conversations)] if self.conversations else None

    def user_turn(self, conv: int, round_index: int) -> str:
        turns = self.conversation(conv)
        if isinstance(turns, Transcript):
            turns = list(turns.user_turns) or None
        if turns:
            text = turns[(round_index - 1) % len(turns)]
            if round_index > len(turns):
                text = f"{text} (again, round {round_index})"
            return text
        task = _TASKS[(conv * 7 + round_index) % len(_TASKS)]
        text = f"[conversation {conv} round {round_index}] {task} "
        filler = "Context: the service log shows requests completing normally. "
        while len(text) < self.prompt_chars:
            text += filler
        return text[: max(self.prompt_chars, len(task))]


def load_prompt_file(path: Path) -> PromptSource:
    """JSONL, one conversation per line: {"turns": ["...", ...]}, or an OpenAI-style
    {"messages": [{"role": "user", "content": "..."}, ...]} whose user turns are used, or, when its
    messages carry assistant `tool_calls` and `tool` results, a recorded agent transcript replayed
    as it was sent (an optional "tools" list beside the messages is sent with it)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PromptFileError(f"cannot read prompts file {path}: {exc.strerror}; pass an existing JSONL file") from None
    conversations: list[list[str] | Transcript] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptFileError(f"{path}:{number}: not JSON ({exc.msg}); each line must be one JSON object") from None
        turns = None
        if isinstance(item, dict) and isinstance(item.get("turns"), list):
            turns = item["turns"]
        elif isinstance(item, dict) and isinstance(item.get("messages"), list):
            messages = item["messages"]
            if any(isinstance(m, dict) and (m.get("role") == "tool" or m.get("tool_calls")) for m in messages):
                conversations.append(_transcript(messages, item.get("tools"), f"{path}:{number}"))
                continue
            turns = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        if not turns or not all(isinstance(t, str) and t for t in turns):
            raise PromptFileError(
                f'{path}:{number}: expected {{"turns": ["..."]}} or {{"messages": [{{"role": "user", "content": "..."}}]}} with non-empty strings'
            )
        conversations.append(turns)
    if not conversations:
        raise PromptFileError(f"{path}: no conversations found; add one JSON object per line")
    return PromptSource(conversations=conversations)


def _transcript(messages: list, tools, where: str) -> Transcript:
    """Check a recorded agent session against the OpenAI rules (every tool call answered by its
    tool message before the conversation goes on, every tool message answering a call) and find
    its model calls: after a user message, or after a block of tool results."""
    pending: dict[str, int] = {}  # call id -> the message (1-based) that made the call
    answered: set[str] = set()

    def unanswered(before: str) -> PromptFileError:
        call_id, k = next(iter(pending.items()))
        return PromptFileError(
            f"{where}: tool_call {call_id!r} of message #{k} has no tool message {before}; add "
            f'{{"role": "tool", "tool_call_id": "{call_id}", "content": "..."}} after message #{k}')

    for k, message in enumerate(messages, start=1):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            role = message.get("role") if isinstance(message, dict) else None
            raise PromptFileError(f"{where}: message #{k} has role {role!r}; use one of {', '.join(ROLES)}")
        role = message["role"]
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise PromptFileError(f"{where}: message #{k} content is {type(content).__name__}; use a string or null")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                again = "again" if call_id in answered else "which no earlier assistant tool_call has"
                raise PromptFileError(
                    f"{where}: message #{k} (tool) answers tool_call_id {call_id!r}, {again}; set tool_call_id "
                    "to the id of the assistant tool_call it answers, once per call")
            del pending[call_id]
            answered.add(call_id)
            continue
        if pending:
            raise unanswered(f"before message #{k} ({role})")
        calls = message.get("tool_calls")
        if calls is None:
            continue
        if role != "assistant" or not isinstance(calls, list):
            raise PromptFileError(f"{where}: message #{k} ({role}) has tool_calls; only an assistant message "
                                  "carries them, as a list")
        for i, call in enumerate(calls, start=1):
            function = call.get("function") if isinstance(call, dict) else None
            call_id = call.get("id") if isinstance(call, dict) else None
            if not isinstance(call_id, str) or not call_id or not isinstance(function, dict) \
                    or not isinstance(function.get("name"), str) or not function["name"]:
                raise PromptFileError(f'{where}: message #{k} tool_call #{i} needs an "id" and a "function" with a '
                                      'non-empty "name"; write it as {"id": "call_1", "type": "function", '
                                      '"function": {"name": "...", "arguments": "{}"}}')
            if call_id in pending or call_id in answered:
                raise PromptFileError(f"{where}: message #{k} tool_call #{i} reuses id {call_id!r}; give every "
                                      "call its own id")
            if not _is_json_object(function.get("arguments")):
                raise PromptFileError(f"{where}: message #{k} tool_call #{i} ({function['name']}) arguments must "
                                      'be a JSON object encoded as a string, e.g. "{\\"path\\": \\"a.py\\"}" '
                                      "(engines reject anything else)")
            pending[call_id] = k
    if pending:
        raise unanswered("at the end of the transcript")
    roles = [m["role"] for m in messages]
    # A model call: the history up to a user message or the last of a block of tool results,
    # where the next message is the model's (or the transcript ends, waiting for it).
    calls = tuple(cut for cut in range(1, len(roles) + 1)
                  if roles[cut - 1] in ("user", "tool") and (cut == len(roles) or roles[cut] == "assistant"))
    if not calls:
        raise PromptFileError(f"{where}: the transcript never asks the model (no user message or tool results "
                              "followed by an assistant message); add the user's request")
    if tools is not None and not (isinstance(tools, list) and all(
            isinstance(t, dict) and isinstance(t.get("function"), dict) and t["function"].get("name") for t in tools)):
        raise PromptFileError(f'{where}: "tools" must be a list of {{"type": "function", "function": '
                              '{"name": "...", "parameters": {...}}}; fix it or leave it out')
    chars = [0]
    for message in messages:
        chars.append(chars[-1] + message_chars(message))
    users = tuple(m["content"] for m in messages if m["role"] == "user" and isinstance(m.get("content"), str)
                  and m["content"])
    return Transcript(tuple(messages), calls, tuple(chars), tuple(tools or ()), users)


def _is_json_object(text) -> bool:
    if not isinstance(text, str):
        return False
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


# --- the history an agent loop keeps ------------------------------------------------------------

@dataclass
class History:
    """One conversation's messages as the next round sends them.

    A round is `start_round`, then `finish_round` with the reply, or `withdraw_question` when the
    round failed. `tools` is what the round sends beside the messages (None: no tools)."""

    messages: list[dict] = field(default_factory=list)
    # Kept as messages come and go: summing the whole history every round grows with the history.
    chars: int = field(init=False, default=0)
    tools: list[dict] | None = field(init=False, default=None)
    _added: int = field(init=False, default=0, repr=False)  # messages this round appended
    _continued: int = field(init=False, default=0, repr=False)  # rounds that asked no user turn
    _replaying: bool = field(init=False, default=False, repr=False)
    _result_chars: int = field(init=False, default=400, repr=False)

    def __post_init__(self) -> None:
        self.chars = sum(message_chars(m) for m in self.messages)

    @property
    def continues_from_tools(self) -> bool:
        """The last round ended in tool calls: the next one sends their results, no user turn."""
        return bool(self.messages) and self.messages[-1]["role"] == "tool"

    def start_round(self, prompts: PromptSource, conv: int, round_index: int) -> None:
        """Make the history what round `round_index` sends: the next user turn appended, unless
        the round continues from tool results; or, for a recorded transcript, its messages up to
        the model call this round replays (rounds past the last call start the transcript over)."""
        source = prompts.conversation(conv)
        self._added = 0
        self._result_chars = prompts.tool_result_chars
        if isinstance(source, Transcript):
            cut = source.calls[(round_index - 1) % len(source.calls)]
            self._replaying = True
            self.messages = list(source.messages[:cut])
            self.chars = source.chars_before[cut]
            self.tools = list(source.tools or prompts.tools) or None
            return
        self.tools = prompts.tools or None
        if self.continues_from_tools:
            self._continued += 1
            return
        # Rounds that continued from tool results used no user turn: the file's turns go in order.
        self.ask(prompts.user_turn(conv, round_index - self._continued))

    def finish_round(self, text: str, tool_calls: list[dict] | tuple = ()) -> None:
        """Append the reply; for each tool call, a synthetic tool result the next round sends.

        A replayed transcript keeps its recorded replies: the live one is not appended."""
        self._added = 0
        if self._replaying:
            return
        if not tool_calls:
            self.answer(text)
            return
        calls, results = [], []
        for i, call in enumerate(tool_calls):
            function = call.get("function") or {}
            name, arguments = function.get("name") or "", function.get("arguments") or ""
            # An id is what ties a result to its call; a server that sent none still gets a unique one.
            call_id = call.get("id") or f"call_r{len(self.messages)}_{i}"
            if _is_json_object(arguments):
                result = tool_result(name, arguments, self._result_chars)
            else:
                # A call cut short (finish_reason "length") or malformed: an agent reports the error,
                # and the history keeps arguments an engine accepts (SGLang rejects non-JSON ones).
                result = f"error: the arguments of {name or 'the call'} are not a JSON object ({len(arguments)} characters received)"
                arguments = "{}"
            calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
            results.append({"role": "tool", "tool_call_id": call_id, "content": result})
        self._append({"role": "assistant", "content": text or None, "tool_calls": calls})
        for message in results:
            self._append(message)

    def withdraw_question(self) -> None:
        """A round that got no reply: drop what it appended (its user turn) so the history stays
        well-formed. A round that continued from tool results appended nothing: the next round
        sends those results again, as an agent retries its model call."""
        for _ in range(self._added):
            self.chars -= message_chars(self.messages.pop())
        self._added = 0

    def ask(self, text: str) -> None:
        self._append({"role": "user", "content": text})
        self._added += 1

    def answer(self, text: str) -> None:
        self._append({"role": "assistant", "content": text})
        self._added = 0

    def _append(self, message: dict) -> None:
        self.messages.append(message)
        self.chars += message_chars(message)
