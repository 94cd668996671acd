"""What became of one harness run under one fault, read from what the harness printed and its exit.

Pure: `repro harness` hands in the exit code (None while the harness was still running when the
per-fault limit stopped it), its output and whether it printed the final answer. Three outcomes:
recovered (finished despite the fault), failed clearly (non-zero exit in bounded time: its last
line, secrets masked, is the error an operator sees) and hung (still running at the limit: the
harness has no idle timeout for this fault).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class HarnessOutcome(Enum):
    RECOVERED = "recovered"
    FAILED_CLEARLY = "failed clearly"
    HUNG = "hung"
    FAILED_SILENTLY = "failed silently"   # exit 0 without the final answer: the worst case


@dataclass(frozen=True)
class HarnessReading:
    outcome: HarnessOutcome
    last_line: str          # the last non-blank line printed, secrets masked ("" if none)
    exit_code: int | None   # None: stopped by repro at the limit


# Why a pattern and not a parser: harnesses print keys inside free text (error messages, URLs).
_SECRET = re.compile(
    r"(?i)((?:authorization|x-api-key|api[_-]?key)\s*[:=]\s*[\"']?(?:bearer\s+)?)[^\s,\"'}]+"
    r"|\b(sk-[A-Za-z0-9_-]{6,})")


def mask_secrets(text: str) -> str:
    """Replace API keys and Authorization values with `***`, keeping the name that precedes them."""
    return _SECRET.sub(lambda m: (m.group(1) + "***") if m.group(1) else "***", text)


def last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return mask_secrets(lines[-1]) if lines else ""


def read_outcome(exit_code: int | None, output: str, answered: bool) -> HarnessReading:
    """Classify one run: `answered` says the harness printed the final answer the sim scripted."""
    line = last_line(output)
    if exit_code is None:
        outcome = HarnessOutcome.HUNG
    elif exit_code == 0:
        outcome = HarnessOutcome.RECOVERED if answered else HarnessOutcome.FAILED_SILENTLY
    else:
        outcome = HarnessOutcome.FAILED_CLEARLY
    return HarnessReading(outcome=outcome, last_line=line, exit_code=exit_code)
