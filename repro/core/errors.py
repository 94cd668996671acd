"""One base for every error a user can fix: `repro` prints its one-line message and exits 2.

Each concept keeps its own subclass where it is defined (TopologyError beside Hop, FaultSpecError
beside the fault-spec grammar, ...), so callers can catch what they expect; `cli.main` catches the
base in one place, and no message text is ever matched to decide what an error is.
"""

from __future__ import annotations


class ReproError(Exception):
    """Bad input or an unusable environment; the message is one line naming the input and the fix."""


class UsageError(ReproError):
    """A command-line flag or argument that cannot be used as given."""
