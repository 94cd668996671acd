"""What a conversation sends, round after round: a growing history, kept as an agent loop keeps it.

Like an agent loop, each round appends the user turn and then the real assistant reply, so
the prompt grows round after round and the engine sees the true multi-turn shape. When a reply
asks for tools, the loop appends the assistant message with its `tool_calls` and one synthetic
`tool` result per call, and the next round continues from those results with no new user turn:
that is what an agent harness does, and how its histories grow. A recorded transcript
(repro/load/prompts.py) is replayed as it was sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from repro.load.prompts import PromptSource, Transcript, message_chars
from repro.load.tools import is_json_object, tool_result


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
            if is_json_object(arguments):
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
