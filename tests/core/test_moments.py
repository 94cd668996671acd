"""--since/--until moments: ISO-8601 (a zone, or local time said so) or before now; anything else is one line."""

from __future__ import annotations

import time

import pytest

from repro.core.errors import UsageError
from repro.core.moments import FORMS, parse_moment

NOW = 1796464800.0  # 2026-12-05T10:00:00Z


@pytest.mark.parametrize(("text", "wall", "said"), [
    ("2026-12-05T09:30Z", NOW - 1800, "2026-12-05T09:30:00Z"),
    ("2026-12-05T09:30:15+00:00", NOW - 1785, "2026-12-05T09:30:15Z"),
    ("2026-12-05T10:30+01:00", NOW - 1800, "2026-12-05T09:30:00Z"),
    ("-30m", NOW - 1800, "2026-12-05T09:30:00Z (30m before now)"),
    ("-1h", NOW - 3600, "2026-12-05T09:00:00Z (1h before now)"),
    ("-2d", NOW - 2 * 86400, "2026-12-03T10:00:00Z (2d before now)"),
    ("-1.5h", NOW - 5400, "(1.5h before now)"),
    ("-90s", NOW - 90, "(90s before now)"),
])
def test_forms_read(text, wall, said):
    moment, read_as = parse_moment(text, flag="--since", now=NOW)
    assert moment == wall and said in read_as


def test_a_time_without_a_zone_is_local_and_says_so(monkeypatch):
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    try:
        moment, read_as = parse_moment("2026-12-05T10:30", flag="--since", now=NOW)
    finally:
        monkeypatch.undo()  # the zone as it was, for the tests that follow
        time.tzset()
    assert moment == NOW - 1800  # 10:30 in Paris in December is 09:30 UTC
    assert read_as == "2026-12-05T09:30:00Z (local time UTC+01:00)"


@pytest.mark.parametrize("text", ["yesterday", "1h", "-1w", "+1h", "2026-13-05", "10:00Z", ""])
def test_anything_else_names_the_flag_and_the_forms(text):
    with pytest.raises(UsageError) as caught:
        parse_moment(text, flag="--until", now=NOW)
    message = str(caught.value)
    assert message.startswith(f"--until {text!r} is not a time") and FORMS in message and "\n" not in message
