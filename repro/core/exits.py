"""Exit status of `repro` commands (the contract scripts rely on; README "Exit status")."""

from __future__ import annotations

from collections.abc import Iterable

EXIT_OK = 0  # every round completed; triage: nothing stuck
EXIT_TOOL_FAILED = 1  # the tool itself failed
EXIT_USAGE = 2  # a ReproError: bad input, one line on stderr
EXIT_CLIENT_SIDE = 10
EXIT_SERVER_SIDE = 11
EXIT_SIDE_UNKNOWN = 12
EXIT_INTERRUPTED = 130


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
