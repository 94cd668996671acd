"""Exit status of `repro` commands (the contract scripts rely on; docs/commands.md#exit-status)."""

from __future__ import annotations

from collections.abc import Iterable

EXIT_OK = 0  # every round completed; triage: nothing stuck that it can see
EXIT_TOOL_FAILED = 1  # the tool itself failed
EXIT_USAGE = 2  # a ReproError: bad input, one line on stderr
EXIT_CLIENT_SIDE = 10
EXIT_SERVER_SIDE = 11
EXIT_SIDE_UNKNOWN = 12
EXIT_INTERRUPTED = 130


EXIT_HELP = """exit status:
  0    every round completed (triage: nothing stuck that it can see)
  10   a stall or failure judged client-side (nothing server-side)
  11   a stall or failure judged server-side (wins over client-side)
  12   a round did not complete and no verdict has a side
  2    usage error (one line on stderr)
  1    the tool itself failed
  130  interrupted
The tally printed at the end (e.g. "3 rounds judged SERVER-SIDE at engine-0: engine-hung") explains it."""


def exit_for_sides(sides: Iterable[str | None], *, trouble: bool) -> int:
    """Server-side wins over client-side wins over unknown; 0 only with no verdict and no trouble."""
    found = set(sides)
    if "server" in found:
        return EXIT_SERVER_SIDE
    if "client" in found:
        return EXIT_CLIENT_SIDE
    if found or trouble:
        return EXIT_SIDE_UNKNOWN
    return EXIT_OK
