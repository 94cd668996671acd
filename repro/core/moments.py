"""A moment typed on the command line (`repro report --since/--until`): ISO-8601 or relative to now.

ISO-8601 is read by datetime.fromisoformat (Python 3.11+ takes `Z`, offsets, and dates alone); a
time without a zone is the machine's local time, and `stated` says so, so that the report never
leaves the zone to a guess. Relative: a minus sign, a number and a unit (s, m, h, d), before now.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from repro.core.errors import UsageError

FORMS = ("ISO-8601 (2026-12-05T10:00, 2026-12-05T10:00Z, 2026-12-05T10:00+01:00; without a zone: local time) "
         "or before now (-30m, -1h, -2d, -90s)")
_RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_moment(text: str, *, flag: str, now: float) -> tuple[float, str]:
    """(wall-clock epoch seconds, how the moment was read, e.g. '2026-12-05T09:00:00Z (local time
    UTC+01:00)' or '... (1h before now)'). A text that is neither form is a UsageError naming `flag`."""
    given = text.strip()
    relative = _RELATIVE.match(given)
    if relative:
        moment = now - float(relative[1]) * _UNIT_S[relative[2]]
        return moment, f"{utc_text(moment)} ({given[1:]} before now)"
    try:
        parsed = datetime.fromisoformat(given)
    except ValueError:
        raise UsageError(f"{flag} {text!r} is not a time: give {FORMS}") from None
    if parsed.tzinfo is None:
        local = parsed.astimezone()  # the machine's zone at that date (summer time included)
        return local.timestamp(), f"{utc_text(local.timestamp())} (local time {zone_text(local.utcoffset())})"
    return parsed.timestamp(), utc_text(parsed.timestamp())


def utc_text(wall: float) -> str:
    """A wall-clock moment as the user reads it back: UTC, to the second."""
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def zone_text(offset: timedelta | None) -> str:
    minutes = round((offset or timedelta()).total_seconds() / 60)
    sign = "-" if minutes < 0 else "+"
    return f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
