"""Where the user turns come from, and a conversation's growing history.

Like an agent loop, each round appends the user turn and then the real assistant reply, so
the prompt grows round after round and the engine sees the true multi-turn shape.
"""

from __future__ import annotations

import json
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


class PromptFileError(ReproError, ValueError):
    """A prompts file that cannot be used; one line naming the file, line and fix."""


@dataclass
class PromptSource:
    """User turns per conversation: from a JSONL file, or a deterministic built-in generator."""

    conversations: list[list[str]] = field(default_factory=list)
    prompt_chars: int = 200

    def user_turn(self, conv: int, round_index: int) -> str:
        if self.conversations:
            turns = self.conversations[conv % len(self.conversations)]
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
    """JSONL, one conversation per line: {"turns": ["...", ...]} or an OpenAI-style
    {"messages": [{"role": "user", "content": "..."}, ...]} (its user turns are used)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PromptFileError(f"cannot read prompts file {path}: {exc.strerror}; pass an existing JSONL file") from None
    conversations: list[list[str]] = []
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
            turns = [m.get("content") for m in item["messages"] if isinstance(m, dict) and m.get("role") == "user"]
        if not turns or not all(isinstance(t, str) and t for t in turns):
            raise PromptFileError(
                f'{path}:{number}: expected {{"turns": ["..."]}} or {{"messages": [{{"role": "user", "content": "..."}}]}} with non-empty strings'
            )
        conversations.append(turns)
    if not conversations:
        raise PromptFileError(f"{path}: no conversations found; add one JSON object per line")
    return PromptSource(conversations=conversations)


@dataclass
class History:
    messages: list[dict[str, str]] = field(default_factory=list)
    # Kept as messages come and go: summing the whole history every round grows with the history.
    chars: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.chars = sum(len(m["content"]) for m in self.messages)

    def ask(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})
        self.chars += len(text)

    def answer(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})
        self.chars += len(text)

    def withdraw_question(self) -> None:
        """A round that got no reply: drop its user turn so the history stays well-formed."""
        if self.messages and self.messages[-1]["role"] == "user":
            self.chars -= len(self.messages.pop()["content"])
