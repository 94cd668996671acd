"""Where a conversation's turns come from: a deterministic generator, or a prompts file (JSONL) of
user turns or of recorded agent transcripts (messages with tool calls and tool results, replayed
as the harness sent them, one round per model call).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from repro.core.errors import ReproError
from repro.load.tools import is_json_object

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

ROLES = ("system", "developer", "user", "assistant", "tool")


class PromptFileError(ReproError, ValueError):
    """A prompts file that cannot be used; one line naming the file, line and fix."""


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
            if not is_json_object(function.get("arguments")):
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
