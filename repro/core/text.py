"""How numbers and secrets appear in anything a person reads: one rule each, used everywhere."""

from __future__ import annotations

REDACTED = "[redacted]"


def number(value: float | int | None, missing: str = "-") -> str:
    """A count or a rate as people write it: 3, 2.5, 0.33 (never 3.0 or 0.3333333)."""
    if value is None:
        return missing
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")


def without_secret(text: str, secret: str | None) -> str:
    """A server may echo the key back (a 401 page that quotes the header): never keep it."""
    return text.replace(secret, REDACTED) if secret else text
