"""How a conversation's request grows a round, for `repro audit`'s projections: as given, from a
recorded run's prompts, from a prompts file (`repro run --prompts`), or repro run's defaults."""

from __future__ import annotations

import json
from pathlib import Path

from probes.hop_measurements import chat_body
from repro.core import events as ev
from repro.core.audit_measurements import CHARS_PER_TOKEN, Growth
from repro.core.errors import UsageError
from repro.io.runlog import read_run_log
from repro.load.prompts import Transcript, load_prompt_file

# The defaults of `repro run`: 200-character user turns and 32-token replies (about 4 characters a
# token), plus the JSON of two messages ({"role": "user", "content": ""}, ...): a round adds about this.
RUN_PROMPT_CHARS, RUN_MAX_TOKENS, MESSAGE_JSON_BYTES = 200, 32, 40
DEFAULT_GROWTH = RUN_PROMPT_CHARS + RUN_MAX_TOKENS * 4 + 2 * MESSAGE_JSON_BYTES


def growth_from(model: str, *, per_round: int | None = None, run: Path | None = None,
                prompts: Path | None = None) -> Growth:
    """How a conversation grows a round: as given, from a recorded run, from a prompts file, else
    repro run's defaults (at most one of them is given)."""

    first = len(chat_body(model, RUN_PROMPT_CHARS + MESSAGE_JSON_BYTES))
    if per_round is not None:
        if per_round <= 0:
            raise UsageError(f"--growth-per-round must be > 0, got {per_round}")
        return Growth(first, per_round, f"--growth-per-round {per_round}")
    if run is not None:
        return growth_of_run(run, first)
    if prompts is not None:
        return growth_of_prompts(prompts, model)
    return Growth(first, DEFAULT_GROWTH, f"repro run's defaults: {RUN_PROMPT_CHARS}-character turns, "
                                         f"{RUN_MAX_TOKENS}-token replies")


def growth_of_prompts(path: Path, model: str) -> Growth:
    """How the fastest-growing conversation of a prompts file (`repro run --prompts`) grows: user turns
    with repro run's default replies between them, or a recorded transcript's own model calls."""

    source = load_prompt_file(path)
    reply = RUN_MAX_TOKENS * CHARS_PER_TOKEN + MESSAGE_JSON_BYTES
    grown: list[tuple[float, int]] = []  # (bytes a round, first request's bytes), per conversation
    for conv in source.conversations:
        if isinstance(conv, Transcript):
            if len(conv.calls) < 2:
                continue
            # Each model call sends the history so far: its characters and each message's JSON.
            sizes = [conv.chars_before[cut] + cut * MESSAGE_JSON_BYTES for cut in conv.calls]
            tools = len(json.dumps(list(conv.tools))) if conv.tools else 0
            grown.append(((sizes[-1] - sizes[0]) / (len(sizes) - 1), len(chat_body(model, sizes[0])) + tools))
        else:
            per_round = sum(len(turn) for turn in conv) / len(conv) + MESSAGE_JSON_BYTES + reply
            grown.append((per_round, len(chat_body(model, len(conv[0]) + MESSAGE_JSON_BYTES))))
    if not grown:
        raise UsageError(f"--prompts {path}: no conversation with two model calls; give --growth-per-round BYTES")
    per_round, first = max(grown)
    return Growth(first, max(1, round(per_round)),
                  f"--prompts {path.name}: the fastest-growing of {len(grown)} conversation(s), "
                  f"replies of {RUN_MAX_TOKENS} tokens between user turns")


def growth_of_run(run_dir: Path, first: int) -> Growth:
    """The mean growth of a round's prompt, in characters, over the recorded run's conversations."""

    log = read_run_log(run_dir / "events.jsonl" if run_dir.is_dir() else run_dir)
    by_conv: dict[int, list[tuple[int, int]]] = {}
    for event in log.events:
        if isinstance(event, ev.RoundStarted):
            by_conv.setdefault(event.conv, []).append((event.round, event.prompt_chars))
    steps = []
    for rounds in by_conv.values():
        rounds.sort()
        if len(rounds) > 1:
            steps.append((rounds[-1][1] - rounds[0][1]) / (rounds[-1][0] - rounds[0][0]))
    if not steps:
        raise UsageError(f"--run {run_dir}: no conversation with two rounds started; give --growth-per-round BYTES")
    per_round = max(1, round(sum(steps) / len(steps)))
    return Growth(first, per_round, f"run {run_dir.name}: {len(steps)} conversation(s), mean prompt growth")
